// Command demo is `make demo`: it starts the local control plane (etcd,
// kube-apiserver, kube-scheduler) with Rota as the chart installs it, queue
// on (rota-extender, rota-admission with its queueing webhook,
// rota-device-plugin on some nodes), and a mixed fleet of simulated GPU
// nodes. It replays a time-compressed slice of the Alibaba openb trace
// (testdata/demo) of memory shares and whole GPUs; beside it the training
// team's 64-GPU gang waits for its leaf with a reservation while short
// work declaring its runtime backfills the held GPUs, and team interns
// asks for more than its quota and is queued with positions. It prints
// each step as it happens and ends with a report: pods placed, GPU memory
// allocated per model, fragmentation, waits, why every pending pod is
// pending, the webhook's denials, and the invariant checker's verdict.
// (`make demo` then runs the evaluation's short mixed scenario on Rota.)
//
//	go run ./test/demo [-keep] [-replay 75s]
//
// -keep leaves the control plane running (and prints its kubeconfig) until
// Ctrl-C. Binaries come from bin/ (make build) and .cache/k8s/bin (make k8s-tools).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
)

const (
	modelLabel = "rota.demo/gpu-model"
	traceNS    = "openb"
	trainNS    = "training"
	internNS   = "interns"
	// poolLabel marks the training team's dedicated nodes, which also
	// carry the taint dedicatedTaint=training:NoSchedule.
	poolLabel      = "rota.demo/pool"
	dedicatedTaint = "rota.demo/dedicated"
)

// demoQuota: the trace's namespace belongs to no team (unlimited); the
// training team may hold 128 GPUs; interns 2 GPUs and 16 GiB of shares.
const demoQuota = `teams:
  training:
    gpus: 128
  interns:
    gpus: 2
    gpuMemoryGiB: 16
sharedPool: {gpus: 0, gpuMemoryGiB: 0}
unknownTeams: unlimited
`

// The fleet: two leaves; H100 and H200 nodes of 8 GPUs in two NVLink
// islands of 4, and T4 nodes of 4 GPUs without NVLink. Leaf a's eight H100
// nodes are the training team's (labelled and tainted); the trace runs on
// the rest. One node of each model runs a real rota-device-plugin; the rest
// publish directly.
var fleet = []model{
	{Name: "H100", MemGiB: 80, Nodes: 10, Dedicated: 8, CPU: "128", Mem: "2Ti",
		Leaves: []string{"leaf-a", "leaf-a", "leaf-a", "leaf-a", "leaf-a", "leaf-a", "leaf-a", "leaf-a", "leaf-b", "leaf-b"},
		Spec:   harness.GPUNodeSpec{Model: "NVIDIA H100 80GB HBM3", Count: 8, MemoryMiB: 80 * 1024, IslandSize: 4, NUMA: 2}},
	{Name: "H200", MemGiB: 141, Nodes: 2, Leaves: []string{"leaf-b", "leaf-b"}, CPU: "128", Mem: "2Ti",
		Spec: harness.GPUNodeSpec{Model: "NVIDIA H200 141GB HBM3e", Count: 8, MemoryMiB: 141 * 1024, IslandSize: 4, NUMA: 2}},
	{Name: "T4", MemGiB: 15, Nodes: 4, Leaves: []string{"leaf-b", "leaf-b", "leaf-b", "leaf-b"}, CPU: "48", Mem: "384Gi",
		Spec: harness.GPUNodeSpec{Model: "Tesla T4", Count: 4, MemoryMiB: 15 * 1024}},
}

func main() {
	keep := flag.Bool("keep", false, "leave the control plane running (kubeconfig printed) until Ctrl-C")
	tracePath := flag.String("trace", "", "openb pod list to replay (default testdata/demo/openb_pod_list_default_slice.csv)")
	replay := flag.Duration("replay", 75*time.Second, "wall-clock time the trace slice is compressed into")
	minLife := flag.Duration("min-life", 5*time.Second, "shortest lifetime of a replayed pod")
	flag.Parse()
	klog.SetOutput(os.Stderr)
	if err := run(*keep, *tracePath, *replay, *minLife); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	env     *harness.Env
	began   time.Time
	rows    []*traceRow
	tracker *tracker
	quota   quota.Config
	steps   *steps

	mu      sync.Mutex
	denials []string
}

