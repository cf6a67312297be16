package sim

import (
	"math"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// TestNodeFragmentation checks placement.Workload.NodeFragmentation against
// FGD's definition on hand-computed cases (simulated GPUs: 1000 MiB, unit 1).
func TestNodeFragmentation(t *testing.T) {
	node := Cluster([]Node{{Name: "n", CPUMilli: 16000, GPUs: 4, Model: "A"}})[0]
	l := ledger.New()
	l.UpsertNode(node)
	// GPU 0 owned whole, GPU 1 half used; GPUs 2 and 3 idle; 8000m CPU used.
	for i, a := range []ledger.Allocation{
		{PodUID: "a", Node: "n", Whole: true, GPUs: []ledger.Share{{Index: 0, MemoryMiB: 1000}}, CPUMilli: 4000},
		{PodUID: "b", Node: "n", GPUs: []ledger.Share{{Index: 1, MemoryMiB: 500}}, CPUMilli: 4000},
	} {
		if err := l.Reserve(a, time.Time{}); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
	}
	ni := l.Snapshot().Node("n")
	tests := []struct {
		name string
		give placement.Workload
		want float64 // GPUs
	}{
		{name: "share that fits the half GPU", give: placement.Workload{{Milli: 500, CPUMilli: 1000, Weight: 1}}, want: 0},
		{name: "share larger than the half GPU", give: placement.Workload{{Milli: 600, CPUMilli: 1000, Weight: 1}}, want: 0.5},
		{name: "two whole GPUs", give: placement.Workload{{GPUs: 2, CPUMilli: 1000, Weight: 1}}, want: 0.5},
		{name: "three whole GPUs: none fit", give: placement.Workload{{GPUs: 3, Weight: 1}}, want: 2.5},
		{name: "CPU does not fit", give: placement.Workload{{GPUs: 1, CPUMilli: 9000, Weight: 1}}, want: 2.5},
		{name: "wrong model", give: placement.Workload{{GPUs: 1, Models: []string{"B"}, Weight: 1}}, want: 2.5},
		{name: "CPU-only", give: placement.Workload{{CPUMilli: 1000, Weight: 1}}, want: 2.5},
		{name: "mix", give: placement.Workload{{Milli: 600, Weight: 0.5}, {CPUMilli: 1, Weight: 0.5}}, want: 0.5*0.5 + 0.5*2.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.give.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got := tc.give.NodeFragmentation(ni); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("NodeFragmentation() = %v, want %v", got, tc.want)
			}
		})
	}
	// Placing a 0.5 share on the half GPU removes the 0.6 shape's fragment.
	w := placement.Workload{{Milli: 600, Weight: 1}}
	r := placement.Request{UID: "c", MemoryUnits: 500}
	c, reason := placement.Fit(r, ni)
	if reason != nil {
		t.Fatalf("Fit() = %v", reason)
	}
	if before, after := w.FragmentationChange(r, ni, c); before != 0.5 || after != 0 {
		t.Errorf("FragmentationChange() = %v, %v; want 0.5, 0", before, after)
	}
}
