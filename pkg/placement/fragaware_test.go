package placement_test

import (
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

// TestFragmentationAwareCPUOnlyTie checks where a CPU-only pod goes when
// the gradient ties: the node left with the least CPU beyond what its free
// GPUs need (8 cores per GPU here), and, when every node falls short, the
// one that falls least short.
func TestFragmentationAwareCPUOnlyTie(t *testing.T) {
	w := placement.Workload{{GPUs: 1, CPUMilli: 8000, Weight: 1}}
	p, err := placement.NewPolicy(placement.FragmentationAware, w)
	if err != nil {
		t.Fatal(err)
	}
	node := func(name string, cpuMilli int64) *topology.Node {
		return topology.FromSpec(topology.Spec{Name: name, Model: "A", Count: 2, MemoryMiB: 1000, UnitMiB: 1, CPUMilli: cpuMilli})
	}
	tests := []struct {
		name     string
		giveCPUs map[string]int64 // node -> CPU capacity (2 idle GPUs need 16 cores)
		wantNode string
	}{
		{"least surplus that still covers the GPUs", map[string]int64{"a-big": 96000, "b-tight": 24000, "c-short": 16000}, "b-tight"},
		{"all short: the one least short", map[string]int64{"a-shorter": 9000, "b-short": 11000}, "b-short"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := ledger.New()
			for name, cpu := range tc.giveCPUs {
				l.UpsertNode(node(name, cpu))
			}
			snap := l.Snapshot()
			r := placement.Request{UID: "u", CPUMilli: 4000}
			var names []string
			var scores []int64
			for _, name := range snap.Names() {
				ni := snap.Node(name)
				c, reason := placement.Fit(r, ni)
				if reason != nil {
					continue
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
