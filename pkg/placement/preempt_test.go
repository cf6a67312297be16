package placement_test

import (
	"slices"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

func anyPod(*ledger.Allocation) bool { return true }

func uids(as []*ledger.Allocation) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.PodUID)
	}
	slices.Sort(out)
	return out
}

func TestVictims(t *testing.T) {
	tests := []struct {
		name     string
		build    func(c *cluster) (protect []string)
		give     placement.Request
		want     []string
		wantOK   bool
		wantNone bool // fits already
	}{
		{"fits already", func(c *cluster) []string { c.share("n", 0, 10); return nil }, shareGiB(10), nil, true, true},
		{"frees one GPU with the fewest victims", func(c *cluster) []string {
			c.share("n", 0, 20, prio(0)) // pod-01..03: GPU 0 needs two victims
			c.share("n", 0, 20, prio(0))
			c.share("n", 0, 40, prio(0))
			c.share("n", 1, 40, prio(0)) // pod-04, 05: GPU 1 needs two
			c.share("n", 1, 40, prio(0))
			c.share("n", 2, 70, prio(2))    // pod-06: GPU 2 needs one
			c.whole("n", []int{3}, prio(3)) // pod-07: GPU 3 needs one, more important
			return nil
		}, shareGiB(60), []string{"pod-06"}, true, false},
		{"minimal set: a small pod taken first is given back", func(c *cluster) []string {
			for i := 1; i < 4; i++ {
				c.whole("n", []int{i}, prio(9))
			}
			c.share("n", 0, 10, prio(0)) // pod-04
			c.share("n", 0, 10, prio(0)) // pod-05
			c.share("n", 0, 60, prio(1)) // pod-06
			return nil
		}, shareGiB(60), []string{"pod-06"}, true, false},
		{"lowest priority first on equal counts", func(c *cluster) []string {
			c.whole("n", []int{0}, prio(5))
			c.whole("n", []int{1}, prio(1))
			c.whole("n", []int{2}, prio(3))
			c.whole("n", []int{3}, prio(7))
			return nil
		}, shareGiB(10), []string{"pod-02"}, true, false},
		{"never an ineligible pod", func(c *cluster) []string {
			lo := c.whole("n", []int{0}, prio(0))
			c.whole("n", []int{1}, prio(5))
			c.whole("n", []int{2}, prio(6))
			c.whole("n", []int{3}, prio(7))
			return []string{lo}
		}, shareGiB(10), []string{"pod-02"}, true, false},
		{"nothing eligible makes room", func(c *cluster) []string {
			var p []string
			for i := range 4 {
				p = append(p, c.whole("n", []int{i}))
			}
			return p
		}, shareGiB(10), nil, false, false},
		{"unhealthy GPU does not count", func(c *cluster) []string {
			c.whole("n", []int{0}, prio(0))
			c.unhealthy("n", 0, "XID 79")
			c.whole("n", []int{1}, prio(5))
			c.whole("n", []int{2}, prio(5))
			c.whole("n", []int{3}, prio(5))
			return nil
		}, shareGiB(10), []string{"pod-02"}, true, false},
		{"whole GPUs: lowest priority first, minimal", func(c *cluster) []string {
			c.whole("n", []int{0}, prio(3))
			c.whole("n", []int{1}, prio(0))
			c.whole("n", []int{2}, prio(1))
			c.share("n", 3, 1, prio(2))
			return nil
		}, gpus(2), []string{"pod-02", "pod-03"}, true, false},
		{"whole GPUs: a big low-priority pod", func(c *cluster) []string {
			c.whole("n", []int{0, 1, 2}, prio(0))
			c.share("n", 3, 1, prio(0))
			return nil
		}, gpus(1), []string{"pod-02"}, true, false},
		{"too few GPUs cannot be helped", func(c *cluster) []string { c.whole("n", []int{0}); return nil }, gpus(5), nil, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t).node("n", 4, 80, 2)
			protect := tc.build(c)
			eligible := func(a *ledger.Allocation) bool { return !slices.Contains(protect, a.PodUID) }
			ni := c.ni("n")
			got, ok := placement.Victims(tc.give, ni, eligible)
			if ok != tc.wantOK {
				t.Fatalf("Victims() ok = %v, want %v (victims %v)", ok, tc.wantOK, uids(got))
			}
			if !ok {
				return
			}
			if tc.wantNone {
				if len(got) != 0 {
					t.Errorf("Victims() = %v for a pod that fits", uids(got))
				}
				return
			}
			if g := uids(got); !slices.Equal(g, tc.want) {
				t.Errorf("Victims() = %v, want %v", g, tc.want)
			}
			checkVictims(t, tc.give, ni, got, eligible)
		})
	}
}

