package placement

import (
	"cmp"
	"math"
	"slices"

	"github.com/rota-sched/rota/pkg/ledger"
)

// fragEps absorbs float rounding when a free fraction is compared with a need.
const fragEps = 1e-9

// gpuFree is one healthy GPU as the fragmentation measure sees it.
type gpuFree struct {
	free  float64 // free fraction, 0..1
	model string
}

// nodeFree is a node's free capacity: per healthy GPU, plus CPU and host
// memory (-1: not tracked).
type nodeFree struct {
	gpus []gpuFree
	cpu  int64
	mem  MiB
}

// freeOf reads ni's free capacity into buf.
func freeOf(ni *ledger.NodeInfo, buf []gpuFree) nodeFree {
	buf = buf[:0]
	for s, g := range ni.Node.GPUs {
		if !g.Healthy || g.MemoryMiB <= 0 {
			continue
		}
		buf = append(buf, gpuFree{free: float64(ni.FreeMiB(s)) / float64(g.MemoryMiB), model: g.Model})
	}
	return nodeFree{gpus: buf, cpu: ni.FreeCPUMilli(), mem: ni.FreeHostMemoryMiB()}
}

// freeAfter is ni's free capacity once r is placed as c.
func freeAfter(r Request, ni *ledger.NodeInfo, c Choice, buf []gpuFree) nodeFree {
	buf = buf[:0]
	for s, g := range ni.Node.GPUs {
		if !g.Healthy || g.MemoryMiB <= 0 {
			continue
		}
		free := float64(ni.FreeMiB(s)) / float64(g.MemoryMiB)
		if slices.Contains(c.Slots, s) {
			if c.Whole {
				free = 0
			} else {
				free = math.Max(free-float64(c.MemoryMiB)/float64(g.MemoryMiB), 0)
			}
		}
		buf = append(buf, gpuFree{free: free, model: g.Model})
	}
	nf := nodeFree{gpus: buf, cpu: ni.FreeCPUMilli(), mem: ni.FreeHostMemoryMiB()}
	if nf.cpu >= 0 {
		nf.cpu -= r.CPUMilli
	}
	if nf.mem >= 0 {
		nf.mem -= r.HostMemoryMiB
	}
	return nf
}

func (s Shape) modelOK(m string) bool { return len(s.Models) == 0 || slices.Contains(s.Models, m) }

// fragOf is the workload's expected fragmented GPU capacity of nf, in GPUs
// (FGD, Weng et al., ATC'23, section 4): for each shape, weighted by its share,
//   - a CPU-only shape, or one whose CPU or host memory does not fit the
//     node, or one for which too few GPUs of an allowed model have room,
//     finds every free GPU fraction on the node useless: all of it counts;
//   - otherwise the free part of each GPU that cannot hold one of the
//     shape's GPUs (too little free; for whole GPUs, any partly used GPU; or
//     a model the shape does not accept) counts.
//
// With reach > 0, a shape also counts, times reach, the GPUs the node's CPU
// and host memory leave out of its reach (see Shape.fragOn); FGD's measure
// is reach 0.
//
// Example: one 8-GPU node with GPUs free 1,1,0.5,0 and a workload of
// 1/2 x (0.6 GPU) + 1/2 x (2 whole GPUs): the 0.6 shape fits, the 0.5 GPU is
// fragment to it (0.5); the 2-GPU shape fits, 0.5 is fragment to it too;
// fragOf = 0.5*0.5 + 0.5*0.5 = 0.5 GPUs.
func (w Workload) fragOf(nf nodeFree, reach float64) float64 {
	var sumFree float64
	for _, g := range nf.gpus {
		sumFree += g.free
	}
	if sumFree <= fragEps {
		return 0
	}
	var total float64
	for _, s := range w {
		total += s.Weight * s.fragOn(nf, sumFree, reach)
	}
	return total
}

