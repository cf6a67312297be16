package placement

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/topology"
)

const dgib = 1024

// A fragmented node is defragmented for a whole-GPU pod with one move:
// two shares sit on two GPUs of n1 and n2 has room for one of them.
func TestDefragOneMove(t *testing.T) {
	l := ledger.New()
	for _, n := range []string{"n1", "n2"} {
		l.UpsertNode(topology.FromSpec(topology.Spec{Name: n, Model: "H100", Count: 2, MemoryMiB: 80 * dgib}))
	}
	put := func(uid, node string, idx, gib int) {
		if err := l.Restore(ledger.Allocation{PodUID: uid, Pod: "ns/" + uid, Node: node, Preemptible: true,
			GPUs: []ledger.Share{{Index: idx, MemoryMiB: MiB(gib * dgib)}}}); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "n1", 0, 20)
	put("b", "n1", 1, 20)
	put("c", "n2", 0, 50)
	put("d", "n2", 1, 50)
	movable := func(a *ledger.Allocation) bool { return a.PodUID != "c" && a.PodUID != "d" }
	cost := func(a *ledger.Allocation) float64 { return map[string]float64{"a": 5, "b": 1}[a.PodUID] }
	p, ok := Defrag(Request{UID: "new", GPUs: 1}, l.Snapshot(), DefragOptions{Movable: movable, Cost: cost, MaxMoves: 2})
	if !ok || p.Node != "n1" || len(p.Moves) != 1 || p.Moves[0].Alloc.PodUID != "b" || p.Moves[0].To != "n2" {
		t.Fatalf("plan %+v, %v; want b (the cheaper) moved from n1 to n2", p, ok)
	}
	if _, ok := Defrag(Request{UID: "new", GPUs: 1}, l.Snapshot(), DefragOptions{Movable: movable, MaxMoves: 0}); ok {
		t.Error("a plan with no move budget")
	}
	if _, ok := Defrag(Request{UID: "new", MemoryUnits: 40}, l.Snapshot(), DefragOptions{Movable: movable, MaxMoves: 2}); ok {
		t.Error("a plan for a share that fits already")
	}
}

// Target and Allowed keep the request and the moved pods on nodes they may
// go to: with n2 ruled out for b, a moves instead (dearer); with n1 ruled
// out for the request, there is no plan.
func TestDefragRespectsNodeRules(t *testing.T) {
	l := ledger.New()
	for _, n := range []string{"n1", "n2"} {
		l.UpsertNode(topology.FromSpec(topology.Spec{Name: n, Model: "H100", Count: 2, MemoryMiB: 80 * dgib}))
	}
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
	o := DefragOptions{MaxMoves: 2,
		Movable: func(a *ledger.Allocation) bool { return a.Node == "n1" },
		Cost:    func(a *ledger.Allocation) float64 { return map[string]float64{"a": 5, "b": 1}[a.PodUID] }}
	o.Allowed = func(a *ledger.Allocation, node string) bool { return a.PodUID != "b" || node != "n2" }
	p, ok := Defrag(Request{UID: "new", GPUs: 1}, l.Snapshot(), o)
	if !ok || len(p.Moves) != 1 || p.Moves[0].Alloc.PodUID != "a" {
		t.Fatalf("plan %+v, %v; want a moved (b may not go to n2)", p, ok)
	}
	o.Allowed = nil
	o.Target = func(node string) bool { return node != "n1" }
	if p, ok := Defrag(Request{UID: "new", GPUs: 1}, l.Snapshot(), o); ok {
		t.Errorf("plan %+v on a node the request may not go to", p)
	}
}

