package placement_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

func TestFitShareBestFit(t *testing.T) {
	c := newCluster(t).node("n", 6, 80, 1)
	c.share("n", 0, 10) // 70 free
	c.share("n", 1, 35) // 45 free
	c.share("n", 2, 50) // 30 free
	c.share("n", 3, 35) // 45 free (tie with GPU 1)
	c.whole("n", []int{4})
	c.unhealthy("n", 5, "XID 79") // 80 free but unhealthy
	tests := []struct {
		name     string
		give     int64
		wantGPU  int
		wantFree placement.MiB
	}{
		{"smallest free that holds it", 40, 1, 40 * gib},
		{"exact fit", 30, 2, 30 * gib},
		{"only the emptiest holds it", 60, 0, 60 * gib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ni := c.ni("n")
			ch, reason := placement.Fit(shareGiB(tc.give), ni)
			if reason != nil {
				t.Fatalf("Fit() = %s", reason)
			}
			if got := ch.Indexes(ni); !slices.Equal(got, []int{tc.wantGPU}) || ch.Whole || ch.MemoryMiB != tc.wantFree || ch.Node != "n" {
				t.Errorf("Fit() = %+v on GPUs %v, want GPU %d", ch, got, tc.wantGPU)
			}
			a := ch.Allocation(shareGiB(tc.give), ni)
			want := ledger.Share{Index: tc.wantGPU, UUID: ni.Node.GPUs[tc.wantGPU].UUID, MemoryMiB: tc.wantFree}
			if a.PodUID != "new" || a.Whole || !slices.Equal(a.GPUs, []ledger.Share{want}) {
				t.Errorf("Allocation() = %+v", a)
			}
		})
	}
}

func TestFitWholeIslands(t *testing.T) {
	tests := []struct {
		name      string
		island    int
		busy      []int // GPUs held by other pods
		unhealthy []int
		give      int
		want      []int
		wantSpan  int
	}{
		{"tightest island", 4, []int{0, 1}, nil, 2, []int{2, 3}, 1},
		{"island that holds all", 4, []int{0, 1}, nil, 3, []int{4, 5, 6}, 1},
		{"first of equal islands", 4, nil, nil, 4, []int{0, 1, 2, 3}, 1},
		{"whole node", 4, nil, nil, 8, []int{0, 1, 2, 3, 4, 5, 6, 7}, 2},
		{"spill over fewest islands", 2, []int{0, 2, 4}, nil, 3, []int{1, 6, 7}, 2},
		{"spill largest islands first", 4, []int{0, 4, 5}, nil, 4, []int{1, 2, 3, 6}, 2},
		{"unhealthy GPUs skipped", 4, nil, []int{1}, 4, []int{4, 5, 6, 7}, 1},
		{"no NVLink", 1, []int{0}, nil, 2, []int{1, 2}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t).node("n", 8, 80, tc.island)
			for _, i := range tc.unhealthy {
				c.unhealthy("n", i, "XID 79")
			}
			for _, i := range tc.busy {
				c.share("n", i, 1)
			}
			ni := c.ni("n")
			ch, reason := placement.Fit(gpus(tc.give), ni)
			if reason != nil {
				t.Fatalf("Fit() = %s", reason)
			}
			if got := ch.Indexes(ni); !slices.Equal(got, tc.want) || !ch.Whole {
				t.Errorf("Fit() GPUs %v, want %v", got, tc.want)
			}
			if got := placement.IslandsOf(ch, ni); got != tc.wantSpan {
				t.Errorf("IslandsOf() = %d, want %d", got, tc.wantSpan)
			}
			a := ch.Allocation(gpus(tc.give), ni)
			for _, g := range a.GPUs {
				if g.MemoryMiB != 80*gib {
					t.Errorf("whole GPU %d recorded with %d MiB", g.Index, g.MemoryMiB)
				}
			}
		})
	}
}