// fragOn is the fragment of nf, in GPUs, for one pod of shape s.
//
// With reach > 0, it is also CPU- and memory-aware beyond "does one pod
// fit": when the node's free CPU and host memory hold only m more pods of s,
// a whole-GPU shape of k GPUs can use at most m*k of its idle GPUs and a
// share at most m GPUs (the roomiest ones); the free part of every other GPU
// that could hold s is out of reach and counts, times reach, as fragment
// too. Example: 2 idle GPUs and 12 free cores on the node, s = 1 GPU with 12
// cores: m = 1, so one idle GPU is out of reach (FGD counts none). This is
// what strands GPUs behind exhausted CPUs before the last core is gone.
func (s Shape) fragOn(nf nodeFree, sumFree float64, reach float64) float64 {
	if s.GPUs == 0 && s.Milli == 0 {
		return sumFree
	}
	m := s.podsThatFit(nf)
	if m == 0 {
		return sumFree
	}
	need, k := 1.0, max(s.GPUs, 1)
	if s.GPUs == 0 {
		need = float64(s.Milli) / 1000
	}
	fits := 0
	var frag float64
	for _, g := range nf.gpus {
		if s.modelOK(g.model) && g.free+fragEps >= need {
			fits++
		} else {
			frag += g.free
		}
	}
	if fits < k {
		return sumFree
	}
	if reach <= 0 || m < 0 || m*k >= fits {
		return frag
	}
	return frag + reach*s.outOfReach(nf, need, m*k)
}

// podsThatFit is how many pods of s the node's free CPU and host memory
// hold, or -1 when neither limits it.
func (s Shape) podsThatFit(nf nodeFree) int {
	m := int64(-1)
	if nf.cpu >= 0 && s.CPUMilli > 0 {
		m = max(nf.cpu, 0) / s.CPUMilli
	}
	if nf.mem >= 0 && s.HostMemoryMiB > 0 {
		if n := int64(max(nf.mem, 0) / s.HostMemoryMiB); m < 0 || n < m {
			m = n
		}
	}
	if m > math.MaxInt32 {
		return -1
	}
	return int(m)
}

// outOfReach is the free capacity of the GPUs that could hold one of s's
// GPUs (free >= need, model allowed) beyond the reach roomiest of them.
func (s Shape) outOfReach(nf nodeFree, need float64, reach int) float64 {
	var buf [16]float64
	ok := buf[:0]
	var sum float64
	for _, g := range nf.gpus {
		if s.modelOK(g.model) && g.free+fragEps >= need {
			ok = append(ok, g.free)
			sum += g.free
		}
	}
	slices.SortFunc(ok, func(a, b float64) int { return cmp.Compare(b, a) })
	for _, f := range ok[:reach] {
		sum -= f
	}
	return sum
}

// NodeFragmentation is the workload's expected fragmented GPU capacity of
// node ni, in GPUs, CPU-, memory- and model-aware (see Shape). The cluster's
// fragmentation is the sum over its nodes.
func (w Workload) NodeFragmentation(ni *ledger.NodeInfo) float64 {
	var buf [16]gpuFree
	return w.fragOf(freeOf(ni, buf[:0]), 0)
}

// FragmentationChange returns node ni's fragmentation (as NodeFragmentation)
// before and after r is placed there as c.
func (w Workload) FragmentationChange(r Request, ni *ledger.NodeInfo, c Choice) (before, after float64) {
	return w.fragmentationChange(r, ni, c, 0)
}

// fragmentationChange is FragmentationChange with the out-of-reach capacity
// of fragOn weighted by reach (0: FGD's measure).
func (w Workload) fragmentationChange(r Request, ni *ledger.NodeInfo, c Choice, reach float64) (before, after float64) {
	var a, b [16]gpuFree
	return w.fragOf(freeOf(ni, a[:0]), reach), w.fragOf(freeAfter(r, ni, c, b[:0]), reach)
}
