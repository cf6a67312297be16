package room_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/fixture"
)

// Room for a team with a node pool is held on the pool's nodes by the
// pool's policy, and a policy changed between two holds decides the second
// (the planner's memo of fits does not outlive the policy that scored
// them); a team without a pool gets the other nodes.
func TestHoldRoomInTheTeamsPool(t *testing.T) {
	label := topology.PoolLabel(contract.Default)
	w := newWorld(t,
		fixture.GPUNode("a1").GPUs(2, 80*1024).Label(label, "canary").Obj(),
		fixture.GPUNode("a2").GPUs(2, 80*1024).Label(label, "canary").Obj(),
		fixture.GPUNode("s1").GPUs(2, 80*1024).Obj())
	if err := w.led.Restore(ledger.Allocation{PodUID: "busy", Pod: "ns/busy", Node: "a2",
		GPUs: []ledger.Share{{Index: 0, MemoryMiB: 20 * 1024}}}); err != nil {
		t.Fatal(err)
	}
	binpack, _ := placement.NewPolicy(placement.Binpack, nil)
	spread, _ := placement.NewPolicy(placement.Spread, nil)
	canary := binpack
	e, err := room.New(room.Options{Ledger: w.led, Node: w.cache.Node, Request: w.request, Policy: binpack,
		PolicyFor: func(pool string) placement.Policy {
			if pool == "canary" {
				return canary
			}
			return binpack
		}, Tiers: w.tiers})
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	hold := func(scope room.Scope) string {
		t.Helper()
		pod := fixture.Pod("ns", "p").UID("uid-p").MemoryMiB(10 * 1024).Obj()
		h, reason := e.HoldRoom([]*corev1.Pod{pod}, scope, expires)
		if reason != "" {
			t.Fatalf("HoldRoom(%+v): %s", scope, reason)
		}
		e.ReleaseHold(h)
		return h.Allocations[0].Node
	}
	if got := hold(room.Scope{Pool: "canary"}); got != "a2" {
		t.Errorf("binpack in the pool held on %s, want a2 (the busier)", got)
	}
	canary = spread
	if got := hold(room.Scope{Pool: "canary"}); got != "a1" {
		t.Errorf("spread in the pool held on %s, want a1 (the emptier)", got)
	}
	if got := hold(room.Scope{}); got != "s1" {
		t.Errorf("a team without a pool held on %s, want s1", got)
	}
	if _, reason := e.HoldRoom([]*corev1.Pod{fixture.Pod("ns", "q").UID("uid-q").MemoryMiB(10 * 1024).Obj()}, room.Scope{Pool: "none"}, expires); reason == "" {
		t.Error("room held in a pool without nodes")
	}
}
