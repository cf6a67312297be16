package placement_test

import (
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

// TestFragmentationAwareCPUReach checks the CPU reach term on two 3-GPU
// nodes (workload: 1 GPU with 12 cores). A 1-GPU pod with 16 cores leaves 2
// idle GPUs on either; on a-36 the 20 cores left hold one more 12-core pod
// (one GPU out of reach), on b-48 the 32 cores hold both. A CPU-only pod of
// 14 cores leaves 3 idle GPUs and 22 cores on a-36 (two out of reach), 34 on
// b-48 (one out of reach). FGD sees no difference and takes the first name; the
// fragmentation-aware policy takes b-48, unless the workload has
// model-constrained shapes (the reach term is off then).
func TestFragmentationAwareCPUReach(t *testing.T) {
	one := placement.Shape{GPUs: 1, CPUMilli: 12000, Weight: 1}
	gpuPod := placement.Request{UID: "u", GPUs: 1, CPUMilli: 16000}
	cpuPod := placement.Request{UID: "u", CPUMilli: 14000}
	tests := []struct {
		name     string
		policy   string
		w        placement.Workload
		r        placement.Request
		wantNode string
	}{
		{"fgd, GPU pod: name order", placement.FGD, placement.Workload{one}, gpuPod, "a-36"},
		{"fgd, CPU-only pod: name order", placement.FGD, placement.Workload{one}, cpuPod, "a-36"},
		{"GPU pod: the node that keeps CPU for its GPUs", placement.FragmentationAware, placement.Workload{one}, gpuPod, "b-48"},
		{"CPU-only pod: the node that keeps CPU for its GPUs", placement.FragmentationAware, placement.Workload{one}, cpuPod, "b-48"},
		{"model-constrained workload: reach off", placement.FragmentationAware,
			placement.Workload{one, {GPUs: 1, CPUMilli: 12000, Models: []string{"A"}, Weight: 0.1}}, gpuPod, "a-36"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := placement.NewPolicy(tc.policy, tc.w)
			if err != nil {
				t.Fatal(err)
			}
			l := ledger.New()
			for name, cpu := range map[string]int64{"a-36": 36000, "b-48": 48000} {
				l.UpsertNode(topology.FromSpec(topology.Spec{Name: name, Model: "A", Count: 3, MemoryMiB: 1000, UnitMiB: 1, CPUMilli: cpu}))
			}
			snap := l.Snapshot()
			r := tc.r
			var names []string
			var scores []int64
			for _, name := range snap.Names() {
				ni := snap.Node(name)
				c, reason := placement.Fit(r, ni)
				if reason != nil {
					t.Fatalf("Fit(%s) = %v", name, reason)
				}
				names = append(names, name)
				scores = append(scores, p.Score(r, ni, c))
			}
			if got := names[placement.Rank(names, scores)[0]]; got != tc.wantNode {
				t.Errorf("best node = %s (scores %v over %v), want %s", got, scores, names, tc.wantNode)
			}
		})
	}
}
