package placement

import (
	"math"
	"testing"
)

// TestFragOfReach checks the CPU and host-memory reach of the fragmentation
// measure (Shape.fragOn with reach set) against hand-computed cases, and that
// without reach the measure stays FGD's.
func TestFragOfReach(t *testing.T) {
	gpus := func(free ...float64) []gpuFree {
		out := make([]gpuFree, len(free))
		for i, f := range free {
			out[i] = gpuFree{free: f, model: "A"}
		}
		return out
	}
	tests := []struct {
		name      string
		w         Workload
		nf        nodeFree
		wantFGD   float64 // reach 0
		wantReach float64 // reach 1
	}{
		{"CPU for one of two idle GPUs", Workload{{GPUs: 1, CPUMilli: 12000, Weight: 1}},
			nodeFree{gpus: gpus(1, 1), cpu: 12000, mem: -1}, 0, 1},
		{"CPU for both idle GPUs", Workload{{GPUs: 1, CPUMilli: 12000, Weight: 1}},
			nodeFree{gpus: gpus(1, 1), cpu: 24000, mem: -1}, 0, 0},
		{"CPU not tracked", Workload{{GPUs: 1, CPUMilli: 12000, Weight: 1}},
			nodeFree{gpus: gpus(1, 1), cpu: -1, mem: -1}, 0, 0},
		{"shape asks no CPU", Workload{{GPUs: 1, Weight: 1}},
			nodeFree{gpus: gpus(1, 1), cpu: 0, mem: -1}, 0, 0},
		{"CPU for no pod: all free counts, with or without reach", Workload{{GPUs: 1, CPUMilli: 12000, Weight: 1}},
			nodeFree{gpus: gpus(1, 1), cpu: 11999, mem: -1}, 2, 2},
		{"host memory for one pod", Workload{{GPUs: 1, HostMemoryMiB: 16384, Weight: 1}},
			nodeFree{gpus: gpus(1, 1, 1), cpu: -1, mem: 20000}, 0, 2},
		{"the tighter of CPU and memory", Workload{{GPUs: 1, CPUMilli: 1000, HostMemoryMiB: 1000, Weight: 1}},
			nodeFree{gpus: gpus(1, 1, 1), cpu: 5000, mem: 2000}, 0, 1},
		{"two-GPU shape, CPU for one pod: 2 of 4 idle GPUs out of reach", Workload{{GPUs: 2, CPUMilli: 16000, Weight: 1}},
			nodeFree{gpus: gpus(1, 1, 1, 1, 0.5), cpu: 20000, mem: -1}, 0.5, 2.5},
		// Share of 0.4 with CPU for one pod: it takes the roomiest GPU (1);
		// 0.6 and 0.5 stay out of reach; 0.3 is fragment anyway.
		{"share, CPU for one pod", Workload{{Milli: 400, CPUMilli: 4000, Weight: 1}},
			nodeFree{gpus: gpus(0.5, 1, 0.3, 0.6), cpu: 4000, mem: -1}, 0.3, 0.3 + 0.6 + 0.5},
		{"share, CPU for three pods: every GPU that holds one is in reach", Workload{{Milli: 400, CPUMilli: 4000, Weight: 1}},
			nodeFree{gpus: gpus(0.5, 1, 0.3, 0.6), cpu: 12000, mem: -1}, 0.3, 0.3},
		{"weights add up", Workload{{GPUs: 1, CPUMilli: 12000, Weight: 0.5}, {CPUMilli: 1000, Weight: 0.5}},
			nodeFree{gpus: gpus(1, 1), cpu: 12000, mem: -1}, 0.5 * 2, 0.5*1 + 0.5*2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.w.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if got := tc.w.fragOf(tc.nf, 0); math.Abs(got-tc.wantFGD) > 1e-9 {
				t.Errorf("fragOf(reach=0) = %v, want %v", got, tc.wantFGD)
			}
			if got := tc.w.fragOf(tc.nf, 1); math.Abs(got-tc.wantReach) > 1e-9 {
				t.Errorf("fragOf(reach=1) = %v, want %v", got, tc.wantReach)
			}
			// The out-of-reach part scales with the weight.
			want := tc.wantFGD + 0.1*(tc.wantReach-tc.wantFGD)
			if got := tc.w.fragOf(tc.nf, 0.1); math.Abs(got-want) > 1e-9 {
				t.Errorf("fragOf(reach=0.1) = %v, want %v", got, want)
			}
		})
	}
}
