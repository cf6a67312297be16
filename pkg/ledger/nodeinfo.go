package ledger

import (
	"github.com/rota-sched/rota/pkg/topology"
)

// GPUUse is how one GPU is used.
type GPUUse struct {
	UsedMiB MiB
	// Exclusive is set when a pod owns the GPU whole.
	Exclusive bool
	// Pods counts the allocations (reserved or committed) on the GPU.
	Pods int
}

// NodeInfo is an immutable view of one node: its topology and how each GPU
// is used. The ledger replaces a NodeInfo on every change (copy on write), so
// a NodeInfo read from a snapshot never changes under its reader.
type NodeInfo struct {
	Node *topology.Node
	// Use is aligned with Node.GPUs.
	Use []GPUUse
	// Allocs lists the allocations on this node, by pod UID.
	Allocs map[string]*Allocation
	// CPUMilli and HostMemoryMiB in use (tracked only when the node has them).
	CPUMilli      int64
	HostMemoryMiB MiB
	// Claim is the reservation holding room on the node (nil: none); held
	// is the view other pods see (For) and heldSlots the GPUs it holds.
	Claim     *Claim
	held      *NodeInfo
	heldSlots []int
}

func newNodeInfo(n *topology.Node) *NodeInfo {
	return &NodeInfo{Node: n, Use: make([]GPUUse, len(n.GPUs)), Allocs: map[string]*Allocation{}}
}

// Name returns the node name.
func (ni *NodeInfo) Name() string { return ni.Node.Name }

// FreeMiB is the memory still free on the GPU at slot s; 0 when the GPU is
// owned whole or unhealthy.
func (ni *NodeInfo) FreeMiB(s int) MiB {
	g, u := &ni.Node.GPUs[s], &ni.Use[s]
	if !g.Healthy || u.Exclusive {
		return 0
	}
	return max(g.MemoryMiB-u.UsedMiB, 0)
}

// Idle reports whether the GPU at slot s is healthy and holds no allocation
// and no leaked memory, so a pod may own it whole.
func (ni *NodeInfo) Idle(s int) bool {
	u, g := &ni.Use[s], &ni.Node.GPUs[s]
	return u.Pods == 0 && !u.Exclusive && u.UsedMiB == 0 && g.Healthy && g.LeakedMiB == 0
}

// IdleGPUs counts the GPUs a whole-GPU pod could take now.
func (ni *NodeInfo) IdleGPUs() int {
	c := 0
	for s := range ni.Use {
		if ni.Idle(s) {
			c++
		}
	}
	return c
}

// HealthyGPUs counts the healthy GPUs.
func (ni *NodeInfo) HealthyGPUs() int {
	c := 0
	for s := range ni.Node.GPUs {
		if ni.Node.GPUs[s].Healthy {
			c++
		}
	}
	return c
}

// UsedMiB is the memory assigned on all GPUs (whole GPUs count in full).
func (ni *NodeInfo) UsedMiB() MiB {
	var s MiB
	for _, u := range ni.Use {
		s += u.UsedMiB
	}
	return s
}

// FreeCPUMilli is the CPU still free, or -1 when the node does not track CPU.
func (ni *NodeInfo) FreeCPUMilli() int64 {
	if ni.Node.CPUMilli <= 0 {
		return -1
	}
	return ni.Node.CPUMilli - ni.CPUMilli
}

// FreeHostMemoryMiB is the host memory still free, or -1 when not tracked.
func (ni *NodeInfo) FreeHostMemoryMiB() MiB {
	if ni.Node.HostMemoryMiB <= 0 {
		return -1
	}
	return ni.Node.HostMemoryMiB - ni.HostMemoryMiB
}

// clone copies ni for modification.
func (ni *NodeInfo) clone() *NodeInfo {
	c := &NodeInfo{Node: ni.Node, Use: append([]GPUUse(nil), ni.Use...), Allocs: make(map[string]*Allocation, len(ni.Allocs)+1),
		CPUMilli: ni.CPUMilli, HostMemoryMiB: ni.HostMemoryMiB}
	for k, v := range ni.Allocs {
		c.Allocs[k] = v
	}
	return c
}

