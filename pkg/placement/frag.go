package placement

import (
	"fmt"
	"math"
)

// Shape is one kind of pod in a workload: whole GPUs, a fraction of one GPU
// (Milli thousandths), or no GPU at all (CPU-only, CPUMilli set), with its
// share of the pod population. CPUMilli, HostMemoryMiB and Models, when set,
// make the fragmentation measure CPU-, memory- and model-aware (FGD counts a
// node's free GPUs as fragment for a shape whose CPU does not fit there).
type Shape struct {
	GPUs          int      `json:"gpus,omitempty"`
	Milli         int      `json:"milli,omitempty"`
	CPUMilli      int64    `json:"cpuMilli,omitempty"`
	HostMemoryMiB MiB      `json:"hostMemoryMiB,omitempty"`
	Models        []string `json:"models,omitempty"`
	Weight        float64  `json:"weight"`
}

// Workload is the expected mix of pod shapes the fragmentation-aware policy
// keeps room for.
type Workload []Shape

// DefaultWorkload is a generic guess at a training cluster's mix (most pods
// take one GPU or a fraction of one). It is only a fallback: on the openb
// trace it costs about 15 points of allocation against the trace's own
// shapes (test/replay TestVariants), so clusters should configure theirs
// (rota-extender --workload-file).
func DefaultWorkload() Workload {
	return Workload{
		{Milli: 250, Weight: 0.10}, {Milli: 500, Weight: 0.20}, {Milli: 750, Weight: 0.05},
		{GPUs: 1, Weight: 0.45}, {GPUs: 2, Weight: 0.08}, {GPUs: 4, Weight: 0.06}, {GPUs: 8, Weight: 0.06},
	}
}

// Validate checks every shape.
func (w Workload) Validate() error {
	for i, s := range w {
		switch {
		case s.Weight < 0 || math.IsNaN(s.Weight) || math.IsInf(s.Weight, 0):
			return fmt.Errorf("workload[%d].weight: %v is not a non-negative number", i, s.Weight)
		case s.GPUs < 0 || s.Milli < 0 || s.CPUMilli < 0 || s.HostMemoryMiB < 0:
			return fmt.Errorf("workload[%d]: gpus, milli, cpuMilli and hostMemoryMiB must not be negative", i)
		case s.GPUs == 0 && s.Milli == 0 && (s.CPUMilli > 0 || s.HostMemoryMiB > 0):
			// A CPU-only shape: every free GPU is fragment to it.
		case (s.GPUs > 0) == (s.Milli > 0):
			return fmt.Errorf("workload[%d]: set exactly one of gpus (whole GPUs) and milli (1..999 of one GPU)", i)
		case s.Milli >= 1000:
			return fmt.Errorf("workload[%d].milli: %d is a whole GPU or more; write gpus instead", i, s.Milli)
		}
	}
	return nil
}

func (w Workload) normalized() Workload {
	var sum float64
	for _, s := range w {
		sum += s.Weight
	}
	out := make(Workload, 0, len(w))
	for _, s := range w {
		if s.Weight > 0 {
			out = append(out, s)
		}
	}
	if sum > 0 {
		for i := range out {
			out[i].Weight /= sum
		}
	}
	return out
}

// Fragmentation is the expected GPU capacity (in GPUs) on the node that the
// workload's pods could not use, following FGD (ATC'23): for each shape, a
// free amount counts as fragment when the shape cannot use it — all free
// capacity if the shape fits nowhere on the node, else the free part of every
// GPU too small for it (for whole-GPU shapes: every partly used GPU).
// free holds each healthy GPU's free fraction (0..1).
func (w Workload) Fragmentation(free []float64) float64 {
	var total float64
	idle := 0
	maxFree := 0.0
	var sumFree float64
	for _, f := range free {
		sumFree += f
		if f >= 1 {
			idle++
		}
		maxFree = math.Max(maxFree, f)
	}
	for _, s := range w {
		var frag float64
		if s.GPUs == 0 && s.Milli == 0 {
			frag = sumFree
		} else if s.GPUs > 0 {
			if idle < s.GPUs {
				frag = sumFree
			} else {
				for _, f := range free {
					if f < 1 {
						frag += f
					}
				}
			}
		} else {
			need := float64(s.Milli) / 1000
			if maxFree < need {
				frag = sumFree
			} else {
				for _, f := range free {
					if f < need {
						frag += f
					}
				}
			}
		}
		total += s.Weight * frag
	}
	return total
}
