//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// queueing turns the queue gate on for the scenario and back off after it.
func queueing(ctx context.Context, t *testing.T) {
	t.Helper()
	was, err := env.SetQueueing(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := env.SetQueueing(cctx, was); err != nil {
			t.Errorf("restoring queueing: %v", err)
		}
	})
}

func byName(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

func running(pods []corev1.Pod, names ...string) bool {
	for _, n := range names {
		p := byName(pods, n)
		if p == nil || p.Status.Phase != corev1.PodRunning {
			return false
		}
	}
	return true
}

func queuedCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if string(p.Status.Conditions[i].Type) == env.Names.QueuedCondition {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// TestQueueOrder: pods over their team's quota are queued, not refused,
// and run in priority-then-FIFO order as running pods end; each carries
// its position and what it waits for.
func TestQueueOrder(t *testing.T) {
	const name = "qorder"
	ctx, ns := setup(t, name, "qorder", 3*time.Minute) // qorder: 2 GPUs, no borrowing
	queueing(ctx, t)
	nodes(ctx, t, name, "qorder", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	if err := env.CreatePriorityClass(ctx, "rota-e2e-qhigh", 100); err != nil {
		t.Fatal(err)
	}
	create(ctx, t, pod(ns, "a", name).GPUs(1).Obj())
	create(ctx, t, pod(ns, "b", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "a and b running", func(p []corev1.Pod) bool { return running(p, "a", "b") })

	created := time.Now()
	create(ctx, t, pod(ns, "c", name).GPUs(1).Obj())
	time.Sleep(1100 * time.Millisecond) // c is older than d by a clear margin
	create(ctx, t, pod(ns, "d", name).GPUs(1).PriorityClass("rota-e2e-qhigh").Obj())
	pods := waitPods(ctx, t, ns, "c and d queued with their positions", func(p []corev1.Pod) bool {
		c, d := byName(p, "c"), byName(p, "d")
		return c != nil && d != nil && gated(c) && gated(d) && queuedCondition(c) != nil && queuedCondition(d) != nil &&
			strings.HasPrefix(queuedCondition(d).Message, "position 1 of 2") && strings.HasPrefix(queuedCondition(c).Message, "position 2 of 2")
	})
	msg := queuedCondition(byName(pods, "c")).Message
	for _, want := range []string{"in team qorder", "waiting for quota", "quota 2 GPUs, 2 in use", "1 ahead need 1 GPU"} {
		if !strings.Contains(msg, want) {
			t.Errorf("c's Queued condition %q does not say %q", msg, want)
		}
	}
	t.Logf("c: %s", msg)

	// a ends: d (higher priority, younger) is admitted before c.
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "a", deleteNow); err != nil {
		t.Fatal(err)
	}
	waitPods(ctx, t, ns, "d running, c still queued", func(p []corev1.Pod) bool {
		return running(p, "d") && byName(p, "c") != nil && gated(byName(p, "c"))
	})
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "b", deleteNow); err != nil {
		t.Fatal(err)
	}
	pods = waitPods(ctx, t, ns, "c running", func(p []corev1.Pod) bool { return running(p, "c", "d") })
	c := byName(pods, "c")
	adm, err := podreq.AdmissionOf(c, env.Names)
	if err != nil || adm == nil || adm.Team != "qorder" {
		t.Fatalf("c's admission record = %+v, %v", adm, err)
	}
	evs, err := env.PodEvents(ctx, ns, "c")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs {
		reasons = append(reasons, e.Reason)
	}
	if !slices.Contains(reasons, "Queued") || !slices.Contains(reasons, "Admitted") {
		t.Errorf("c's events %v, want Queued and Admitted", reasons)
	}
	note(name, "c queued %s, admitted after d; creation to running %s", adm.QueuedFor, time.Since(created).Round(100*time.Millisecond))
	checkInvariants(ctx, t, nil)
}

// TestQueueTwoHeads: two queue heads that each fit only alone are never
// both admitted; the second runs when the first ends.
func TestQueueTwoHeads(t *testing.T) {
	const name = "qheads"
	ctx, ns := setup(t, name, "", 3*time.Minute) // unknown team: unlimited quota
	queueing(ctx, t)
	nodes(ctx, t, name, "qheads", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	create(ctx, t, pod(ns, "x", name).GPUs(4).Obj())
	create(ctx, t, pod(ns, "y", name).GPUs(4).Obj())
	pods := waitPods(ctx, t, ns, "one of x, y running", func(p []corev1.Pod) bool { return running(p, "x") || running(p, "y") })
	first, second := "x", "y"
	if running(pods, "y") {
		first, second = "y", "x"
	}
	// The other stays queued, waiting for room, for as long as the first runs.
	holdsFor(ctx, t, 5*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		pods, err := env.Pods(ctx, ns)
		if err != nil {
			return err
		}
		if s := byName(pods, second); s == nil || !gated(s) {
			return fmt.Errorf("%s was admitted while %s holds all 4 GPUs", second, first)
		}
		return nil
	})
	pods, _ = env.Pods(ctx, ns)
	if c := queuedCondition(byName(pods, second)); c == nil || c.Reason != "Room" {
		t.Errorf("%s's Queued condition = %+v, want reason Room", second, c)
	}
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, first, deleteNow); err != nil {
		t.Fatal(err)
	}
	waitPods(ctx, t, ns, second+" running", func(p []corev1.Pod) bool { return running(p, second) })
	checkInvariants(ctx, t, nil)
}

// TestQueueGang: a gang is ungated whole, once all its members exist, and
// lands in one leaf of a fleet with two: the one with room for all of it.
func TestQueueGang(t *testing.T) {
	const name = "qgang"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	queueing(ctx, t)
	leaf := env.Names.Domain + "/leaf"
	spec := harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4}
	// Leaf a has 2 x 3 GPUs, leaf b 2 x 4: a gang of 4 x 2 fits only in b
	// (each node of a holds one member).
	a := spec
	a.Count, a.Labels = 3, map[string]string{leaf: "qgang-a"}
	b := spec
	b.Labels = map[string]string{leaf: "qgang-b"}
	nodes(ctx, t, name, "qgang-a", 2, a)
	nodes(ctx, t, name, "qgang-b", 2, b)

	for i := range 3 {
		create(ctx, t, pod(ns, fmt.Sprintf("m%d", i), name).GPUs(2).Gang("train", 4).Obj())
	}
	time.Sleep(2 * time.Second)
	pods, err := env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		if p := &pods[i]; !gated(p) {
			t.Fatalf("member %s admitted while its gang has 3 of 4 members", p.Name)
		}
	}
	create(ctx, t, pod(ns, "m3", name).GPUs(2).Gang("train", 4).Obj())
	pods = waitPods(ctx, t, ns, "the gang running", func(p []corev1.Pod) bool { return running(p, "m0", "m1", "m2", "m3") })
	var admitted []time.Time
	for _, p := range pods {
		node, err := env.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Labels[leaf] != "qgang-b" || p.Spec.NodeSelector[leaf] != "qgang-b" {
			t.Errorf("member %s on %s (leaf %s), node selector %v; want leaf qgang-b", p.Name, p.Spec.NodeName, node.Labels[leaf], p.Spec.NodeSelector)
		}
		adm, err := podreq.AdmissionOf(&p, env.Names)
		if err != nil || adm == nil {
			t.Fatalf("member %s has no admission record: %v", p.Name, err)
		}
		admitted = append(admitted, adm.AdmittedAt)
	}
	// All members are admitted in one pass, unless an update fails part-way
	// (the leader lost its lease: the fence refuses its writes); the next
	// pass then completes the gang before anything else, and no member can
	// bind before all hold their slots (invariant checker below).
	slices.SortFunc(admitted, func(x, y time.Time) int { return x.Compare(y) })
	spread := admitted[len(admitted)-1].Sub(admitted[0])
	if spread > 30*time.Second {
		t.Errorf("the gang's members were admitted %s apart", spread)
	}
	note(name, "4 x 2 GPUs in leaf qgang-b; members admitted within %s", spread)
	checkInvariants(ctx, t, nil)
}

