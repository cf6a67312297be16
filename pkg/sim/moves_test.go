package sim

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// fingerprint hashes what a replay reported before moves existed.
func fingerprint(r Result) string {
	s := fmt.Sprintf("%s %d %d %d %d %d", r.Policy, r.Seed, r.Arrived, r.Placed, r.Failed, r.CapacityMilli)
	for _, p := range r.Curve {
		s += fmt.Sprintf(" %d:%.9g/%.9g/%.9g/%d", p.X, p.Alloc, p.Frag, p.FragRatio, p.N)
	}
	h := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%x", h[:8])
}

// TestRunWithoutMovesUnchanged: with no move budget, every policy's replay
// is the one recorded before moves were added (fingerprints of the small
// cluster's results), and no move is made.
func TestRunWithoutMovesUnchanged(t *testing.T) {
	want := []struct {
		policy string
		seed   uint64
		fp     string
	}{
		{"random", 0, "6ea273ceb8924ba7"},
		{"random", 1, "70e857df127fdca0"},
		{"random", 2, "2ee17c10d3903e90"},
		{"dotprod", 0, "32053b146901f458"},
		{"dotprod", 1, "03f7cc2286981bac"},
		{"dotprod", 2, "37ad5cf903589fec"},
		{"gpuclustering", 0, "0baa458ba93278ea"},
		{"gpuclustering", 1, "a3869be325d6c2dd"},
		{"gpuclustering", 2, "b3d2b2ce47f3fe0f"},
		{"gpupacking", 0, "6bf0e6f3fe341334"},
		{"gpupacking", 1, "ddb0ef4ee52b95f2"},
		{"gpupacking", 2, "9f64fe0bb27e94e7"},
		{"bestfit", 0, "2c0b512450e7b5d4"},
		{"bestfit", 1, "febac4314831941e"},
		{"bestfit", 2, "c9422f2e892414b1"},
		{"fgd", 0, "2995f2d0e15e5ece"},
		{"fgd", 1, "2fde25374df752b0"},
		{"fgd", 2, "ad2ab354881e309e"},
		{"fragmentation-aware", 0, "51a78e5825b14989"},
		{"fragmentation-aware", 1, "a1d12b738d69049e"},
		{"fragmentation-aware", 2, "5a7a75481797367e"},
		{"binpack", 0, "c15517739b7c25d7"},
		{"binpack", 1, "3ba3d7d2ee1f44c6"},
		{"binpack", 2, "986089c553d150f4"},
		{"spread", 0, "bfc3226931779923"},
		{"spread", 1, "9659030a72d1689c"},
		{"spread", 2, "e7b0a51968cfdcea"},
	}
	for _, w := range want {
		r := runSmall(t, w.policy, w.seed, false)
		if got := fingerprint(r); got != w.fp {
			t.Errorf("%s seed %d: fingerprint %s, want %s", w.policy, w.seed, got, w.fp)
		}
		if r.Moves != 0 || r.MovePlans != 0 || r.At(100).Moves != 0 {
			t.Errorf("%s seed %d: %d moves without a budget", w.policy, w.seed, r.Moves)
		}
	}
}

