//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueueTreeSiblingsFirst: nested quota groups on the real control
// plane. Project qtree-p1 (1 GPU guaranteed, in group qtree-t with a pool
// of 2) bursts to 3 GPUs: its group's pool lends the 2, so department
// qtree-dept's pool (2) is still there for its cousin qtree-q1 (in
// qtree-u, no guarantee), whose 2 pods run too. p1's fourth pod would need
// the department's pool, now lent to q1, and the department may not
// borrow from the shared pool: it stays queued, its Queued condition
// naming the group that binds. Borrowing the department's pool first
// (flat borrowing, or the wrong order) would leave q1 queued.
func TestQueueTreeSiblingsFirst(t *testing.T) {
	const name = "qtree"
	ctx, nsP := setup(t, name, "qtree-p1", 3*time.Minute)
	nsQ := teamNamespace(ctx, t, "e2e-qtree-q1", "qtree-q1")
	queueing(ctx, t)
	nodes(ctx, t, name, "qtree", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8})
	for i := range 3 {
		create(ctx, t, pod(nsP, fmt.Sprintf("p%d", i), name).GPUs(1).Obj())
	}
	waitPods(ctx, t, nsP, "p1's 3 pods running (1 guaranteed, 2 from its group's pool)", func(p []corev1.Pod) bool {
		return running(p, "p0", "p1", "p2")
	})
	for i := range 2 {
		create(ctx, t, pod(nsQ, fmt.Sprintf("q%d", i), name).GPUs(1).Obj())
	}
	waitPods(ctx, t, nsQ, "the cousin's 2 pods running on the department's pool", func(p []corev1.Pod) bool {
		return running(p, "q0", "q1")
	})
	create(ctx, t, pod(nsP, "p3", name).GPUs(1).Obj())
	pods := waitPods(ctx, t, nsP, "p3 queued for the department's limit", func(p []corev1.Pod) bool {
		p3 := byName(p, "p3")
		return p3 != nil && gated(p3) && queuedCondition(p3) != nil && strings.Contains(queuedCondition(p3).Message, "waiting for quota")
	})
	msg := queuedCondition(byName(pods, "p3")).Message
	if !strings.Contains(msg, "group qtree-dept (pool 2 GPUs, borrow limit 0 GPUs) would borrow past its limit") {
		t.Errorf("p3's Queued condition %q does not name the department's limit", msg)
	}
	// The cousin's pods end: the department's pool is p1's to borrow.
	if err := env.DeletePods(ctx, nsQ); err != nil {
		t.Fatal(err)
	}
	waitPods(ctx, t, nsP, "p3 running once the cousin's work ended", func(p []corev1.Pod) bool { return running(p, "p3") })
	note(name, "p1 borrowed its group's pool, q1 the department's; p3 queued: %s", msg)
	checkInvariants(ctx, t, nil)
}

