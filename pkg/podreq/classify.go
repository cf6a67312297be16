package podreq

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

// Kind is what a pod is to the GPU ledger (see Classify).
type Kind int

// The kinds, in the order Classify tells them apart.
const (
	// KindTerminal: the pod finished (Succeeded or Failed); whatever it
	// held is free.
	KindTerminal Kind = iota + 1
	// KindUnbound: the pod is not bound. It holds only reservations (the
	// queue controller's admission hold); an assignment annotation without
	// a binding (a bind that failed half-way) holds nothing until the pod
	// is bound again.
	KindUnbound
	// KindInvalid: the bound pod's assignment annotation does not parse;
	// nothing of the pod is accounted.
	KindInvalid
	// KindUnaccounted: the bound pod asks for Rota resources but carries
	// no assignment (another scheduler bound it). Its GPUs are not
	// accounted; its CPU and host memory are, like a GPU-free pod's.
	KindUnaccounted
	// KindWrongNode: the bound pod's assignment names another node than
	// the one it is bound to; nothing of the pod is accounted.
	KindWrongNode
	// KindGPUFree: the bound pod asks for no Rota resource and carries no
	// assignment; only its CPU and host memory are accounted.
	KindGPUFree
	// KindAllocated: the bound pod's assignment is for its node; the
	// ledger holds its GPUs, CPU and host memory.
	KindAllocated
)

var kindNames = [...]string{"", "Terminal", "Unbound", "Invalid", "Unaccounted", "WrongNode", "GPUFree", "Allocated"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Problem reports whether the kind is a problem worth telling an operator:
// a bound pod whose GPUs the ledger cannot account.
func (k Kind) Problem() bool { return k == KindInvalid || k == KindUnaccounted || k == KindWrongNode }

// CPUOnly reports whether the ledger holds only the pod's CPU and host
// memory (KindGPUFree, KindUnaccounted): a record without GPUs, kept only
// on nodes the ledger knows (a GPU allocation on an unknown node waits for
// the node instead).
func (k Kind) CPUOnly() bool { return k == KindGPUFree || k == KindUnaccounted }

// Message is the problem kind's one-line description, "" for kinds that
// are no problem. The extender logs it (with the details as values) and
// kubectl-rota prints it (Classification.Problem), so both say the same.
func (k Kind) Message() string {
	switch k {
	case KindInvalid:
		return "Invalid GPU assignment annotation on a bound pod; its GPUs are not accounted"
	case KindUnaccounted:
		return "Bound pod asks for GPUs but carries no assignment; it was not bound through Rota"
	case KindWrongNode:
		return "GPU assignment names another node than the pod is bound to; its GPUs are not accounted"
	}
	return ""
}

// Classification is what Classify found.
type Classification struct {
	Kind Kind
	// Node is the node the pod is bound to ("" unless bound).
	Node string
	// Assignment is the pod's assignment (KindWrongNode, KindAllocated).
	Assignment *contract.Assignment
	// Err says why the assignment does not parse (KindInvalid).
	Err error
	// Allocation is what the ledger holds for the pod on Node: its GPUs,
	// CPU and host memory (KindAllocated), or its CPU and host memory
	// alone (KindGPUFree, KindUnaccounted: GPUFreeAllocation). nil when
	// the ledger holds nothing of the pod, also for a bound pod that takes
	// no CPU and no memory. Ends is not set: it depends on the clock.
	Allocation *ledger.Allocation
}

// Problem is the problem in words (Kind.Message with its details), "" for
// kinds that are no problem.
func (c Classification) Problem() string {
	switch c.Kind {
	case KindInvalid:
		return c.Kind.Message() + ": " + c.Err.Error()
	case KindWrongNode:
		return fmt.Sprintf("%s (assigned node %s, bound to %s)", c.Kind.Message(), c.Assignment.Node, c.Node)
	}
	return c.Kind.Message()
}

// Classify tells what the pod is to the GPU ledger, from its phase, binding,
// assignment annotation and request. It is the one reading of a pod that
// the extender's cache (feeding the ledger from the informers), kubectl-rota
// (rebuilding the ledger from a listing) and the invariant checker share, so
// they account the same pods the same way. What the caller does with a
// ledger refusal (a GPU already taken) and with an admission hold is its
// own.
func Classify(pod *corev1.Pod, names contract.Names) Classification {
	if Terminal(pod) {
		return Classification{Kind: KindTerminal}
	}
	node := pod.Spec.NodeName
	if node == "" {
		return Classification{Kind: KindUnbound}
	}
	as, err := Assignment(pod, names)
	switch {
	case err != nil:
		return Classification{Kind: KindInvalid, Node: node, Err: err}
	case as == nil:
		c := Classification{Kind: KindGPUFree, Node: node}
		if Wants(pod, names) {
			c.Kind = KindUnaccounted
		}
		if a, ok := GPUFreeAllocation(pod, node, names); ok {
			c.Allocation = &a
		}
		return c
	case as.Node != node:
		return Classification{Kind: KindWrongNode, Node: node, Assignment: as}
	}
	a := ToAllocation(pod, *as, names)
	return Classification{Kind: KindAllocated, Node: node, Assignment: as, Allocation: &a}
}

// GPUFreeAllocation is the ledger record of a pod that holds no GPU
// through Rota on node: its CPU and host memory (NodeResources), priority
// and preemptibility; false when the pod takes neither CPU nor memory.
// The extender records it for bound pods without an assignment and for
// GPU-free pods it binds.
func GPUFreeAllocation(pod *corev1.Pod, node string, names contract.Names) (ledger.Allocation, bool) {
	cpu, mem := NodeResources(pod)
	if cpu <= 0 && mem <= 0 {
		return ledger.Allocation{}, false
	}
	a := ledger.Allocation{PodUID: string(pod.UID), Pod: pod.Namespace + "/" + pod.Name, Node: node,
		CPUMilli: cpu, HostMemoryMiB: mem, Preemptible: Preemptible(pod, names)}
	if pod.Spec.Priority != nil {
		a.Priority = *pod.Spec.Priority
	}
	return a, true
}

// Allocatable is the CPU (millicores) and memory (MiB, rounded down) a node
// offers pods, from its status, as kube-scheduler's NodeResourcesFit reads
// it; 0 when the node reports none (the ledger then does not track it).
func Allocatable(node *corev1.Node) (cpuMilli int64, memoryMiB contract.MiB) {
	return node.Status.Allocatable.Cpu().MilliValue(), contract.MiB(node.Status.Allocatable.Memory().Value() >> 20)
}
