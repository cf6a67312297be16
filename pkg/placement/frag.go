package placement

import (
	"fmt"
	"math"

	"github.com/rota-sched/rota/pkg/ledger"
)

// Shape is one kind of pod in a workload: whole GPUs, or a fraction of one
// GPU (Milli thousandths), with its share of the pod population.
type Shape struct {
	GPUs   int     `json:"gpus,omitempty"`
	Milli  int     `json:"milli,omitempty"`
	Weight float64 `json:"weight"`
}

// Workload is the expected mix of pod shapes the fragmentation-aware policy
// keeps room for.
type Workload []Shape

// DefaultWorkload is a mix close to the Alibaba openb trace: most pods take
// one GPU or a fraction of one.
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
		case s.GPUs < 0 || s.Milli < 0:
			return fmt.Errorf("workload[%d]: gpus and milli must not be negative", i)
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
	out := make(Workload, len(w))
	copy(out, w)
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
		if s.GPUs > 0 {
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

// freeFractions lists each healthy GPU's free fraction, optionally after c.
func freeFractions(ni *ledger.NodeInfo, c *Choice, buf []float64) []float64 {
	buf = buf[:0]
	for s, g := range ni.Node.GPUs {
		if !g.Healthy {
			continue
		}
		free := float64(ni.FreeMiB(s)) / float64(g.MemoryMiB)
		if c != nil {
			for _, cs := range c.Slots {
				if cs == s {
					if c.Whole {
						free = 0
					} else {
						free -= float64(c.MemoryMiB) / float64(g.MemoryMiB)
					}
				}
			}
		}
		buf = append(buf, math.Max(free, 0))
	}
	return buf
}

// fragAware scores a choice by how little it grows the node's fragmentation
// (FGD), with binpack as the tie-breaker so that equally fragmenting choices
// still fill used nodes first and keep empty nodes whole for large pods:
//
//	score = MaxScore * (0.9 * (1 - clamp(Δfrag / GPUs on node)) / 2 + 0.1 * node use after)
//
// where Δfrag = Fragmentation(after) - Fragmentation(before), in GPUs, and
// the first term maps Δfrag in [-GPUs, +GPUs] onto [0, 1].
type fragAware struct{ w Workload }

func (*fragAware) Name() string { return FragmentationAware }

func (p *fragAware) Score(_ Request, ni *ledger.NodeInfo, c Choice) int64 {
	var a, b [16]float64
	before := p.w.Fragmentation(freeFractions(ni, nil, a[:0]))
	after := p.w.Fragmentation(freeFractions(ni, &c, b[:0]))
	n := float64(max(len(ni.Node.GPUs), 1))
	delta := math.Max(-1, math.Min(1, (after-before)/n))
	v := 0.9*(1-delta)/2 + 0.1*usedFraction(ni, c)
	return int64(float64(MaxScore) * v)
}