// TestQueueFairShare: two teams of equal weight contending for a pool they
// both borrow from each get between 40 % and 60 % of it.
func TestQueueFairShare(t *testing.T) {
	const name = "qfair"
	ctx, nsA := setup(t, name, "qfair-a", 3*time.Minute)
	nsB := "e2e-qfair-b"
	if err := env.CreateNamespace(ctx, nsB, "qfair-b"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.DeletePods(dctx, nsB)
	})
	nsBlock := "e2e-qfair-blocker"
	if err := env.CreateNamespace(ctx, nsBlock, ""); err != nil {
		t.Fatal(err)
	}
	queueing(ctx, t)
	nodes(ctx, t, name, "qfair", 1, harness.GPUNodeSpec{Model: "Rota Queue GPU", MemoryMiB: h100.MemoryMiB, Count: 8})
	// Both teams queue while the node is taken, so one pass sees them both.
	create(ctx, t, pod(nsBlock, "blocker", name).GPUs(8).Obj())
	waitPods(ctx, t, nsBlock, "blocker running", func(p []corev1.Pod) bool { return running(p, "blocker") })
	for i := range 8 {
		create(ctx, t, pod(nsA, fmt.Sprintf("a%d", i), name).GPUs(1).Obj())
		create(ctx, t, pod(nsB, fmt.Sprintf("b%d", i), name).GPUs(1).Obj())
	}
	time.Sleep(1500 * time.Millisecond)
	if err := env.Client.CoreV1().Pods(nsBlock).Delete(ctx, "blocker", deleteNow); err != nil {
		t.Fatal(err)
	}
	count := func(ns string) int {
		pods, err := env.Pods(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		return harness.Running(pods)
	}
	waitPods(ctx, t, nsA, "the pool in use", func([]corev1.Pod) bool { return count(nsA)+count(nsB) == 8 })
	ra, rb := count(nsA), count(nsB)
	if ra < 3 || ra > 5 || rb < 3 || rb > 5 {
		t.Errorf("team qfair-a runs %d and qfair-b %d of the pool's 8 GPUs, want each 40-60 %%", ra, rb)
	}
	note(name, "pool of 8: qfair-a %d, qfair-b %d", ra, rb)
	checkInvariants(ctx, t, nil)
}

