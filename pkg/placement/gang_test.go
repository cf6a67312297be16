package placement_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

func newGang(name string, size int, member placement.Request) placement.Gang {
	g := placement.Gang{Name: name, Member: member}
	for i := range size {
		g.UIDs = append(g.UIDs, fmt.Sprintf("%s-%d", name, i))
		g.Pods = append(g.Pods, fmt.Sprintf("ns/%s-%d", name, i))
	}
	return g
}

// rack adds count empty 8-GPU nodes named prefix-i with the given tiers.
func (c *cluster) rack(prefix string, count int, tiers ...string) *cluster {
	for i := range count {
		c.node(fmt.Sprintf("%s-%d", prefix, i), 8, 80, 8, tiers...)
	}
	return c
}

func TestPlanGang(t *testing.T) {
	tests := []struct {
		name      string
		build     func(c *cluster)
		give      placement.Gang
		tiers     int
		wantLevel int
		wantWhere string
		wantNodes []string
	}{
		{"tightest single node", func(c *cluster) {
			c.node("a-empty", 8, 80, 8).node("b-half", 8, 80, 8).node("c-full", 8, 80, 8)
			c.whole("b-half", []int{0, 1, 2, 3})
			c.whole("c-full", []int{0, 1, 2, 3, 4, 5, 6})
		}, newGang("g", 2, gpus(2)), 0, placement.TierNode, "b-half", []string{"b-half"}},
		{"shares on one node", func(c *cluster) { c.node("a", 2, 80, 2) },
			newGang("g", 4, shareGiB(40)), 0, placement.TierNode, "a", []string{"a"}},
		{"tightest tier-0 group", func(c *cluster) {
			c.rack("a", 3, "leaf-a", "z1").rack("b", 5, "leaf-b", "z1").rack("c", 4, "leaf-c", "z1")
		}, newGang("g", 4, gpus(8)), 2, 0, "leaf-c", []string{"c-0", "c-1", "c-2", "c-3"}},
		{"tier-1 group when no leaf holds it", func(c *cluster) {
			c.rack("a", 2, "leaf-a", "z1").rack("b", 2, "leaf-b", "z1")
			c.rack("c", 2, "leaf-c", "z2").rack("d", 2, "leaf-d", "z2").rack("e", 2, "leaf-e", "z2")
		}, newGang("g", 3, gpus(8)), 2, 1, "z1", []string{"a-0", "a-1", "b-0"}},
		{"the cluster when no group holds it", func(c *cluster) {
			c.rack("a", 2, "leaf-a", "z1").rack("b", 2, "leaf-b", "z2")
		}, newGang("g", 3, gpus(8)), 2, 2, "cluster", []string{"a-0", "a-1", "b-0"}},
		{"nodes without tier labels only at cluster level", func(c *cluster) {
			c.rack("a", 2).rack("b", 1, "leaf-b")
		}, newGang("g", 3, gpus(8)), 1, 1, "cluster", []string{"a-0", "a-1", "b-0"}},
		{"fullest nodes first within the group", func(c *cluster) {
			c.rack("a", 3, "leaf-a")
			c.whole("a-0", []int{0, 1, 2, 3, 4, 5})
		}, newGang("g", 9, gpus(2)), 1, 0, "leaf-a", []string{"a-0", "a-1", "a-2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			tc.build(c)
			snap := c.l.Snapshot()
			before := render(snap)
			plan, reason := placement.PlanGang(tc.give, snap, nil, tc.tiers)
			if reason != nil {
				t.Fatalf("PlanGang() = %s", reason)
			}
			if render(snap) != before {
				t.Errorf("PlanGang changed the snapshot")
			}
			if plan.Level != tc.wantLevel || plan.Where != tc.wantWhere || !slices.Equal(plan.Nodes(), tc.wantNodes) {
				t.Errorf("PlanGang() level %d where %q nodes %v; want %d %q %v", plan.Level, plan.Where, plan.Nodes(),
					tc.wantLevel, tc.wantWhere, tc.wantNodes)
			}
			checkPlan(t, c.l, tc.give, plan)
		})
	}
}