func TestFitReasons(t *testing.T) {
	tests := []struct {
		name   string
		build  func(c *cluster) *ledger.NodeInfo
		give   placement.Request
		want   placement.Reason
		wantMs string
	}{
		{"unknown node", func(c *cluster) *ledger.NodeInfo { return nil }, gpus(1),
			placement.Reason{Code: placement.UnknownNode, GPU: -1}, "node has not published its GPU topology yet"},
		{"no GPUs", func(c *cluster) *ledger.NodeInfo { c.node("n", 0, 80, 1); return c.ni("n") }, shareGiB(1),
			placement.Reason{Code: placement.NoGPUs, Node: "n", GPU: -1}, "node has no GPUs managed by Rota"},
		{"model mismatch", func(c *cluster) *ledger.NodeInfo { c.node("n", 8, 80, 8); return c.ni("n") },
			placement.Request{GPUs: 1, Models: []string{"A100", "H200"}},
			placement.Reason{Code: placement.ModelMismatch, Node: "n", GPU: -1, Models: []string{"A100", "H200"}, Health: "H100"},
			"pod needs GPU model A100 or H200; node has H100"},
		{"share larger than any GPU", func(c *cluster) *ledger.NodeInfo { c.node("n", 8, 80, 8); return c.ni("n") }, shareGiB(100),
			placement.Reason{Code: placement.ShareTooLarge, Node: "n", GPU: -1, NeedMiB: 100 * gib, FreeMiB: 80 * gib},
			"pod needs 100 GiB on one GPU; the largest GPU here has 80 GiB"},
		{"insufficient memory", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 4, 80, 1)
			c.share("n", 0, 70)
			c.whole("n", []int{1})
			c.share("n", 2, 75)
			c.share("n", 3, 62)
			return c.ni("n")
		}, shareGiB(40),
			placement.Reason{Code: placement.InsufficientMemory, Node: "n", GPU: 3, NeedMiB: 40 * gib, FreeMiB: 18 * gib, Resolvable: true},
			"GPU 3 has 18 GiB free, pod needs 40 GiB"},
		{"no healthy GPU has memory", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 1, 80, 1)
			c.share("n", 0, 60)
			c.unhealthy("n", 0, "XID 79")
			return c.ni("n")
		}, shareGiB(40),
			placement.Reason{Code: placement.InsufficientMemory, Node: "n", GPU: -1, NeedMiB: 40 * gib},
			"no GPU has memory free, pod needs 40 GiB"},
		{"share only fits an unhealthy GPU", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 2, 80, 1)
			c.share("n", 0, 60)
			c.unhealthy("n", 1, "XID 79")
			return c.ni("n")
		}, shareGiB(40),
			placement.Reason{Code: placement.Unhealthy, Node: "n", GPU: 1, Health: "XID 79", Resolvable: true},
			"GPU 1 unhealthy: XID 79"},
		{"insufficient GPUs", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 8, 80, 4)
			c.whole("n", []int{0, 1, 2, 3})
			c.share("n", 4, 1)
			return c.ni("n")
		}, gpus(4),
			placement.Reason{Code: placement.InsufficientGPUs, Node: "n", GPU: -1, NeedGPUs: 4, FreeGPUs: 3, Resolvable: true},
			"3 free GPUs, pod needs 4"},
		{"one free GPU", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 2, 80, 2)
			c.whole("n", []int{0})
			return c.ni("n")
		}, gpus(2),
			placement.Reason{Code: placement.InsufficientGPUs, Node: "n", GPU: -1, NeedGPUs: 2, FreeGPUs: 1, Resolvable: true},
			"1 free GPU, pod needs 2"},
		{"too few GPUs", func(c *cluster) *ledger.NodeInfo { c.node("n", 2, 80, 2); return c.ni("n") }, gpus(4),
			placement.Reason{Code: placement.TooFewGPUs, Node: "n", GPU: -1, NeedGPUs: 4, FreeGPUs: 2},
			"node has 2 healthy GPUs, pod needs 4"},
		{"whole blocked by an unhealthy GPU", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 8, 80, 8)
			c.unhealthy("n", 5, "XID 79")
			return c.ni("n")
		}, gpus(8),
			placement.Reason{Code: placement.Unhealthy, Node: "n", GPU: 5, Health: "XID 79", NeedGPUs: 8, FreeGPUs: 7},
			"GPU 5 unhealthy: XID 79"},
		{"unhealthy without a reason", func(c *cluster) *ledger.NodeInfo {
			c.node("n", 1, 80, 1)
			c.unhealthy("n", 0, "")
			return c.ni("n")
		}, gpus(1),
			placement.Reason{Code: placement.Unhealthy, Node: "n", GPU: 0, Health: "reported by the device plugin", NeedGPUs: 1},
			"GPU 0 unhealthy: reported by the device plugin"},
		{"insufficient CPU", func(c *cluster) *ledger.NodeInfo {
			c.add(topology.FromSpec(topology.Spec{Name: "n", Model: "H100", Count: 1, MemoryMiB: 80 * gib, CPUMilli: 2000}))
			return c.ni("n")
		}, placement.Request{GPUs: 1, CPUMilli: 4000},
			placement.Reason{Code: placement.InsufficientCPU, Node: "n", GPU: -1, NeedCPU: 4000, FreeCPU: 2000},
			"node has 2000m CPU free, pod needs 4000m"},
		{"insufficient host memory", func(c *cluster) *ledger.NodeInfo {
			c.add(topology.FromSpec(topology.Spec{Name: "n", Model: "H100", Count: 1, MemoryMiB: 80 * gib, HostMemoryMiB: 1 * gib}))
			return c.ni("n")
		}, placement.Request{MemoryUnits: 1, HostMemoryMiB: 2 * gib},
			placement.Reason{Code: placement.InsufficientHostMemory, Node: "n", GPU: -1, NeedMiB: 2 * gib, FreeMiB: 1 * gib},
			"node has 1 GiB host memory free, pod needs 2 GiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ni := tc.build(newCluster(t))
			ch, reason := placement.Fit(tc.give, ni)
			if reason == nil {
				t.Fatalf("Fit() = %+v, want a refusal", ch)
			}
			if diff := cmp.Diff(tc.want, *reason); diff != "" {
				t.Errorf("Fit() reason (-want +got):\n%s", diff)
			}
			if got := reason.Message(); got != tc.wantMs {
				t.Errorf("Message() = %q, want %q", got, tc.wantMs)
			}
			if reason.String() != reason.Message() {
				t.Errorf("String() != Message()")
			}
		})
	}
}

