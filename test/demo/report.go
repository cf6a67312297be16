package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/invariant"
)

// modelUse is the state of one GPU model's GPUs right now.
type modelUse struct {
	gpus, busyGPUs   int   // busy: held whole or by at least one share
	wholeGPUs        int   // held whole
	sharedGPUs       int   // holding shares
	fullGPUs         int   // shares fill it (free < 1 GiB)
	sharePods        int   // memory-share pods on this model
	capMiB, allocMiB int64 // memory; a whole GPU counts as fully allocated
	// strandedMiB is free memory on GPUs that hold shares: only shares can use it.
	strandedMiB, freeMiB int64
}

type usage struct {
	running, bound, pending int
	models                  map[string]*modelUse
	pendingPods             []corev1.Pod
}

// usage reads every pod's assignment and sums it per GPU and model.
func (d *demo) usage(ctx context.Context) (*usage, error) {
	pods, err := d.env.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	type gpuUse struct {
		model   string
		capMiB  int64
		usedMiB int64
		whole   bool
		shares  int
	}
	gpus := map[string]*gpuUse{}
	u := &usage{models: map[string]*modelUse{}}
	for _, m := range fleet {
		u.models[m.Name] = &modelUse{}
		for i := range m.Nodes {
			n := d.env.GPUNode(fmt.Sprintf("%s-%d", strings.ToLower(m.Name), i))
			if n == nil {
				continue
			}
			for _, g := range n.Topology.GPUs {
				gpus[g.UUID] = &gpuUse{model: m.Name, capMiB: int64(g.MemoryMiB)}
			}
		}
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if podreq.Terminal(p) || p.DeletionTimestamp != nil || p.Namespace == harness.SystemNamespace {
			continue // the harness's own objects (the extender's Pod records) are not users' pods
		}
		switch {
		case p.Status.Phase == corev1.PodRunning:
			u.running++
		case p.Spec.NodeName != "":
			u.bound++
		default:
			u.pending++
			u.pendingPods = append(u.pendingPods, *p)
		}
		a, err := podreq.Assignment(p, d.env.Names)
		if err != nil || a == nil || p.Spec.NodeName == "" {
			continue
		}
		for _, g := range a.GPUs {
			gu := gpus[g.UUID]
			if gu == nil {
				continue
			}
			if a.Whole {
				gu.whole = true
				continue
			}
			gu.usedMiB += int64(g.MemoryMiB)
			gu.shares++
			u.models[gu.model].sharePods++
		}
	}
	for _, gu := range gpus {
		m := u.models[gu.model]
		m.gpus++
		m.capMiB += gu.capMiB
		switch {
		case gu.whole:
			m.busyGPUs++
			m.wholeGPUs++
			m.allocMiB += gu.capMiB
		case gu.shares > 0:
			m.busyGPUs++
			m.sharedGPUs++
			m.allocMiB += gu.usedMiB
			free := gu.capMiB - gu.usedMiB
			m.freeMiB += free
			m.strandedMiB += free
			if free < int64(contract.DefaultMemoryUnitMiB) {
				m.fullGPUs++
			}
		default:
			m.freeMiB += gu.capMiB
		}
	}
	sort.Slice(u.pendingPods, func(i, j int) bool {
		return u.pendingPods[i].Namespace+"/"+u.pendingPods[i].Name < u.pendingPods[j].Namespace+"/"+u.pendingPods[j].Name
	})
	return u, nil
}

