package placement

import (
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/topology"
)

func pooled(name, pool string) *topology.Node {
	n := topology.FromSpec(topology.Spec{Name: name, Model: "H100", Count: 2, MemoryMiB: 80 * dgib})
	n.Pool = pool
	return n
}

// A GPU request fits only nodes of its pool, and a request of no pool only
// nodes of none; the reason names both. A GPU-free request goes anywhere.
func TestFitNodePools(t *testing.T) {
	l := ledger.New()
	l.UpsertNode(pooled("shared", ""))
	l.UpsertNode(pooled("canary", "vision"))
	snap := l.Snapshot()
	for _, tc := range []struct {
		pool, node string
		fits       bool
		msg        string
	}{
		{"", "shared", true, ""},
		{"", "canary", false, "node is in node pool vision; the pod's team places on nodes without a pool"},
		{"vision", "canary", true, ""},
		{"vision", "shared", false, "node is in no node pool; the pod's team places on node pool vision only"},
		{"speech", "canary", false, "node is in node pool vision; the pod's team places on node pool speech only"},
	} {
		_, reason := Fit(Request{UID: "p", GPUs: 1, Pool: tc.pool}, snap.Node(tc.node))
		if (reason == nil) != tc.fits {
			t.Errorf("pool %q on %s: reason %v, want fits=%v", tc.pool, tc.node, reason, tc.fits)
			continue
		}
		if reason != nil && (reason.Code != OtherPool || reason.Message() != tc.msg) {
			t.Errorf("pool %q on %s: %s %q, want %q", tc.pool, tc.node, reason.Code, reason.Message(), tc.msg)
		}
	}
	if _, reason := Fit(Request{UID: "cpu", CPUMilli: 100, Pool: ""}, snap.Node("canary")); reason != nil {
		t.Errorf("GPU-free pod refused by a pool: %v", reason)
	}
	if (Request{GPUs: 1, Pool: "a"}).SameShape(Request{GPUs: 1}) {
		t.Error("requests of two pools have the same shape")
	}
}

// A moved pod stays in the pool it runs in: it moves to another node of
// its pool, and with the only room for it on a node of no pool there is no
// plan.
func TestDefragKeepsMovedPodsInTheirPool(t *testing.T) {
	plan := func(pool1, pool2 string) bool {
		l := ledger.New()
		l.UpsertNode(pooled("n1", pool1))
		l.UpsertNode(pooled("n2", pool2))
		for _, a := range []ledger.Allocation{
			{PodUID: "a", Node: "n1", GPUs: []ledger.Share{{Index: 0, MemoryMiB: 20 * dgib}}},
			{PodUID: "b", Node: "n1", GPUs: []ledger.Share{{Index: 1, MemoryMiB: 20 * dgib}}},
			{PodUID: "c", Node: "n2", GPUs: []ledger.Share{{Index: 0, MemoryMiB: 50 * dgib}}},
			{PodUID: "d", Node: "n2", GPUs: []ledger.Share{{Index: 1, MemoryMiB: 50 * dgib}}},
		} {
			a.Pod, a.Preemptible = "ns/"+a.PodUID, true
			if err := l.Restore(a); err != nil {
				t.Fatal(err)
			}
		}
		_, ok := Defrag(Request{UID: "new", GPUs: 1, Pool: pool1}, l.Snapshot(), DefragOptions{MaxMoves: 2,
			Movable: func(a *ledger.Allocation) bool { return a.Node == "n1" }})
		return ok
	}
	if !plan("x", "x") {
		t.Error("no plan with both nodes in pool x")
	}
	if plan("x", "") {
		t.Error("a plan moved a pod of pool x to a node of no pool")
	}
}
