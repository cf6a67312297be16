package podreq

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/reserve"
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
		Idle: pod.Annotations[names.IdleSinceAnnotation] != "", // the device plugin's idle mark
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
	return admissionIn(pod.Annotations, names)
}

// admissionIn reads the admission record among an object's annotations.
func admissionIn(annotations map[string]string, names contract.Names) (*contract.Admission, error) {
	v, ok := annotations[names.AdmissionAnnotation]
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

// Ends is when the pod is expected to end, for reservations: its start
// (now for a pod that has not started) plus its declared maximum runtime
// (MaxRuntime), else plus def as an estimate; zero when neither applies.
// A Job's own activeDeadlineSeconds is not read: it counts from the Job's
// start, queue time included, so it says nothing about how long a pod runs.
func Ends(pod *corev1.Pod, names contract.Names, now time.Time, def time.Duration) (ends time.Time, estimated bool) {
	var started time.Time
	if pod.Status.StartTime != nil {
		started = pod.Status.StartTime.Time
	}
	d, ok, err := MaxRuntime(pod, names)
	if err != nil || !ok {
		d = 0
	}
	return reserve.Ends(started, now, d, def)
}

// DeclaredEnd is Ends without an estimate: the end a pod declares, which
// alone lets it backfill into a reservation's held room.
func DeclaredEnd(pod *corev1.Pod, names contract.Names, now time.Time) time.Time {
	ends, _ := Ends(pod, names, now, 0)
	return ends
}
