package report

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

// LedgerEntry is one pod's allocation on a node.
type LedgerEntry struct {
	Pod   string `json:"pod"`
	UID   string `json:"uid"`
	Phase string `json:"phase"`
	GPUs  []int  `json:"gpus"`
	// MemoryMiB is the memory held on each GPU (the GPU's total for whole GPUs).
	MemoryMiB contract.MiB `json:"memoryMiB"`
	Whole     bool         `json:"whole"`
	Gang      string       `json:"gang,omitempty"`
	GangSize  int          `json:"gangSize,omitempty"`
	Priority  int32        `json:"priority"`
	// Preemptible is the pod's preemptible label (pods are preemptible
	// unless labelled "false").
	Preemptible bool   `json:"preemptible"`
	State       string `json:"state"`
}

// NodeLedger is the `ledger --node` report.
type NodeLedger struct {
	Node    string        `json:"node"`
	Entries []LedgerEntry `json:"entries"`
	GPUs    []GPUUse      `json:"gpus"`
	// Violations are the pods whose assignment the ledger could not account
	// (conflicts, invalid or misdirected annotations) and ledger.Check's
	// findings about this node. Empty means invariants 1 and 2 hold here.
	Violations []string `json:"violations,omitempty"`
}

// Ledger rebuilds node's GPU allocations from the pods' assignment
// annotations (the CPU and memory records of GPU-free pods are left out).
func (c *Cluster) Ledger(node string) (NodeLedger, error) {
	ni := c.snap.Node(node)
	if ni == nil {
		return NodeLedger{}, c.nodeNotFound(node)
	}
	out := NodeLedger{Node: node, GPUs: c.gpuUse(ni)}
	for uid, a := range gpuAllocs(ni) {
		e := LedgerEntry{Pod: a.Pod, UID: uid, Whole: a.Whole, Gang: a.Gang, GangSize: a.GangSize, Priority: a.Priority,
			Preemptible: a.Preemptible, State: a.State.String()}
		if p := c.byUID[uid]; p != nil {
			e.Phase = podPhase(p)
		}
		for _, g := range a.GPUs {
			e.GPUs = append(e.GPUs, g.Index)
			e.MemoryMiB = g.MemoryMiB
		}
		out.Entries = append(out.Entries, e)
	}
	slices.SortFunc(out.Entries, func(a, b LedgerEntry) int {
		if c := cmp.Compare(a.GPUs[0], b.GPUs[0]); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	out.Violations = append(out.Violations, c.problems[node]...)
	for _, err := range c.checks {
		if s := err.Error(); strings.Contains(s, "node "+node+" ") || strings.Contains(s, "node "+node+":") {
			out.Violations = append(out.Violations, s)
		}
	}
	return out, nil
}

// gpuAllocs is the node's allocations that hold GPUs, by pod UID; the
// ledger also records the CPU and host memory of GPU-free pods
// (podreq.Kind.CPUOnly), which hold none.
func gpuAllocs(ni *ledger.NodeInfo) map[string]*ledger.Allocation {
	out := make(map[string]*ledger.Allocation, len(ni.Allocs))
	for uid, a := range ni.Allocs {
		if len(a.GPUs) > 0 {
			out[uid] = a
		}
	}
	return out
}
