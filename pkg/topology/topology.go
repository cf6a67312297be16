// Package topology is Rota's model of a GPU node: its GPUs, their NVLink
// islands, NUMA nodes and health, and where the node sits in the network
// (leaf switch, zone). It is built from the wire contract's Topology
// annotation plus the Node's labels and is immutable once built.
package topology

import (
	"cmp"
	"slices"

	"github.com/rota-sched/rota/pkg/contract"
)

// MiB re-exports the contract's memory type for brevity.
type MiB = contract.MiB

// GPU is one GPU of a node.
type GPU struct {
	Index     int
	UUID      string
	Model     string
	MemoryMiB MiB
	NUMA      int
	Island    int
	Peers     []int
	Healthy   bool
	Reason    string // why unhealthy, e.g. "XID 79"
	// LeakedMiB is memory held by processes of no live pod (the device
	// plugin publishes MemoryMiB lowered by it): such a GPU is never idle,
	// so no whole-GPU pod is placed on it.
	LeakedMiB MiB
}

// Node is one GPU node. Values of Node are never modified after New.
type Node struct {
	Name string
	// Tiers holds the node's topology label values, narrowest first (for
	// example leaf switch, then zone). An empty value means "unknown".
	Tiers []string
	// MemoryUnitMiB is the size of one gpu-memory unit on this node.
	MemoryUnitMiB MiB
	// GPUs sorted by index.
	GPUs []GPU
	// CPUMilli and HostMemoryMiB are the node's allocatable CPU and host
	// memory. Zero means "not tracked": the simulator tracks them, the
	// extender leaves them to kube-scheduler's own NodeResourcesFit.
	CPUMilli      int64
	HostMemoryMiB MiB
	// MPS is the device plugin's CUDA MPS state (nil: not managed, nothing
	// said); a node with MPS unavailable takes memory shares only from pods
	// that opt in (placement.Request.ShareWithoutMPS).
	MPS *contract.TopologyMPS
	// NoShares, when set, says why the node takes no memory shares (the
	// extender sets it for a node whose memory unit is not the cluster's:
	// a share would get a different amount of memory there than quota
	// charges for it).
	NoShares string
	// Closed, when set, says why the node takes no new GPU work at all (the
	// extender closes a node that runs a pod whose GPU assignment is not
	// Rota's: which GPUs that pod holds is unknown).
	Closed string
	// Pool is the node pool the node is in (its node-pool label), "" for
	// none: GPU pods go only to nodes of their team's pool
	// (placement.Request.Pool), and a pool's own policy scores its nodes.
	Pool string
}

// Labels says which node labels give the topology tiers, narrowest first.
// Pool is the label whose value names the node's node pool.
type Labels struct {
	Tiers []string
	Pool  string
}

// DefaultLabels uses the domain's leaf label and the well-known zone label,
// and the domain's node-pool label.
func DefaultLabels(n contract.Names) Labels {
	return Labels{Tiers: []string{n.Domain + "/leaf", "topology.kubernetes.io/zone"}, Pool: PoolLabel(n)}
}

// PoolLabel is the node label that puts a node in a node pool.
func PoolLabel(n contract.Names) string { return n.Domain + "/node-pool" }

// New builds a Node from its name, labels and parsed topology document.
func New(name string, labels map[string]string, keys Labels, t contract.Topology) *Node {
	n := &Node{Name: name, MemoryUnitMiB: t.MemoryUnitMiB}
	if t.MPS != nil {
		m := *t.MPS
		n.MPS = &m
	}
	if n.MemoryUnitMiB <= 0 {
		n.MemoryUnitMiB = contract.DefaultMemoryUnitMiB
	}
	for _, k := range keys.Tiers {
		n.Tiers = append(n.Tiers, labels[k])
	}
	if keys.Pool != "" {
		n.Pool = labels[keys.Pool]
	}
	n.GPUs = make([]GPU, 0, len(t.GPUs))
	for _, g := range t.GPUs {
		n.GPUs = append(n.GPUs, GPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			NUMA: g.NUMA, Island: g.Island, Peers: slices.Clone(g.Peers),
			Healthy: g.Health == contract.Healthy, Reason: g.Reason, LeakedMiB: g.LeakedMiB,
		})
	}
	slices.SortFunc(n.GPUs, func(a, b GPU) int { return cmp.Compare(a.Index, b.Index) })
	return n
}

// Slot returns the position of GPU index idx in n.GPUs, or -1.
func (n *Node) Slot(idx int) int {
	for i := range n.GPUs {
		if n.GPUs[i].Index == idx {
			return i
		}
	}
	return -1
}

// SlotByUUID returns the position of the GPU with uuid in n.GPUs, or -1.
func (n *Node) SlotByUUID(uuid string) int {
	for i := range n.GPUs {
		if n.GPUs[i].UUID == uuid {
			return i
		}
	}
	return -1
}

// Models returns the distinct GPU models of the node, sorted.
func (n *Node) Models() []string {
	var out []string
	for _, g := range n.GPUs {
		if !slices.Contains(out, g.Model) {
			out = append(out, g.Model)
		}
	}
	slices.Sort(out)
	return out
}

// TotalMemoryMiB is the sum of all GPUs' memory.
func (n *Node) TotalMemoryMiB() MiB {
	var s MiB
	for i := range n.GPUs {
		s += n.GPUs[i].MemoryMiB
	}
	return s
}

// Tier returns the node's value for tier level i (0 = narrowest), or "".
func (n *Node) Tier(i int) string {
	if i < 0 || i >= len(n.Tiers) {
		return ""
	}
	return n.Tiers[i]
}

// Document converts n back into the wire document (used by tests, the demo
// and the device plugin's fake backend).
func (n *Node) Document() contract.Topology {
	t := contract.Topology{Version: contract.Version, MemoryUnitMiB: n.MemoryUnitMiB}
	if n.MPS != nil {
		m := *n.MPS
		t.MPS = &m
	}
	for _, g := range n.GPUs {
		h := contract.Healthy
		if !g.Healthy {
			h = contract.Unhealthy
		}
		t.GPUs = append(t.GPUs, contract.TopologyGPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
			NUMA: g.NUMA, Island: g.Island, Peers: slices.Clone(g.Peers), Health: h, Reason: g.Reason, LeakedMiB: g.LeakedMiB,
		})
	}
	return t
}