// TestQueueTreeReclaimsFromSibling: reclaim in a tree takes borrowed work
// nearest in the tree first. On a node of 5 GPUs, project qtree-p1 runs 3
// pods (1 guaranteed, 2 borrowed from its group's pool) and its cousin
// qtree-q1 then borrows the other 2. Project qtree-p2, p1's sibling, asks
// for the 1 GPU it is guaranteed: there is no room, and reclaim evicts one
// of p1's pods, not one of q1's, although q1's started later and so lose
// less work (which alone would choose them, as in a flat configuration).
func TestQueueTreeReclaimsFromSibling(t *testing.T) {
	const name = "qtreerc"
	ctx, nsP2 := setup(t, name, "qtree-p2", 3*time.Minute)
	nsP1, nsQ := teamNamespace(ctx, t, "e2e-qtreerc-p1", "qtree-p1"), teamNamespace(ctx, t, "e2e-qtreerc-q1", "qtree-q1")
	queueing(ctx, t)
	nodes(ctx, t, name, name, 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 5})
	for i := range 3 {
		create(ctx, t, pod(nsP1, fmt.Sprintf("p%d", i), name).GPUs(1).Obj())
	}
	waitPods(ctx, t, nsP1, "p1's 3 pods running", func(p []corev1.Pod) bool { return harness.Running(p) == 3 })
	time.Sleep(2 * time.Second) // p1's pods have run longer than q1's will have
	for i := range 2 {
		create(ctx, t, pod(nsQ, fmt.Sprintf("q%d", i), name).GPUs(1).Obj())
	}
	waitPods(ctx, t, nsQ, "q1's 2 pods running, the node full", func(p []corev1.Pod) bool { return harness.Running(p) == 2 })
	create(ctx, t, pod(nsP2, "mine", name).GPUs(1).Obj())
	waitPods(ctx, t, nsP2, "p2's guaranteed pod running", func(p []corev1.Pod) bool { return running(p, "mine") })
	fromP1, err := env.NamespaceEvents(ctx, nsP1, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	fromQ, err := env.NamespaceEvents(ctx, nsQ, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	if len(fromP1) != 1 || len(fromQ) != 0 {
		t.Errorf("Reclaimed events: %d in the sibling's namespace, %d in the cousin's; want 1 and 0", len(fromP1), len(fromQ))
	}
	note(name, "p2's guarantee returned from its sibling p1 (%d evicted), its cousin untouched (%d)", len(fromP1), len(fromQ))
	checkInvariants(ctx, t, nil)
}

// TestQueueTreeReturnsLentPool: a group's pool is its subtree's
// guarantee, lent to a sibling only while unused. Group qlend-g (pool 2,
// lends up to 2) and qlend-h (no pool) sit under qlend-dept, which takes
// nothing from above. Project qlend-x (in h) runs 2 pods on g's loan; then
// project qlend-t (in g, no guarantee of its own) asks for 1 GPU. Its
// quota check fails (the pool is lent out), and reclaim takes one of x's
// pods back for it, with x's other pod left running on what g still lends.
// Without the rule t waits until x's work ends on its own.
func TestQueueTreeReturnsLentPool(t *testing.T) {
	const name = "qlend"
	ctx, nsT := setup(t, name, "qlend-t", 3*time.Minute)
	nsX := teamNamespace(ctx, t, "e2e-qlend-x", "qlend-x")
	queueing(ctx, t)
	nodes(ctx, t, name, name, 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	for i := range 2 {
		create(ctx, t, pod(nsX, fmt.Sprintf("x%d", i), name).GPUs(1).Obj())
	}
	waitPods(ctx, t, nsX, "x's 2 pods running on g's loan", func(p []corev1.Pod) bool { return harness.Running(p) == 2 })
	create(ctx, t, pod(nsT, "mine", name).GPUs(1).Obj())
	waitPods(ctx, t, nsT, "t's pod running on its group's pool", func(p []corev1.Pod) bool { return running(p, "mine") })
	reclaimed, err := env.NamespaceEvents(ctx, nsX, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, evs := range reclaimed {
		for _, e := range evs {
			msgs = append(msgs, e.Message)
		}
	}
	if len(reclaimed) != 1 || len(msgs) == 0 || !strings.Contains(msgs[0], "the pool team qlend-t's groups lent (qlend-g < qlend-dept)") {
		t.Errorf("Reclaimed events in x's namespace: %d pods, %q; want one pod's, naming the lent pool", len(reclaimed), msgs)
	}
	waitPods(ctx, t, nsX, "x's other pod still running", func(p []corev1.Pod) bool { return harness.Running(p) == 1 })
	note(name, "t's pod got its group's lent pool back: %d of x's pods reclaimed, the other kept", len(reclaimed))
	q := quotaConfig(t)
	checkInvariants(ctx, t, &q)
}

// teamNamespace creates a second namespace of a scenario, labelled with
// team, whose pods are deleted at the end.
func teamNamespace(ctx context.Context, t *testing.T, ns, team string) string {
	t.Helper()
	if err := env.CreateNamespace(ctx, ns, team); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.DeletePods(dctx, ns)
	})
	return ns
}