// Against brute force on small clusters: a plan never moves an unmovable
// pod or part of a gang, never exceeds the budget, frees the request's room,
// places every moved pod, and uses no more moves than the fewest that an
// exhaustive search over every node's movable sets finds (with the same
// placement of the moved pods).
func TestDefragAgainstBruteForce(t *testing.T) {
	plans, none := 0, 0
	defer func() {
		t.Logf("%d plans, %d fragmented cases without one", plans, none)
		if plans < 50 || none < 20 {
			t.Errorf("too few cases of each kind to mean anything: %d plans, %d without", plans, none)
		}
	}()
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 77))
		l := ledger.New()
		nodes := 2 + r.IntN(2)
		for i := range nodes {
			l.UpsertNode(topology.FromSpec(topology.Spec{Name: fmt.Sprintf("n%d", i), Model: "H100", Count: 2 + r.IntN(3), MemoryMiB: 80 * dgib}))
		}
		movable := map[string]bool{}
		seq := 0
		for _, name := range l.Snapshot().Names() {
			ni := l.Snapshot().Node(name)
			for g := range ni.Node.GPUs {
				idx := ni.Node.GPUs[g].Index
				switch r.IntN(4) {
				case 0: // idle
				case 1: // a whole GPU, sometimes a gang of two on this node
					seq++
					a := ledger.Allocation{PodUID: fmt.Sprintf("p%02d", seq), Node: name, Whole: true, Preemptible: true,
						GPUs: []ledger.Share{{Index: idx, UUID: ni.Node.GPUs[g].UUID, MemoryMiB: 80 * dgib}}}
					a.Pod = "ns/" + a.PodUID
					movable[a.PodUID] = r.IntN(3) > 0
					_ = l.Restore(a)
				default: // one or two shares
					for range 1 + r.IntN(2) {
						seq++
						a := ledger.Allocation{PodUID: fmt.Sprintf("p%02d", seq), Node: name, Preemptible: true,
							GPUs: []ledger.Share{{Index: idx, MemoryMiB: MiB((10 + 10*r.IntN(3)) * dgib)}}}
						a.Pod = "ns/" + a.PodUID
						if r.IntN(6) == 0 {
							a.Gang, a.GangSize = "ns/g"+name, 2
						}
						movable[a.PodUID] = r.IntN(4) > 0
						_ = l.Restore(a)
					}
				}
			}
		}
		snap := l.Snapshot()
		req := Request{UID: "new", GPUs: 1 + r.IntN(2)}
		if r.IntN(2) == 0 {
			req = Request{UID: "new", MemoryUnits: int64(40 + 10*r.IntN(4))}
		}
		o := DefragOptions{Movable: func(a *ledger.Allocation) bool { return movable[a.PodUID] },
			Cost: func(a *ledger.Allocation) float64 { return float64(len(a.PodUID)) }, MaxMoves: 1 + r.IntN(3), MaxCandidates: 64}
		got, ok := Defrag(req, snap, o)

		fitsNow := false
		for _, n := range snap.Names() {
			_, reason := Fit(req, snap.Node(n))
			fitsNow = fitsNow || reason == nil
		}
		bruteMin := -1
		if !fitsNow {
			gangs := map[string][]*ledger.Allocation{}
			for _, n := range snap.Names() {
				for _, a := range snap.Node(n).Allocs {
					if a.Gang != "" {
						gangs[a.Gang] = append(gangs[a.Gang], a)
					}
				}
			}
			for _, n := range snap.Names() {
				units := movableUnits(snap.Node(n), gangs, o)
				for mask := 1; mask < 1<<len(units); mask++ {
					var allocs []*ledger.Allocation
					for i, u := range units {
						if mask&(1<<i) != 0 {
							allocs = append(allocs, u.allocs...)
						}
					}
					if len(allocs) > o.MaxMoves || (bruteMin >= 0 && len(allocs) >= bruteMin) {
						continue
					}
					if _, ok := placeElsewhere(req, snap, snap.Node(n), allocs, nil); ok {
						bruteMin = len(allocs)
					}
				}
			}
		}
		if ok != (bruteMin >= 0) {
			t.Fatalf("seed %d: Defrag found %v (%+v), brute force %d", seed, ok, got, bruteMin)
		}
		if !ok {
			if !fitsNow {
				none++
			}
			continue
		}
		plans++
		if len(got.Moves) > bruteMin || len(got.Moves) > o.MaxMoves {
			t.Fatalf("seed %d: %d moves, brute force %d, budget %d", seed, len(got.Moves), bruteMin, o.MaxMoves)
		}
		var uids []string
		gangMoved := map[string]int{}
		for _, m := range got.Moves {
			if !movable[m.Alloc.PodUID] || m.Alloc.Node != got.Node || m.To == got.Node {
				t.Fatalf("seed %d: bad move %+v", seed, m)
			}
			uids = append(uids, m.Alloc.PodUID)
			if m.Alloc.Gang != "" {
				gangMoved[m.Alloc.Gang]++
			}
		}
		for g, n := range gangMoved {
			members := 0
			for _, a := range snap.Node(got.Node).Allocs {
				if a.Gang == g {
					members++
				}
			}
			if n != members {
				t.Fatalf("seed %d: moved %d of gang %s's %d members", seed, n, g, members)
			}
		}
		if _, reason := Fit(req, snap.Node(got.Node).Without(uids...)); reason != nil {
			t.Fatalf("seed %d: the plan does not free the room: %v", seed, reason)
		}
		if slices.ContainsFunc(got.Moves, func(m Move) bool { return m.To == "" }) {
			t.Fatalf("seed %d: a move to nowhere", seed)
		}
	}
}
