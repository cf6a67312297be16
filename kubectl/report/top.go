package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// NodeUse is one node's GPU use.
type NodeUse struct {
	Node string `json:"node"`
	// Pool is the node pool the node is in (its node-pool label).
	Pool   string   `json:"pool,omitempty"`
	Leaf   string   `json:"leaf,omitempty"`
	Models []string `json:"models,omitempty"`
	GPUs   int      `json:"gpus"`
	// Healthy GPUs; Whole are owned whole by a pod; Shared hold memory
	// shares; Idle can take a whole-GPU pod.
	Healthy int `json:"healthy"`
	Whole   int `json:"whole"`
	Shared  int `json:"shared"`
	Idle    int `json:"idle"`
	// Islands is the number of NVLink islands.
	Islands   int          `json:"islands"`
	MemoryMiB contract.MiB `json:"memoryMiB"`
	UsedMiB   contract.MiB `json:"usedMiB"`
	FreeMiB   contract.MiB `json:"freeMiB"`
	// Pods counts the pods holding GPUs (GPU-free pods count only in the
	// CPU and memory the placement engine sees).
	Pods int `json:"pods"`
	// FragmentGPUs is the free GPU capacity the default workload could not
	// use (placement.DefaultWorkload().NodeFragmentation), in GPUs.
	FragmentGPUs float64 `json:"fragmentGPUs"`
	// Unhealthy lists "GPU 5: XID 79".
	Unhealthy []string `json:"unhealthy,omitempty"`
	// Problem is set for nodes whose topology annotation is invalid, and
	// for allocations the ledger could not account.
	Problems []string `json:"problems,omitempty"`
}

// GPUUse is one GPU's use.
type GPUUse struct {
	Node      string       `json:"node"`
	Index     int          `json:"index"`
	UUID      string       `json:"uuid"`
	Model     string       `json:"model"`
	Island    int          `json:"island"`
	NUMA      int          `json:"numa"`
	MemoryMiB contract.MiB `json:"memoryMiB"`
	UsedMiB   contract.MiB `json:"usedMiB"`
	FreeMiB   contract.MiB `json:"freeMiB"`
	// State is idle, whole, shared or unhealthy.
	State   string   `json:"state"`
	Healthy bool     `json:"healthy"`
	Reason  string   `json:"reason,omitempty"`
	Pods    []string `json:"pods,omitempty"`
}

// GPU states.
const (
	GPUIdle      = "idle"
	GPUWhole     = "whole"
	GPUShared    = "shared"
	GPUUnhealthy = "unhealthy"
)

// Fragmentation sums the nodes' fragmentation.
type Fragmentation struct {
	// FragmentGPUs is the sum over nodes, in GPUs.
	FragmentGPUs float64 `json:"fragmentGPUs"`
	// FreeGPUs is the free capacity of healthy GPUs, in GPUs (a half-used
	// GPU counts 0.5).
	FreeGPUs float64 `json:"freeGPUs"`
	// PercentOfFree is FragmentGPUs / FreeGPUs * 100.
	PercentOfFree float64 `json:"percentOfFree"`
}

// Nodes is the `top nodes` report.
type Nodes struct {
	Nodes         []NodeUse     `json:"nodes"`
	Fragmentation Fragmentation `json:"fragmentation"`
	// WithoutTopology counts nodes without a GPU topology annotation.
	WithoutTopology int `json:"withoutTopology"`
	// LedgerViolations are ledger.Check's findings after the rebuild.
	LedgerViolations []string `json:"ledgerViolations,omitempty"`
	// Pools sums the nodes by node pool ("" the nodes of none), when any
	// node is in one.
	Pools []PoolUse `json:"pools,omitempty"`
}

// PoolUse is one node pool's GPU use (placement.PoolUse).
type PoolUse struct {
	Pool      string       `json:"pool"`
	Nodes     int          `json:"nodes"`
	GPUs      int          `json:"gpus"`
	Busy      int          `json:"busy"`
	MemoryMiB contract.MiB `json:"memoryMiB"`
	UsedMiB   contract.MiB `json:"usedMiB"`
	// Allocation is the share of the pool's GPU memory held, 0..1.
	Allocation   float64 `json:"allocation"`
	FragmentGPUs float64 `json:"fragmentGPUs"`
}

// GPUs is the `top gpus` report.
type GPUs struct {
	GPUs          []GPUUse      `json:"gpus"`
	Fragmentation Fragmentation `json:"fragmentation"`
}

func (c *Cluster) nodeUse(ni *ledger.NodeInfo, w placement.Workload) NodeUse {
	n := ni.Node
	u := NodeUse{Node: n.Name, Pool: n.Pool, Leaf: n.Tier(0), Models: n.Models(), GPUs: len(n.GPUs), Healthy: ni.HealthyGPUs(),
		Idle: ni.IdleGPUs(), UsedMiB: ni.UsedMiB(), Pods: len(gpuAllocs(ni)), FragmentGPUs: round2(w.NodeFragmentation(ni)),
		Problems: c.problems[n.Name]}
	var islands []int
	for s, g := range n.GPUs {
		if !slices.Contains(islands, g.Island) {
			islands = append(islands, g.Island)
		}
		u.MemoryMiB += g.MemoryMiB
		u.FreeMiB += ni.FreeMiB(s)
		switch use := ni.Use[s]; {
		case use.Exclusive:
			u.Whole++
		case use.Pods > 0:
			u.Shared++
		}
		if !g.Healthy {
			u.Unhealthy = append(u.Unhealthy, fmt.Sprintf("GPU %d: %s", g.Index, healthReason(g.Reason)))
		}
	}
	u.Islands = len(islands)
	return u
}