// apply adds (sign=1) or removes (sign=-1) a's use. a must name GPUs of this node.
func (ni *NodeInfo) apply(a *Allocation, sign int) {
	for _, g := range a.GPUs {
		s := ni.Node.Slot(g.Index)
		if s < 0 {
			continue
		}
		u := &ni.Use[s]
		u.UsedMiB += MiB(sign) * g.MemoryMiB
		u.Pods += sign
		if a.Whole {
			u.Exclusive = sign > 0
		}
	}
	ni.CPUMilli += int64(sign) * a.CPUMilli
	ni.HostMemoryMiB += MiB(sign) * a.HostMemoryMiB
	if sign > 0 {
		ni.Allocs[a.PodUID] = a
	} else {
		delete(ni.Allocs, a.PodUID)
	}
}

// With returns a copy of ni with a applied, for what-if planning. ni is not changed.
func (ni *NodeInfo) With(a *Allocation) *NodeInfo {
	c := ni.clone()
	c.apply(a, 1)
	c.hold(ni.Claim)
	return c
}

// Without returns a copy of ni with the allocations of the given pods removed.
func (ni *NodeInfo) Without(uids ...string) *NodeInfo {
	c := ni.clone()
	for _, u := range uids {
		if a, ok := c.Allocs[u]; ok {
			c.apply(a, -1)
		}
	}
	c.hold(ni.Claim)
	return c
}

// fits says whether a could be added to ni without breaking invariant 1 or
// landing on an unhealthy GPU; it returns a short reason when not.
func (ni *NodeInfo) fits(a *Allocation) error {
	n := ni.Node
	if n.CPUMilli > 0 && ni.CPUMilli+a.CPUMilli > n.CPUMilli {
		return errorf(ErrNoCapacity, "node %s has %dm CPU free, pod needs %dm", n.Name, n.CPUMilli-ni.CPUMilli, a.CPUMilli)
	}
	if n.HostMemoryMiB > 0 && ni.HostMemoryMiB+a.HostMemoryMiB > n.HostMemoryMiB {
		return errorf(ErrNoCapacity, "node %s has %s host memory free, pod needs %s", n.Name, n.HostMemoryMiB-ni.HostMemoryMiB, a.HostMemoryMiB)
	}
	for _, g := range a.GPUs {
		s := ni.Node.Slot(g.Index)
		if s < 0 {
			return errorf(ErrUnknownGPU, "node %s has no GPU %d", ni.Node.Name, g.Index)
		}
		gpu := ni.Node.GPUs[s]
		if g.UUID != "" && gpu.UUID != g.UUID {
			return errorf(ErrUnknownGPU, "GPU %d of node %s is %s, not %s", g.Index, ni.Node.Name, gpu.UUID, g.UUID)
		}
		if !gpu.Healthy {
			return errorf(ErrUnhealthy, "GPU %d of node %s is unhealthy: %s", g.Index, ni.Node.Name, gpu.Reason)
		}
		u := ni.Use[s]
		if u.Exclusive {
			return errorf(ErrNoCapacity, "GPU %d of node %s is owned whole by another pod", g.Index, ni.Node.Name)
		}
		if a.Whole && u.Pods > 0 {
			return errorf(ErrNoCapacity, "GPU %d of node %s is shared by %d pods", g.Index, ni.Node.Name, u.Pods)
		}
		if u.UsedMiB+g.MemoryMiB > gpu.MemoryMiB {
			return errorf(ErrNoCapacity, "GPU %d of node %s has %s free, pod needs %s",
				g.Index, ni.Node.Name, gpu.MemoryMiB-u.UsedMiB, g.MemoryMiB)
		}
	}
	return nil
}

// holds says whether a could be added to ni without breaking invariant 1,
// whatever the GPUs' health (used for pods that already run: restores and
// re-applied allocations).
func (ni *NodeInfo) holds(a *Allocation) error {
	for _, g := range a.GPUs {
		s := ni.Node.Slot(g.Index)
		if s < 0 {
			return errorf(ErrUnknownGPU, "node %s has no GPU %d", ni.Node.Name, g.Index)
		}
		u, gpu := ni.Use[s], ni.Node.GPUs[s]
		if u.Exclusive || (a.Whole && u.Pods > 0) || u.UsedMiB+g.MemoryMiB > gpu.MemoryMiB {
			return errorf(ErrNoCapacity, "GPU %d of node %s is already taken", g.Index, ni.Node.Name)
		}
	}
	return nil
}