// checkPlan checks that a plan has one allocation per member, in order, and
// that the ledger accepts it as one gang reservation.
func checkPlan(t *testing.T, l *ledger.Ledger, g placement.Gang, plan placement.GangPlan) {
	t.Helper()
	if len(plan.Allocations) != g.Size() {
		t.Fatalf("plan has %d allocations, gang %d members", len(plan.Allocations), g.Size())
	}
	for i, a := range plan.Allocations {
		if a.PodUID != g.UIDs[i] || a.Pod != g.Pods[i] || a.Gang != g.Name || a.GangSize != g.Size() {
			t.Errorf("allocation %d = %+v", i, a)
		}
	}
	if err := l.ReserveAll(plan.Allocations, expires); err != nil {
		t.Fatalf("the ledger refuses the plan: %v", err)
	}
	if errs := l.Check(); len(errs) > 0 {
		t.Fatalf("Check() after reserving the plan = %v", errs)
	}
}

func TestPlanGangDoesNotFit(t *testing.T) {
	c := newCluster(t).rack("a", 2, "leaf-a", "z1").rack("b", 1, "leaf-b", "z1").rack("c", 1, "leaf-c", "z2")
	c.whole("c-0", []int{0})
	snap := c.l.Snapshot()
	before := render(snap)
	_, reason := placement.PlanGang(newGang("ns/train-7", 5, gpus(8)), snap, nil, 2)
	if reason == nil {
		t.Fatal("PlanGang() placed a gang that does not fit")
	}
	want := `gang ns/train-7: 3 of 5 members fit in the cluster (each needs 8 whole GPUs); 2 more must fit; ` +
		`the best node holds 1, the best tier-0 group "leaf-a" holds 2, the best tier-1 group "z1" holds 3`
	if got := reason.Message(); got != want {
		t.Errorf("Message() =\n%q\nwant\n%q", got, want)
	}
	if reason.Code != placement.GangNoFit || reason.NeedGPUs != 5 || reason.FreeGPUs != 3 || reason.GPU != -1 {
		t.Errorf("reason = %+v", *reason)
	}
	if render(snap) != before {
		t.Errorf("PlanGang changed the snapshot")
	}
	// Nothing fits at all.
	_, reason = placement.PlanGang(newGang("ns/big", 2, gpus(9)), snap, nil, 0)
	if want := "gang ns/big: 0 of 2 members fit in the cluster (each needs 9 whole GPUs); 2 more must fit"; reason == nil || reason.Message() != want {
		t.Errorf("Message() = %v, want %q", reason, want)
	}
	// Shares name their memory.
	_, reason = placement.PlanGang(newGang("ns/s", 2, shareGiB(100)), snap, nil, 0)
	if reason == nil || !strings.Contains(reason.Message(), "each needs 100 GiB on one GPU") {
		t.Errorf("Message() = %v", reason)
	}
	_, reason = placement.PlanGang(placement.Gang{Name: "ns/none", Member: gpus(1)}, snap, nil, 0)
	if reason == nil || reason.Message() != "gang ns/none has no members" {
		t.Errorf("empty gang: %v", reason)
	}
}

func TestPlanGangCandidates(t *testing.T) {
	c := newCluster(t).rack("a", 4)
	g := newGang("g", 2, gpus(8))
	plan, reason := placement.PlanGang(g, c.l.Snapshot(), []string{"a-3", "gone", "a-1"}, 0)
	if reason != nil || !slices.Equal(plan.Nodes(), []string{"a-1", "a-3"}) {
		t.Errorf("PlanGang(candidates) = %v, %v", plan.Nodes(), reason)
	}
	// A candidate listed twice must not let two members share its GPUs.
	_, reason = placement.PlanGang(g, c.l.Snapshot(), []string{"a-2", "a-2"}, 0)
	if reason == nil {
		t.Errorf("PlanGang() placed two 8-GPU members on one 8-GPU node listed twice")
	}
	plan, reason = placement.PlanGang(newGang("h", 2, gpus(4)), c.l.Snapshot(), []string{"a-2", "a-2"}, 0)
	if reason != nil {
		t.Fatal(reason)
	}
	checkPlan(t, c.l, newGang("h", 2, gpus(4)), plan)
}