func TestReasonMessageOverrides(t *testing.T) {
	tests := []struct {
		give placement.Reason
		want string
	}{
		{placement.Reason{Code: placement.GangNoFit, Text: "gang a: 1 of 2 members fit"}, "gang a: 1 of 2 members fit"},
		{placement.Reason{Code: placement.GangSlot}, "GangSlot"},
		{placement.Reason{Code: placement.GangIncomplete}, "GangIncomplete"},
	}
	for _, tc := range tests {
		if got := tc.give.Message(); got != tc.want {
			t.Errorf("Message(%s) = %q, want %q", tc.give.Code, got, tc.want)
		}
	}
}

func TestFitGPUFreeAndModels(t *testing.T) {
	c := newCluster(t).node("empty", 0, 0, 1)
	c.add(&topology.Node{Name: "mixed", MemoryUnitMiB: gib, GPUs: []topology.GPU{
		{Index: 0, UUID: "a", Model: "A100", MemoryMiB: 40 * gib, Healthy: true, Island: 0},
		{Index: 1, UUID: "b", Model: "H100", MemoryMiB: 80 * gib, Healthy: true, Island: 1},
	}})
	if ch, reason := placement.Fit(placement.Request{CPUMilli: 100}, c.ni("empty")); reason != nil || ch.Node != "empty" || len(ch.Slots) != 0 {
		t.Errorf("GPU-free pod: %+v, %v", ch, reason)
	}
	ni := c.ni("mixed")
	// The A100 is the best fit by memory, but the pod wants an H100.
	ch, reason := placement.Fit(placement.Request{MemoryUnits: 10, Models: []string{"H100"}}, ni)
	if reason != nil || !slices.Equal(ch.Indexes(ni), []int{1}) {
		t.Errorf("Fit(H100 share) = %v, %v", ch.Indexes(ni), reason)
	}
	ch, reason = placement.Fit(placement.Request{MemoryUnits: 10}, ni)
	if reason != nil || !slices.Equal(ch.Indexes(ni), []int{0}) {
		t.Errorf("Fit(any share) = %v, %v", ch.Indexes(ni), reason)
	}
	if _, reason := placement.Fit(placement.Request{GPUs: 2, Models: []string{"A100"}}, ni); reason == nil || reason.Code != placement.TooFewGPUs {
		t.Errorf("Fit(2 A100) = %v, want TooFewGPUs", reason)
	}
	// A node with its own memory unit.
	c.add(topology.FromSpec(topology.Spec{Name: "unit", Model: "H100", Count: 1, MemoryMiB: 80 * gib, UnitMiB: 512}))
	ch, reason = placement.Fit(shareGiB(10), c.ni("unit"))
	if reason != nil || ch.MemoryMiB != 5*gib {
		t.Errorf("10 units of 512 MiB = %d MiB, %v", ch.MemoryMiB, reason)
	}
}

func TestFitDoesNotChangeSnapshot(t *testing.T) {
	c := newCluster(t).node("n", 8, 80, 4)
	c.share("n", 0, 20)
	snap := c.l.Snapshot()
	before := render(snap)
	for _, r := range []placement.Request{shareGiB(10), gpus(3), gpus(9), shareGiB(100)} {
		placement.Fit(r, snap.Node("n"))
	}
	if render(snap) != before {
		t.Errorf("Fit changed the snapshot")
	}
}

func TestRequest(t *testing.T) {
	tests := []struct {
		give         placement.Request
		wantDescribe string
		wantWhole    bool
		wantFree     bool
	}{
		{gpus(1), "1 whole GPU", true, false},
		{gpus(4), "4 whole GPUs", true, false},
		{shareGiB(20), "20 GiB on one GPU", false, false},
		{placement.Request{}, "0 GiB on one GPU", false, true},
	}
	for _, tc := range tests {
		if got := tc.give.Describe(gib); got != tc.wantDescribe || tc.give.Whole() != tc.wantWhole || tc.give.GPUFree() != tc.wantFree {
			t.Errorf("%+v: Describe %q Whole %v GPUFree %v", tc.give, got, tc.give.Whole(), tc.give.GPUFree())
		}
	}
	a, b := placement.Request{GPUs: 2, Models: []string{"H100"}}, placement.Request{UID: "x", GPUs: 2, Models: []string{"H100"}, Priority: 9}
	if !a.SameShape(b) || a.SameShape(placement.Request{GPUs: 2}) {
		t.Errorf("SameShape is wrong")
	}
	if got := shareGiB(3).NeedMiB(512); got != 1536 {
		t.Errorf("NeedMiB = %d", got)
	}
}