// TestQueueReclaim: a team below its guarantee gets back the capacity
// another team borrowed: the borrower's newest preemptible pods are evicted
// and the queued pod runs.
func TestQueueReclaim(t *testing.T) {
	const name = "qreclaim"
	ctx, nsG := setup(t, name, "qreclaim-g", 3*time.Minute)
	nsB := "e2e-qreclaim-b"
	borrowers(ctx, t, name, "qreclaim-b", nsB, "Rota Reclaim GPU", "borrow0", "borrow1", "borrow2", "borrow3")
	created := time.Now()
	create(ctx, t, pod(nsG, "mine", name).GPUs(2).Obj())
	waitPods(ctx, t, nsG, "the guaranteed pod running", func(p []corev1.Pod) bool { return running(p, "mine") })
	took := time.Since(created)
	pods, err := env.Pods(ctx, nsB)
	if err != nil {
		t.Fatal(err)
	}
	if r := harness.Running(pods); r != 2 {
		t.Errorf("the borrower runs %d pods after the reclaim, want 2 (2 GPUs returned)", r)
	}
	evs, err := env.NamespaceEvents(ctx, nsB, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Errorf("Reclaimed events on %v, want 2 pods", evs)
	}
	note(name, "guarantee returned: creation to running %s", took.Round(100*time.Millisecond))
	t.Logf("reclaim: queued pod created to running in %s", took)
	checkInvariants(ctx, t, nil)
}

// TestQueueKill: the extender (and its queue controller) is killed with
// SIGKILL while 100 pods are queued and 200 more are created concurrently,
// and again while the queue drains. Admitted use never exceeds the team's
// quota (the invariant checker, after every round), no gang is partly
// admitted or bound, no queued pod is lost, and every pod runs.
func TestQueueKill(t *testing.T) {
	const name = "qkill"
	ctx, ns := setup(t, name, "qkill", 6*time.Minute) // qkill: 16 GPUs, no borrowing
	queueing(ctx, t)
	nodes(ctx, t, name, "qkill", 4, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8})
	q := quotaConfig(t)
	var pods []*corev1.Pod
	for i := range 292 {
		pods = append(pods, pod(ns, fmt.Sprintf("p%03d", i), name).GPUs(1).Obj())
	}
	for g := range 2 { // two 4-member gangs among them
		for m := range 4 {
			pods = append(pods, pod(ns, fmt.Sprintf("g%d-%d", g, m), name).GPUs(1).Gang(fmt.Sprintf("g%d", g), 4).Obj())
		}
	}
	if n, errs := createAll(ctx, 8, pods[:100], nil); n != 100 {
		t.Fatalf("created %d of the first 100 pods: %v", n, errs)
	}
	waitPods(ctx, t, ns, "16 running", func(p []corev1.Pod) bool { return harness.Running(p) == 16 })
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n, errs := createAll(ctx, 8, pods[100:], nil); n != len(pods)-100 {
			t.Errorf("created %d of %d pods: %v", n, len(pods)-100, errs)
		}
	}()
	kill := func(why string) {
		if err := env.KillExtender(); err != nil {
			t.Fatalf("kill (%s): %v", why, err)
		}
		time.Sleep(500 * time.Millisecond)
		if err := env.StartExtender(ctx); err != nil {
			t.Fatalf("restart (%s): %v", why, err)
		}
	}
	kill("while 200 pods are created")
	<-done
	ran := map[string]bool{}
	rounds, kills := 0, 1
	for len(ran) < len(pods) {
		cur := waitPods(ctx, t, ns, "a round running", func(p []corev1.Pod) bool {
			r := harness.Running(p)
			return r == 16 || (r > 0 && r == len(p))
		})
		checkInvariants(ctx, t, &q)
		for _, p := range cur {
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			ran[p.Name] = true
			if err := env.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, deleteNow); err != nil {
				t.Fatal(err)
			}
		}
		rounds++
		if rounds == 4 || rounds == 9 {
			kill(fmt.Sprintf("round %d", rounds))
			kills++
		}
	}
	note(name, "%d pods (2 gangs) ran in %d rounds of at most 16 with %d kill -9 of the extender; no invariant violation", len(pods), rounds, kills)
}

// quotaConfig is the shared control plane's quota, parsed.
func quotaConfig(t *testing.T) quota.Config {
	t.Helper()
	q, err := config.ParseQuota([]byte(quotaDoc))
	if err != nil {
		t.Fatal(err)
	}
	return q
}