// TestPlanGangProperties plans random gangs on random clusters: a plan is
// always accepted by the ledger, respects its level, and leaves the
// snapshot alone; a refusal happens only when the cluster truly lacks room.
func TestPlanGangProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 1))
	for iter := range 200 {
		c := newCluster(t)
		for i := range 4 + r.IntN(12) {
			tiers := []string{fmt.Sprintf("leaf-%d", r.IntN(4)), fmt.Sprintf("z%d", r.IntN(2))}
			c.add(topology.FromSpec(topology.Spec{Name: fmt.Sprintf("n%02d", i), Model: "H100", Count: 8,
				MemoryMiB: 80 * gib, IslandSize: 4, Tiers: tiers}))
			for range r.IntN(6) {
				if r.IntN(2) == 0 {
					name := fmt.Sprintf("n%02d", i)
					if ch, reason := placement.Fit(shareGiB(int64(10*(1+r.IntN(3)))), c.ni(name)); reason == nil {
						c.share(name, ch.Indexes(c.ni(name))[0], int(ch.MemoryMiB/gib))
					}
				} else if ni := c.ni(fmt.Sprintf("n%02d", i)); ni.IdleGPUs() > 0 {
					if ch, reason := placement.Fit(gpus(1), ni); reason == nil {
						c.whole(ni.Name(), ch.Indexes(ni))
					}
				}
			}
		}
		member := gpus(1 + r.IntN(8))
		if r.IntN(3) == 0 {
			member = shareGiB(int64(10 * (1 + r.IntN(8))))
		}
		g := newGang(fmt.Sprintf("g%d", iter), 1+r.IntN(12), member)
		snap := c.l.Snapshot()
		before := render(snap)
		plan, reason := placement.PlanGang(g, snap, nil, 2)
		if render(snap) != before {
			t.Fatalf("iteration %d: PlanGang changed the snapshot", iter)
		}
		if reason != nil {
			if reason.Code != placement.GangNoFit || !strings.HasPrefix(reason.Message(), "gang "+g.Name+": ") {
				t.Fatalf("iteration %d: reason %+v", iter, reason)
			}
			// Check the refusal: greedily placing members one by one fails too.
			if n := greedyCount(c.l.Snapshot(), member, g.Size()); n >= g.Size() {
				t.Fatalf("iteration %d: refused %d x %s but %d fit one by one: %s", iter, g.Size(), member.Describe(gib), n, reason)
			}
			continue
		}
		nodes := plan.Nodes()
		switch {
		case plan.Level == placement.TierNode && len(nodes) != 1:
			t.Fatalf("iteration %d: node-level plan on %v", iter, nodes)
		case plan.Level >= 0 && plan.Level < 2:
			for _, n := range nodes {
				if snap.Node(n).Node.Tier(plan.Level) != plan.Where {
					t.Fatalf("iteration %d: tier-%d plan in %q uses node %s", iter, plan.Level, plan.Where, n)
				}
			}
		}
		checkPlan(t, c.l, g, plan)
	}
}

// greedyCount places members one at a time on the first node that fits.
func greedyCount(snap *ledger.Snapshot, member placement.Request, limit int) int {
	n := 0
	for _, name := range snap.Names() {
		ni := snap.Node(name)
		for n < limit {
			member.UID = fmt.Sprint("probe-", n)
			ch, reason := placement.Fit(member, ni)
			if reason != nil {
				break
			}
			a := ch.Allocation(member, ni)
			ni = ni.With(&a)
			n++
		}
	}
	return n
}
