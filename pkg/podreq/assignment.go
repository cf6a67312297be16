package podreq

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

// ToAssignment renders a ledger allocation as the pod annotation document.
func ToAssignment(a ledger.Allocation) contract.Assignment {
	out := contract.Assignment{Version: contract.Version, Node: a.Node, Whole: a.Whole, Gang: a.Gang}
	for _, g := range a.GPUs {
		out.GPUs = append(out.GPUs, contract.AssignedGPU{Index: g.Index, UUID: g.UUID, MemoryMiB: g.MemoryMiB})
	}
	return out
}

// ToAllocation reads a bound pod's assignment back into a committed ledger
// allocation (used when the extender rebuilds its ledger), with the CPU and
// host memory the pod takes from its node.
func ToAllocation(pod *corev1.Pod, as contract.Assignment, names contract.Names) ledger.Allocation {
	a := ledger.Allocation{
		PodUID: string(pod.UID), Pod: pod.Namespace + "/" + pod.Name, Node: as.Node, Whole: as.Whole,
		Gang: "", Preemptible: Preemptible(pod, names), State: ledger.Committed,
	}
	a.CPUMilli, a.HostMemoryMiB = NodeResources(pod)
	if pod.Spec.Priority != nil {
		a.Priority = *pod.Spec.Priority
	}
	if g, err := GangOf(pod, names); err == nil && g != nil {
		a.Gang, a.GangSize = g.Key, g.Size
	}
	for _, g := range as.GPUs {
		a.GPUs = append(a.GPUs, ledger.Share{Index: g.Index, UUID: g.UUID, MemoryMiB: g.MemoryMiB})
	}
	return a
}

// AdmissionOf reads the queue controller's admission record on the pod; nil
// when it has none.
func AdmissionOf(pod *corev1.Pod, names contract.Names) (*contract.Admission, error) {
	v, ok := pod.Annotations[names.AdmissionAnnotation]
	if !ok {
		return nil, nil
	}
	a, err := contract.ParseAdmission([]byte(v))
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// Queued reports whether the pod still waits in Rota's queue (it carries the
// queue's scheduling gate).
func Queued(pod *corev1.Pod, names contract.Names) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == names.QueueGate {
			return true
		}
	}
	return false
}