// checkVictims: the victims are eligible, evicting them makes room, and
// the set is minimal (keeping any one of them leaves no room).
func checkVictims(t *testing.T, r placement.Request, ni *ledger.NodeInfo, got []*ledger.Allocation, eligible func(*ledger.Allocation) bool) {
	t.Helper()
	ids := make([]string, len(got))
	for i, a := range got {
		if !eligible(a) {
			t.Errorf("victim %s is not eligible", a.PodUID)
		}
		ids[i] = a.PodUID
	}
	if _, reason := placement.Fit(r, ni.Without(ids...)); reason != nil {
		t.Errorf("after evicting %v the pod still does not fit: %s", ids, reason)
	}
	for i := range ids {
		rest := slices.Delete(slices.Clone(ids), i, i+1)
		if _, reason := placement.Fit(r, ni.Without(rest...)); reason == nil {
			t.Errorf("victim %s is not needed", ids[i])
		}
	}
}

// TestVictimsCPU: on a node that tracks CPU, freeing GPU memory alone is
// not enough; the victims must free CPU too.
func TestVictimsCPU(t *testing.T) {
	c := newCluster(t)
	c.add(topology.FromSpec(topology.Spec{Name: "n", Model: "H100", Count: 2, MemoryMiB: 80 * gib, CPUMilli: 4000}))
	c.put(ledger.Allocation{Node: "n", CPUMilli: 3000}, []podOpt{prio(0)}) // pod-01: CPU only
	c.share("n", 0, 10, prio(0))                                           // pod-02
	r := placement.Request{UID: "new", MemoryUnits: 10, CPUMilli: 2000}
	ni := c.ni("n")
	got, ok := placement.Victims(r, ni, anyPod)
	if !ok || !slices.Equal(uids(got), []string{"pod-01"}) {
		t.Fatalf("Victims() = %v, %v; want [pod-01]", uids(got), ok)
	}
	checkVictims(t, r, ni, got, anyPod)
}

// TestVictimsByCost: between victims the rules leave equal (priority,
// idleness, size), the one whose stop loses less work goes; the rules
// still come first.
func TestVictimsByCost(t *testing.T) {
	c := newCluster(t)
	c.add(topology.FromSpec(topology.Spec{Name: "n", Model: "H100", Count: 3, MemoryMiB: 80 * gib}))
	a := c.whole("n", []int{0}, prio(0)) // pod-01
	b := c.whole("n", []int{1}, prio(0)) // pod-02
	hi := c.whole("n", []int{2}, prio(5))
	lost := map[string]float64{a: 900, b: 10, hi: 0}
	cost := func(x *ledger.Allocation) float64 { return lost[x.PodUID] }
	r := placement.Request{UID: "new", GPUs: 1}
	got, ok := placement.VictimsByCost(r, c.ni("n"), anyPod, cost)
	if !ok || !slices.Equal(uids(got), []string{b}) {
		t.Fatalf("VictimsByCost = %v, %v; want [%s], the one that loses less", uids(got), ok, b)
	}
	if got, _ := placement.Victims(r, c.ni("n"), anyPod); !slices.Equal(uids(got), []string{a}) {
		t.Fatalf("without costs = %v; want [%s], by UID", uids(got), a)
	}
	// Priority still comes first: the higher-priority pod is never taken
	// for being cheap.
	lost[a], lost[b] = 5000, 5000
	if got, _ := placement.VictimsByCost(r, c.ni("n"), anyPod, cost); slices.Contains(uids(got), hi) {
		t.Fatalf("took the higher-priority pod %s for its cost: %v", hi, uids(got))
	}
	// Shares: of two GPUs whose shares must go, the cheaper set.
	s := newCluster(t)
	s.add(topology.FromSpec(topology.Spec{Name: "m", Model: "H100", Count: 2, MemoryMiB: 80 * gib}))
	x := s.share("m", 0, 70, prio(0))
	y := s.share("m", 1, 70, prio(0))
	lost = map[string]float64{x: 50, y: 5}
	got, ok = placement.VictimsByCost(placement.Request{UID: "share", MemoryUnits: 40}, s.ni("m"), anyPod, cost)
	if !ok || !slices.Equal(uids(got), []string{y}) {
		t.Fatalf("share victims = %v, %v; want [%s]", uids(got), ok, y)
	}
}