// report prints the closing report.
func (d *demo) report(ctx context.Context) error {
	u, err := d.usage(ctx)
	if err != nil {
		return err
	}
	nodes, gpuCount := 0, 0
	for _, m := range fleet {
		nodes += m.Nodes
		gpuCount += m.Nodes * m.Spec.Count
	}
	fmt.Printf("\n======== Rota demo report: Kubernetes %s, %d simulated nodes, %d GPUs, %s ========\n",
		d.env.Version, nodes, gpuCount, time.Since(d.began).Round(time.Second))

	// Pods.
	kinds := map[string]int{}
	for _, r := range d.rows {
		kinds[r.Kind]++
	}
	created, finished := d.tracker.counts()
	waits, placed := d.tracker.waits()
	denied := len(d.denialsCopy())
	training := 0
	for _, w := range trainingWork {
		training += w.count
	}
	fmt.Printf("Pods: %d submitted (openb trace: %d GPU shares, %d whole-GPU, %d CPU-only; training: %d; interns: %d), %d denied at admission;\n"+
		"      %d placed (%.0f%% of admitted), %d finished by the replay; now %d running, %d pending.\n",
		created, kinds["share"], kinds["whole"], kinds["cpu"], training, notebooks+1, denied, placed, pct(int64(placed), int64(created-denied)), finished,
		u.running+u.bound, u.pending)
	fmt.Println("Queue (team quota, reservation, backfill):")
	for _, l := range d.steps.summary() {
		fmt.Printf("  %s\n", l)
	}

	// GPU memory and fragmentation.
	fmt.Println("GPU memory allocated now, per model (a whole GPU counts as all of its memory):")
	for _, m := range fleet {
		mu := u.models[m.Name]
		fmt.Printf("  %-5s %2d GPUs: %2d held whole, %2d shared by %3d pods (%d full) | %6d of %6d GiB allocated (%3.0f%%)\n",
			m.Name, mu.gpus, mu.wholeGPUs, mu.sharedGPUs, mu.sharePods, mu.fullGPUs,
			mu.allocMiB/1024, mu.capMiB/1024, pct(mu.allocMiB, mu.capMiB))
	}
	fmt.Println("Fragmentation (free memory stranded on GPUs that hold shares, usable only by shares; whole-GPU pods need an empty GPU):")
	for _, m := range fleet {
		mu := u.models[m.Name]
		fmt.Printf("  %-5s %5d GiB free, %5d GiB of it stranded on %d partly used GPUs (%3.0f%% of free), %d GPUs empty\n",
			m.Name, mu.freeMiB/1024, mu.strandedMiB/1024, mu.sharedGPUs-mu.fullGPUs, pct(mu.strandedMiB, mu.freeMiB),
			mu.gpus-mu.busyGPUs)
	}

	// Waits.
	slices.Sort(waits)
	if len(waits) > 0 {
		q := func(f float64) time.Duration { return waits[min(len(waits)-1, int(f*float64(len(waits))))] }
		fmt.Printf("Waits, creation to bound (%d pods): p50 %s, p90 %s, p99 %s, max %s\n", len(waits),
			q(0.5).Round(10*time.Millisecond), q(0.9).Round(10*time.Millisecond), q(0.99).Round(10*time.Millisecond),
			waits[len(waits)-1].Round(10*time.Millisecond))
	}

	// Pending pods and why.
	fmt.Printf("Pending pods and why (a queued pod's %s condition, otherwise its newest FailedScheduling message; %d pods):\n",
		d.env.Names.QueuedCondition, len(u.pendingPods))
	reasons := map[string][]string{}
	events := map[string]map[string][]corev1.Event{}
	for _, p := range u.pendingPods {
		if events[p.Namespace] == nil {
			if events[p.Namespace], err = d.env.NamespaceEvents(ctx, p.Namespace, "FailedScheduling"); err != nil {
				return err
			}
		}
		msg := "(no FailedScheduling event yet)"
		if evs := events[p.Namespace][p.Name]; len(evs) > 0 {
			msg = evs[len(evs)-1].Message
		}
		if q, queued := d.steps.queuedMsg(&p); queued {
			msg = "queued: " + q
		}
		reasons[msg] = append(reasons[msg], p.Namespace+"/"+p.Name)
	}
	msgs := make([]string, 0, len(reasons))
	for m := range reasons {
		msgs = append(msgs, m)
	}
	sort.Slice(msgs, func(i, j int) bool { return len(reasons[msgs[i]]) > len(reasons[msgs[j]]) })
	for _, m := range msgs {
		fmt.Printf("  %s\n      -> %s\n", strings.Join(reasons[m], ", "), m)
	}

	// Denials.
	denials := d.denialsCopy()
	fmt.Printf("Webhook denials (%d):\n", len(denials))
	for _, s := range denials {
		fmt.Printf("  %s\n", s)
	}

	// Invariants.
	vs, err := invariant.Check(ctx, d.env.Client, invariant.Options{Names: d.env.Names, Quota: &d.quota, Grants: d.env.Grants()})
	if err != nil {
		return err
	}
	if len(vs) == 0 {
		fmt.Println("Invariant checker: no violations (GPU capacity, whole GPUs exclusive, gangs all-or-nothing, team quota, unhealthy GPUs, assignments).")
		return nil
	}
	fmt.Printf("Invariant checker: %d VIOLATIONS:\n%s\n", len(vs), invariant.Summary(vs))
	return fmt.Errorf("%d invariant violations", len(vs))
}

func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "no node"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
