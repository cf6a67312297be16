// Package placement is Rota's one placement engine: does a pod fit a node,
// which GPUs it gets there, how good each node is under a policy, where a
// gang goes as a whole, and which pods to preempt. The extender, the
// simulator, the demo and the benchmarks all call it; it reads ledger
// snapshots and never changes them.
package placement

import (
	"fmt"
	"slices"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

// MiB re-exports the contract's memory type.
type MiB = contract.MiB

// Request is what one pod asks for. Exactly one of GPUs and MemoryUnits is
// positive.
type Request struct {
	UID string
	Pod string // namespace/name
	// GPUs is the number of whole GPUs.
	GPUs int
	// MemoryUnits is a memory share on one GPU, in the node's memory unit.
	MemoryUnits int64
	// Models restricts the GPU models (nil: any).
	Models []string
	// Pool is the node pool the pod's team places on (topology.Node.Pool):
	// a GPU request fits only nodes of its pool, "" the nodes of none.
	Pool string
	// Priority and Preemptible describe the pod for preemption.
	Priority    int32
	Preemptible bool
	// CPUMilli and HostMemoryMiB must fit on nodes that track them.
	CPUMilli      int64
	HostMemoryMiB MiB
	// Job is the key of the job the pod belongs to (its gang, else
	// "namespace/pod"), and Ends its declared end (its start, or now for a
	// pod not started, plus its declared maximum runtime; zero: none). A
	// reservation's held GPUs are open to the job it holds for and to pods
	// that end by its expected start (ledger.Claim).
	Job  string
	Ends time.Time
	// ShareWithoutMPS lets a memory share go to a node whose device plugin
	// cannot run CUDA MPS (its limit then is not enforced).
	ShareWithoutMPS bool
}

// GPUFree reports whether the request asks for no GPU at all.
func (r Request) GPUFree() bool { return r.GPUs == 0 && r.MemoryUnits == 0 }

// Whole reports whether the request is for whole GPUs.
func (r Request) Whole() bool { return r.GPUs > 0 }

// NeedMiB is the memory a share needs on a node with the given unit.
func (r Request) NeedMiB(unit MiB) MiB { return MiB(r.MemoryUnits) * unit }

// Describe says what the pod asks for, for messages.
func (r Request) Describe(unit MiB) string {
	if r.Whole() {
		if r.GPUs == 1 {
			return "1 whole GPU"
		}
		return fmt.Sprintf("%d whole GPUs", r.GPUs)
	}
	return fmt.Sprintf("%s on one GPU", r.NeedMiB(unit))
}

// SameShape reports whether two requests ask for the same thing.
func (r Request) SameShape(o Request) bool {
	return r.GPUs == o.GPUs && r.MemoryUnits == o.MemoryUnits && slices.Equal(r.Models, o.Models) &&
		r.Pool == o.Pool && r.CPUMilli == o.CPUMilli && r.HostMemoryMiB == o.HostMemoryMiB
}

func (r Request) modelOK(m string) bool { return len(r.Models) == 0 || slices.Contains(r.Models, m) }

// Choice is where a request goes on one node.
type Choice struct {
	Node string
	// Slots are positions in the node's GPU list.
	Slots []int
	// MemoryMiB is the memory taken on each chosen GPU.
	MemoryMiB MiB
	Whole     bool
}

// Allocation turns a choice into the ledger record for the request.
func (c Choice) Allocation(r Request, ni *ledger.NodeInfo) ledger.Allocation {
	a := ledger.Allocation{PodUID: r.UID, Pod: r.Pod, Node: c.Node, Whole: c.Whole,
		Priority: r.Priority, Preemptible: r.Preemptible, CPUMilli: r.CPUMilli, HostMemoryMiB: r.HostMemoryMiB, Ends: r.Ends}
	for _, s := range c.Slots {
		g := ni.Node.GPUs[s]
		mem := c.MemoryMiB
		if c.Whole {
			mem = g.MemoryMiB
		}
		a.GPUs = append(a.GPUs, ledger.Share{Index: g.Index, UUID: g.UUID, MemoryMiB: mem})
	}
	return a
}

// Indexes returns the GPU indexes of the choice.
func (c Choice) Indexes(ni *ledger.NodeInfo) []int {
	out := make([]int, len(c.Slots))
	for i, s := range c.Slots {
		out[i] = ni.Node.GPUs[s].Index
	}
	return out
}

// ClaimOn is the claim that holds room for r alone on node (ledger.Claim):
// its GPUs (a share holds a whole GPU), CPU and host memory, for r's job.
func (r Request) ClaimOn(node string) ledger.Claim {
	return ledger.Claim{Job: r.Job, Node: node, GPUs: max(r.GPUs, 1), Models: r.Models,
		CPUMilli: r.CPUMilli, HostMemoryMiB: r.HostMemoryMiB}
}
