package state

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/topology"
)

// PodTransform trims a pod to what the extender reads: name, namespace, UID,
// resourceVersion, Rota's labels and annotations, node name, priority,
// scheduler name, the containers' Rota resources, the pod's CPU and memory
// requests (see nodeRequests), the phase and, while the
// pod is unbound, its PodScheduled condition (kube-scheduler's own reason,
// for pods it rules out before asking the extender). Everything else
// (managedFields, env, volumes, other status) is dropped before the
// informer stores the pod.
func PodTransform(names contract.Names) cache.TransformFunc {
	labels := []string{names.GangLabel, names.PodGroupLabel, names.PreemptibleLabel, names.TeamLabel, names.RemediationLabel}
	annotations := []string{names.AssignmentAnnotation, names.GangSizeAnnotation,
		names.CheckpointSignalAnnotation, names.CheckpointGraceAnnotation,
		names.AdmissionAnnotation, names.GPUModelsAnnotation, names.MaxRuntimeAnnotation}
	resources := []corev1.ResourceName{corev1.ResourceName(names.GPU), corev1.ResourceName(names.GPUMemory)}
	requests := &nodeRequests{}
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // DeletedFinalStateUnknown and friends
		}
		out := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
				CreationTimestamp: pod.CreationTimestamp, DeletionTimestamp: pod.DeletionTimestamp,
				Labels: keep(pod.Labels, labels), Annotations: keep(pod.Annotations, annotations),
			},
			Spec: corev1.PodSpec{
				NodeName: pod.Spec.NodeName, Priority: pod.Spec.Priority, SchedulerName: pod.Spec.SchedulerName,
				InitContainers: trimContainers(pod.Spec.InitContainers, resources),
				Containers:     trimContainers(pod.Spec.Containers, resources),
				Resources:      requests.of(pod),
				// The queue reads these: whether the pod is still queued,
				// and its declared runtime.
				SchedulingGates:       queueGate(pod, names.QueueGate),
				ActiveDeadlineSeconds: pod.Spec.ActiveDeadlineSeconds,
			},
			Status: corev1.PodStatus{Phase: pod.Status.Phase},
		}
		if pod.Spec.NodeName == "" {
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status,
						Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime}}
				}
			}
		}
		return out, nil
	}
}

// queueGate keeps Rota's scheduling gate (one shared value) and drops the
// others: the queue needs to know only whether the pod is still queued.
func queueGate(pod *corev1.Pod, gate string) []corev1.PodSchedulingGate {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == gate {
			return queueGates(gate)
		}
	}
	return nil
}

var (
	gatesMu sync.Mutex
	gates   = map[string][]corev1.PodSchedulingGate{}
)

func queueGates(gate string) []corev1.PodSchedulingGate {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	g, ok := gates[gate]
	if !ok {
		g = []corev1.PodSchedulingGate{{Name: gate}}
		gates[gate] = g
	}
	return g
}

// nodeResources are the native resources the extender accounts per node.
var nodeResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// maxSharedRequests bounds the distinct request pairs nodeRequests shares.
const maxSharedRequests = 4096

// nodeRequests computes a pod's effective CPU and memory requests once
// (podreq.NodeResources: containers, init steps, sidecars, pod-level
// requests, overhead) and keeps them as the trimmed pod's pod-level
// requests, from which podreq.NodeResources reads the same values back.
// Pods asking the same share one read-only value (a cluster has few
// distinct request shapes; a map per pod would cost ~0.6 KiB each); nil
// for none. Safe for concurrent use.
type nodeRequests struct {
	mu     sync.Mutex
	shared map[[2]int64]*corev1.ResourceRequirements
}

func (n *nodeRequests) of(pod *corev1.Pod) *corev1.ResourceRequirements {
	cpu, mem := podreq.NodeResources(pod)
	if cpu <= 0 && mem <= 0 {
		return nil
	}
	key := [2]int64{cpu, int64(mem)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if r, ok := n.shared[key]; ok {
		return r
	}
	req := corev1.ResourceList{}
	if cpu > 0 {
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(cpu, resource.DecimalSI)
	}
	if mem > 0 {
		req[corev1.ResourceMemory] = *resource.NewQuantity(int64(mem)<<20, resource.BinarySI)
	}
	r := &corev1.ResourceRequirements{Requests: req}
	if n.shared == nil {
		n.shared = map[[2]int64]*corev1.ResourceRequirements{}
	}
	if len(n.shared) < maxSharedRequests {
		n.shared[key] = r
	}
	return r
}

// NodeTransform trims a node to its name, UID, resourceVersion, tier labels,
// topology annotation and allocatable CPU and memory.
func NodeTransform(names contract.Names, tiers topology.Labels) cache.TransformFunc {
	annotations := []string{names.TopologyAnnotation}
	return func(obj any) (any, error) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
			Labels: keep(node.Labels, tiers.Tiers), Annotations: keep(node.Annotations, annotations),
		}, Status: corev1.NodeStatus{Allocatable: keepResources(node.Status.Allocatable, nodeResources)}}, nil
	}
}

func keep(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}

// trimContainers keeps, per container, only the Rota resources (and the
// restart policy that makes an init container a sidecar). Containers that
// ask for none are dropped; nil when no container asks.
func trimContainers(cs []corev1.Container, resources []corev1.ResourceName) []corev1.Container {
	var out []corev1.Container
	for i := range cs {
		req := keepResources(cs[i].Resources.Requests, resources)
		lim := keepResources(cs[i].Resources.Limits, resources)
		if req == nil && lim == nil {
			continue
		}
		// Extended resources need limits equal to requests; when they are,
		// the limits alone say the same (podreq reads limits first) and one
		// map per container is saved.
		if equalResources(req, lim) {
			req = nil
		}
		out = append(out, corev1.Container{
			Name: cs[i].Name, RestartPolicy: cs[i].RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
		})
	}
	return out
}

func keepResources(rl corev1.ResourceList, names []corev1.ResourceName) corev1.ResourceList {
	var out corev1.ResourceList
	for _, n := range names {
		if q, ok := rl[n]; ok {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[n] = q
		}
	}
	return out
}

func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, qa := range a {
		if qb, ok := b[k]; !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}