// TestMoveFreesANode: a whole GPU fits neither node (shares of 0.6 and 0.3
// hold them); moving one share next to the other frees a node. The
// budget decides whether the move is made.
func TestMoveFreesANode(t *testing.T) {
	setup := func() (*mover, *ledger.Ledger, placement.Request) {
		nodes := Cluster([]Node{{Name: "n0", GPUs: 1, CPUMilli: 8000}, {Name: "n1", GPUs: 1, CPUMilli: 8000}})
		l := newLedger(nodes)
		snap := l.Snapshot()
		m := newMover(Config{MoveBudget: 0.1}, snap.Names())
		for i, p := range []struct {
			node  string
			milli int
		}{{"n0", 600}, {"n1", 300}} {
			r := Pod{GPUs: 1, GPUMilli: p.milli, CPUMilli: 1000}.Request(fmt.Sprint("u", i))
			c, reason := placement.Fit(r, l.Snapshot().Node(p.node))
			if reason != nil {
				t.Fatalf("setup: %s", reason)
			}
			if err := commit(l, r, l.Snapshot().Node(p.node), c); err != nil {
				t.Fatal(err)
			}
			m.arrived(r, true)
		}
		return m, l, Pod{GPUs: 1, GPUMilli: MilliPerGPU, CPUMilli: 1000}.Request("whole")
	}
	m, l, r := setup()
	for _, n := range []string{"n0", "n1"} {
		if _, reason := placement.Fit(r, l.Snapshot().Node(n)); reason == nil {
			t.Fatalf("the whole GPU fits %s without a move", n)
		}
	}
	// 9 pods arrived, budget 0.1: floor(0.9) = 0 moves allowed.
	if moved, _, err := m.tryMoves(l, r, l.Snapshot(), 1000, 1100, 9, 0); err != nil || moved != 0 {
		t.Fatalf("tryMoves over budget = %d, %v; want no move", moved, err)
	}
	// 10 arrived: one move allowed.
	moved, touched, err := m.tryMoves(l, r, l.Snapshot(), 1000, 1100, 10, 0)
	if err != nil || moved != 1 || len(touched) != 2 {
		t.Fatalf("tryMoves = %d moves, nodes %v, %v; want 1 move over 2 nodes", moved, touched, err)
	}
	if errs := l.Check(); len(errs) > 0 {
		t.Fatalf("ledger after the move: %v", errs)
	}
	a0, _ := l.Get("u0")
	a1, _ := l.Get("u1")
	free := map[string]string{"n0": "n1", "n1": "n0"}[a0.Node]
	if a0.Node != a1.Node || free == "" {
		t.Errorf("shares on %q and %q, want both on one node", a0.Node, a1.Node)
	}
	if _, reason := placement.Fit(r, l.Snapshot().Node(free)); reason != nil {
		t.Errorf("the whole GPU does not fit the freed %s: %s", free, reason)
	}
	// Once a move is made, the next needs 20 arrivals.
	m2, l2, r2 := setup()
	if moved, _, _ := m2.tryMoves(l2, r2, l2.Snapshot(), 1000, 1100, 19, 1); moved != 0 {
		t.Errorf("a second move at 19 arrivals: budget 0.1 allows 1 in all")
	}
}

// TestRunMovesWithinBudget: replays with a move budget keep the ledger
// consistent after every placement and move (Check), never move more than
// the budget allows at any point, and place at least as many pods.
func TestRunMovesWithinBudget(t *testing.T) {
	nodes, pods := smallCluster(), smallPods()
	moved := 0
	for _, policy := range []string{placement.FragmentationAware, BestFit, GPUPacking} {
		for seed := range uint64(6) {
			for _, budget := range []float64{0.05, 0.3} {
				p, err := NewPolicy(policy, WorkloadOf(pods, WorkloadOptions{}), seed, nodes)
				if err != nil {
					t.Fatal(err)
				}
				r, err := Run(Config{Nodes: nodes, Pods: pods, Policy: p, Seed: seed, Check: true, MoveBudget: budget})
				if err != nil {
					t.Fatalf("%s seed %d budget %v: %v", policy, seed, budget, err)
				}
				if lim := int(budget * float64(r.Arrived)); r.Moves > lim {
					t.Errorf("%s seed %d: %d moves for %d pods arrived, budget %v allows %d", policy, seed, r.Moves, r.Arrived, budget, lim)
				}
				for _, pt := range r.Curve {
					if pt.N > 0 && pt.Moves > int(budget*float64(pt.Arrived)+1e-9) {
						t.Errorf("%s seed %d x=%d: %d moves after %d arrivals, over budget %v", policy, seed, pt.X, pt.Moves, pt.Arrived, budget)
					}
				}
				if r.MovePlans > r.Moves || r.Placed+r.Failed != r.Arrived {
					t.Errorf("%s seed %d: %d plans for %d moves; placed %d + failed %d != %d", policy, seed, r.MovePlans, r.Moves, r.Placed, r.Failed, r.Arrived)
				}
				moved += r.Moves
			}
		}
	}
	if moved == 0 {
		t.Error("no replay moved a pod; the test must exercise moves")
	}
}