// freeGPUs is the free fraction of the node's healthy GPUs, summed.
func freeGPUs(ni *ledger.NodeInfo) float64 {
	var f float64
	for s, g := range ni.Node.GPUs {
		if g.Healthy && g.MemoryMiB > 0 {
			f += float64(ni.FreeMiB(s)) / float64(g.MemoryMiB)
		}
	}
	return f
}

func (c *Cluster) fragmentation() Fragmentation {
	w := placement.DefaultWorkload()
	var fr Fragmentation
	for _, ni := range c.nodeInfos() {
		fr.FragmentGPUs += w.NodeFragmentation(ni)
		fr.FreeGPUs += freeGPUs(ni)
	}
	if fr.FreeGPUs > 0 {
		fr.PercentOfFree = round2(fr.FragmentGPUs / fr.FreeGPUs * 100)
	}
	fr.FragmentGPUs, fr.FreeGPUs = round2(fr.FragmentGPUs), round2(fr.FreeGPUs)
	return fr
}

func round2(f float64) float64 {
	if f < 0 {
		return -round2(-f)
	}
	return float64(int64(f*100+0.5)) / 100
}

// TopNodes reports every node with a GPU topology, by name; nodes whose
// topology annotation is invalid are listed with the problem.
func (c *Cluster) TopNodes() Nodes {
	w := placement.DefaultWorkload()
	out := Nodes{WithoutTopology: c.noTopo, Fragmentation: c.fragmentation()}
	for _, ni := range c.nodeInfos() {
		out.Nodes = append(out.Nodes, c.nodeUse(ni, w))
	}
	for name, err := range c.topoErr {
		out.Nodes = append(out.Nodes, NodeUse{Node: name, Problems: []string{"invalid topology annotation: " + err.Error()}})
	}
	slices.SortFunc(out.Nodes, func(a, b NodeUse) int { return strings.Compare(a.Node, b.Node) })
	for _, err := range c.checks {
		out.LedgerViolations = append(out.LedgerViolations, err.Error())
	}
	for _, u := range placement.PoolsUse(c.snap, w, nil) {
		out.Pools = append(out.Pools, PoolUse{Pool: u.Pool, Nodes: u.Nodes, GPUs: u.GPUs, Busy: u.Busy,
			MemoryMiB: u.MemoryMiB, UsedMiB: u.UsedMiB, Allocation: round2(u.Allocation()), FragmentGPUs: round2(u.FragmentedGPUs)})
	}
	return out
}

// TopGPUs reports every GPU, by node and index. node, when not "", limits
// the report to one node.
func (c *Cluster) TopGPUs(node string) (GPUs, error) {
	out := GPUs{Fragmentation: c.fragmentation()}
	if node != "" && c.snap.Node(node) == nil {
		return GPUs{}, c.nodeNotFound(node)
	}
	for _, ni := range c.nodeInfos() {
		if node != "" && ni.Name() != node {
			continue
		}
		out.GPUs = append(out.GPUs, c.gpuUse(ni)...)
	}
	return out, nil
}

func (c *Cluster) gpuUse(ni *ledger.NodeInfo) []GPUUse {
	pods := map[int][]string{}
	for _, a := range ni.Allocs {
		for _, g := range a.GPUs {
			pods[g.Index] = append(pods[g.Index], a.Pod)
		}
	}
	var out []GPUUse
	for s, g := range ni.Node.GPUs {
		use := ni.Use[s]
		gu := GPUUse{Node: ni.Name(), Index: g.Index, UUID: g.UUID, Model: g.Model, Island: g.Island, NUMA: g.NUMA,
			MemoryMiB: g.MemoryMiB, UsedMiB: use.UsedMiB, FreeMiB: ni.FreeMiB(s), Healthy: g.Healthy, Reason: g.Reason}
		gu.Pods = pods[g.Index]
		slices.Sort(gu.Pods)
		switch {
		case !g.Healthy:
			gu.State = GPUUnhealthy
			gu.Reason = healthReason(g.Reason)
		case use.Exclusive:
			gu.State = GPUWhole
		case use.Pods > 0:
			gu.State = GPUShared
		default:
			gu.State = GPUIdle
		}
		out = append(out, gu)
	}
	return out
}

// nodeNotFound says why a node is not in the ledger.
func (c *Cluster) nodeNotFound(node string) error {
	switch {
	case c.nodes[node] == nil:
		return &ErrNotFound{What: "node " + node}
	case c.topoErr[node] != nil:
		return fmt.Errorf("node %s has an invalid topology annotation: %w", node, c.topoErr[node])
	}
	return fmt.Errorf("node %s has no %s annotation: Rota manages no GPUs there", node, c.o.Names.TopologyAnnotation)
}
