package scheduling

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// Reason codes of bind's refusals (the metrics' reason label and the
// decision record).
const (
	codeWrongScheduler   placement.Code = "WrongScheduler"
	codeUnknownNode      placement.Code = "UnknownNode"
	codeNodeAffinity     placement.Code = "NodeAffinity"
	codeUntoleratedTaint placement.Code = "UntoleratedTaint"
	codePodNotPending    placement.Code = "PodNotPending"
)

// refusal is why bind will not bind a pod to a node.
type refusal struct {
	code placement.Code
	msg  string
}

// nodeUse is what the pods already on a node (and binds in flight) request
// of its CPU and memory.
type nodeUse struct {
	CPUMilli  int64
	MemoryMiB contract.MiB
}

// checkNode says why kube-scheduler would not place pod on node, the checks
// bind repeats so that a bind request cannot put a pod where the scheduler
// never would: its NodeAffinity filter (spec.nodeSelector and the required
// node affinity, k8s.io/component-helpers nodeaffinity), its TaintToleration
// filter (a NoSchedule or NoExecute taint the pod does not tolerate) and,
// when use is set, its NodeResourcesFit filter for CPU and memory (the pod's
// requests, podreq.NodeResources, beside use, within the node's
// allocatable; a node that reports no allocatable for a resource is not
// checked for it, as the ledger does not track it). nil: nothing excludes
// the node.
func checkNode(pod *corev1.Pod, node *corev1.Node, use *nodeUse) *refusal {
	match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	if err != nil {
		return &refusal{codeNodeAffinity, fmt.Sprintf("pod's node affinity is invalid: %v", err)}
	}
	if !match {
		return &refusal{codeNodeAffinity, fmt.Sprintf("node %s does not match the pod's %s", node.Name, room.AffinityTerms(pod))}
	}
	taint, untolerated := room.Untolerated(pod, node)
	if untolerated {
		return &refusal{codeUntoleratedTaint, fmt.Sprintf("node %s has taint %s that the pod does not tolerate", node.Name, taintString(taint))}
	}
	if use == nil {
		return nil
	}
	cpu, mem := podreq.NodeResources(pod)
	allocCPU := node.Status.Allocatable.Cpu().MilliValue()
	allocMem := contract.MiB(node.Status.Allocatable.Memory().Value() >> 20)
	if cpu > 0 && allocCPU > 0 && use.CPUMilli+cpu > allocCPU {
		return &refusal{placement.InsufficientCPU, fmt.Sprintf("node %s has %dm CPU free (allocatable %dm, requested %dm), pod requests %dm",
			node.Name, max(allocCPU-use.CPUMilli, 0), allocCPU, use.CPUMilli, cpu)}
	}
	if mem > 0 && allocMem > 0 && use.MemoryMiB+mem > allocMem {
		return &refusal{placement.InsufficientHostMemory, fmt.Sprintf("node %s has %s memory free (allocatable %s, requested %s), pod requests %s",
			node.Name, max(allocMem-use.MemoryMiB, 0), allocMem, use.MemoryMiB, mem)}
	}
	return nil
}

func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// schedulerOf is the pod's spec.schedulerName; an empty one is the API
// server's default, default-scheduler.
func schedulerOf(pod *corev1.Pod) string {
	if pod.Spec.SchedulerName == "" {
		return corev1.DefaultSchedulerName
	}
	return pod.Spec.SchedulerName
}
