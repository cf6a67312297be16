package topology

import (
	"fmt"
	"hash/fnv"
)

// Spec describes a uniform GPU node: Count GPUs of one model grouped into
// NVLink islands of IslandSize GPUs. The demo, the simulator, the fake device
// plugin backend and the benchmarks build nodes from specs.
type Spec struct {
	Name       string
	Model      string
	Count      int
	MemoryMiB  MiB
	IslandSize int // 0 or 1: no NVLink
	// NUMANodes splits the GPUs evenly over this many NUMA nodes (default 1).
	NUMANodes int
	UnitMiB   MiB
	Tiers     []string
	// CPUMilli and HostMemoryMiB, when set, make CPU and host memory part of fit.
	CPUMilli      int64
	HostMemoryMiB MiB
}

// FromSpec builds a healthy node from s. GPU UUIDs are derived from the node
// name so they are stable across runs.
func FromSpec(s Spec) *Node {
	n := &Node{Name: s.Name, MemoryUnitMiB: s.UnitMiB, Tiers: append([]string(nil), s.Tiers...),
		CPUMilli: s.CPUMilli, HostMemoryMiB: s.HostMemoryMiB}
	if n.MemoryUnitMiB <= 0 {
		n.MemoryUnitMiB = 1024
	}
	numa := max(s.NUMANodes, 1)
	island := max(s.IslandSize, 1)
	h := fnv.New32a()
	h.Write([]byte(s.Name))
	sum := h.Sum32()
	for i := range s.Count {
		g := GPU{
			Index: i, Model: s.Model, MemoryMiB: s.MemoryMiB, Healthy: true,
			UUID:   fmt.Sprintf("GPU-%08x-%04x-4000-8000-%012x", sum, i, i),
			NUMA:   i * numa / max(s.Count, 1),
			Island: i / island,
		}
		if island > 1 {
			first := (i / island) * island
			for p := first; p < min(first+island, s.Count); p++ {
				if p != i {
					g.Peers = append(g.Peers, p)
				}
			}
		}
		n.GPUs = append(n.GPUs, g)
	}
	return n
}