func (d *demo) logf(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(d.began).Seconds(), fmt.Sprintf(format, args...))
}

func run(keep bool, tracePath string, replay, minLife time.Duration) (err error) {
	d := &demo{began: time.Now()}
	if tracePath == "" {
		root, err := repoRoot()
		if err != nil {
			return err
		}
		tracePath = filepath.Join(root, "testdata", "demo", "openb_pod_list_default_slice.csv")
	}
	if d.rows, err = readTrace(tracePath); err != nil {
		return err
	}
	plan(d.rows, fleet, replay, minLife)
	if d.quota, err = config.ParseQuota([]byte(demoQuota)); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d.logf("starting etcd, kube-apiserver, rota-extender, rota-admission (queue on), kube-scheduler")
	d.env, err = harness.Start(ctx, harness.Options{Quota: demoQuota, Queueing: true, RemoveDir: !keep, Logf: d.logf})
	if err != nil {
		return err
	}
	defer func() {
		if keep && err == nil {
			fmt.Printf("\nControl plane left running: KUBECONFIG=%s kubectl get pods -A\n", d.env.Cluster.Kubeconfig)
			fmt.Printf("Logs in %s. Press Ctrl-C to stop it.\n", d.env.Dir)
			<-ctx.Done()
		}
		if stopErr := d.env.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()

	if err := d.createFleet(ctx); err != nil {
		return err
	}
	for ns, team := range map[string]string{traceNS: "", trainNS: "training", internNS: "interns"} {
		if err := d.env.CreateNamespace(ctx, ns, team); err != nil {
			return err
		}
	}
	if d.tracker, err = startTracker(ctx, d.env); err != nil {
		return err
	}
	// The training and interns pods sleep for their runtime; on the
	// simulated nodes the Sleeper ends them when it is over.
	sleeper := cluster.NewSleeper(d.env.Client, func(node string) bool { return d.env.GPUNode(node) != nil })
	if err := sleeper.Start(ctx); err != nil {
		return err
	}
	d.steps = newSteps(d)
	go d.steps.watch(ctx)
	if err := d.replay(ctx, replay); err != nil {
		return err
	}
	d.settle(ctx)
	d.steps.stop()
	return d.report(ctx)
}

// createFleet creates the nodes; the first node of each model runs a device plugin.
func (d *demo) createFleet(ctx context.Context) error {
	var specs []harness.GPUNodeSpec
	var desc []string
	for _, m := range fleet {
		for i := range m.Nodes {
			s := m.Spec
			s.Name = fmt.Sprintf("%s-%d", strings.ToLower(m.Name), i)
			s.Labels = map[string]string{modelLabel: m.Name, d.env.Names.Domain + "/leaf": m.Leaves[i]}
			if i < m.Dedicated {
				s.Labels[poolLabel] = trainNS
			}
			s.CPU, s.Memory = m.CPU, m.Mem
			s.Plugin = i == 0
			specs = append(specs, s)
		}
		desc = append(desc, fmt.Sprintf("%d x %s (%d GPUs, %d GiB)", m.Nodes, m.Name, m.Spec.Count, m.MemGiB))
	}
	if _, err := d.env.AddGPUNodes(ctx, specs...); err != nil {
		return err
	}
	for _, s := range specs {
		if s.Labels[poolLabel] == "" {
			continue
		}
		if err := d.taint(ctx, s.Name); err != nil {
			return err
		}
	}
	d.logf("fleet ready: %s; leaves leaf-a and leaf-b; leaf-a's 8 H100 nodes are the training team's (label %s=training, taint %s=training:NoSchedule); "+
		"h100-0, h200-0 and t4-0 run rota-device-plugin, the others publish their topology directly",
		strings.Join(desc, ", "), poolLabel, dedicatedTaint)
	return nil
}

// taint gives a node the training pool's NoSchedule taint.
func (d *demo) taint(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := d.env.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: dedicatedTaint, Value: trainNS, Effect: corev1.TaintEffectNoSchedule})
		_, err = d.env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// event is something the replay does at a time from its start.
type event struct {
	at time.Duration
	do func()
}

// replay creates and deletes the trace's pods at their compressed times,
// and adds the training team's and the interns' pods on the way.
func (d *demo) replay(ctx context.Context, replay time.Duration) error {
	var evs []event
	for _, r := range d.rows {
		evs = append(evs, event{at: r.CreateAt, do: func() { d.createRow(ctx, r) }})
		if r.DeleteDuringReplay {
			evs = append(evs, event{at: r.DeleteAt, do: func() { d.deleteRow(ctx, r) }})
		}
	}
	evs = append(evs, d.trainingEvents(ctx)...)
	evs = append(evs, event{at: replay / 2, do: func() { d.submitInterns(ctx) }})
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })

	counts := map[string]int{}
	for _, r := range d.rows {
		counts[r.Kind]++
	}
	d.logf("replaying %d openb pods (%d GPU shares, %d whole-GPU, %d CPU-only) compressed into %s",
		len(d.rows), counts["share"], counts["whole"], counts["cpu"], replay)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for _, ev := range evs {
		for wait := ev.at - time.Since(start); wait > 0; wait = ev.at - time.Since(start) {
			select {
			case <-ctx.Done():
				wg.Wait()
				return ctx.Err()
			case <-tick.C:
				d.progress(ctx)
			case <-time.After(wait):
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ev.do()
		})
	}
	wg.Wait()
	return nil
}

func (d *demo) createRow(ctx context.Context, r *traceRow) {
	d.tracker.created(traceNS, r.Name)
	if _, err := d.env.CreatePod(ctx, r.pod(traceNS)); err != nil {
		d.deny(traceNS+"/"+r.Name, err)
	}
}

func (d *demo) deleteRow(ctx context.Context, r *traceRow) {
	err := d.env.Client.CoreV1().Pods(traceNS).Delete(ctx, r.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err == nil {
		d.tracker.deleted(traceNS, r.Name)
	}
}

func (d *demo) deny(pod string, err error) {
	msg := err.Error()
	if harness.IsWebhookDenial(err) {
		if _, after, ok := strings.Cut(msg, "denied the request: "); ok {
			msg = after
		}
	}
	d.mu.Lock()
	d.denials = append(d.denials, pod+": "+msg)
	d.mu.Unlock()
	d.logf("denied %s: %s", pod, msg)
}

// progress prints one line: pods by state and GPU use per model.
func (d *demo) progress(ctx context.Context) {
	u, err := d.usage(ctx)
	if err != nil {
		d.logf("progress: %v", err)
		return
	}
	var models []string
	for _, m := range fleet {
		mu := u.models[m.Name]
		models = append(models, fmt.Sprintf("%s %d/%d GPUs busy %3.0f%% mem", m.Name, mu.busyGPUs, mu.gpus, pct(mu.allocMiB, mu.capMiB)))
	}
	created, deleted := d.tracker.counts()
	d.logf("submitted %d, finished %d | running %d, pending %d | %s | denials %d",
		created, deleted, u.running, u.pending, strings.Join(models, ", "), len(d.denialsCopy()))
}

func (d *demo) denialsCopy() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.denials...)
}

// settle waits until the training and interns work has all started and
// the bound count has stopped changing for 5s (at most 90s).
func (d *demo) settle(ctx context.Context) {
	d.logf("replay done; waiting for the training and interns work to start and the scheduler to settle")
	last, since := -1, time.Now()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		u, err := d.usage(ctx)
		if err == nil {
			if !d.steps.settled(ctx) {
				since = time.Now()
			} else if u.running+u.bound != last {
				last, since = u.running+u.bound, time.Now()
			} else if time.Since(since) > 5*time.Second {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("run the demo inside the repository (no go.mod found above the working directory)")
		}
	}
}
