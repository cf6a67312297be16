package state

import (
	batchv1 "k8s.io/api/batch/v1"
	"slices"
	"strconv"
	"strings"
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
// requests (see nodeRequests), the phase and, while the pod is unbound, its
// PodScheduled condition (kube-scheduler's own reason, for pods it rules out
// before asking the extender) and what bind checks the node against (see
// scheduling's checkNode): spec.nodeSelector, the required node affinity and
// the tolerations. Everything else (managedFields, env, volumes, other
// status, a bound pod's placement constraints) is dropped before the
// informer stores the pod.
func PodTransform(names contract.Names) cache.TransformFunc {
	// The Job and JobSet controllers' labels name a pod's Job and JobSet (a
	// Job or JobSet queued suspended admits its pods through them,
	// podreq.JobControllerUID, podreq.JobSetControllerUID).
	labels := []string{names.GangLabel, names.PodGroupLabel, names.PreemptibleLabel, names.TeamLabel, names.RemediationLabel,
		batchv1.ControllerUidLabel, podreq.JobSetUIDLabel}
	annotations := []string{names.AssignmentAnnotation, names.GangSizeAnnotation,
		names.CheckpointSignalAnnotation, names.CheckpointGraceAnnotation,
		names.AdmissionAnnotation, names.GPUModelsAnnotation, names.MaxRuntimeAnnotation, names.ReservationAnnotation,
		names.ShareWithoutMPSAnnotation, names.IdleSinceAnnotation,
		names.CheckpointIntervalAnnotation, names.LastCheckpointAnnotation, names.MinRuntimeAnnotation, names.MovableAnnotation, names.DeadlineAnnotation}
	resources := []corev1.ResourceName{corev1.ResourceName(names.GPU), corev1.ResourceName(names.GPUMemory)}
	requests := &nodeRequests{}
	constraints := &placementConstraints{}
	containers := &containerShapes{}
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
				InitContainers: containers.trim(pod.Spec.InitContainers, resources),
				Containers:     containers.trim(pod.Spec.Containers, resources),
				Resources:      requests.of(pod),
				// The queue reads these: whether the pod is still queued,
				// and its declared runtime.
				SchedulingGates:       queueGate(pod, names.QueueGate),
				ActiveDeadlineSeconds: pod.Spec.ActiveDeadlineSeconds,
			},
			// StartTime: a declared runtime counts from the pod's start.
			Status: corev1.PodStatus{Phase: pod.Status.Phase, StartTime: pod.Status.StartTime},
		}
		// What a stop loses counts from the current run's start: the last
		// restart of a container that restarted (podreq.RunStarted).
		if t := podreq.RunStarted(pod); pod.Status.StartTime != nil && t.After(pod.Status.StartTime.Time) {
			out.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 1,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: t}}}}}
		}
		if pod.Spec.NodeName == "" || podreq.Movable(pod, names) {
			// The queue narrows, requeues and moves only pods a controller
			// owns.
			if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
				out.OwnerReferences = []metav1.OwnerReference{*ref}
			}
		}
		if pod.Spec.NodeName == "" {
			out.Spec.NodeSelector, out.Spec.Tolerations = constraints.of(pod.Spec.NodeSelector, pod.Spec.Tolerations)
			if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				out.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
			}
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

// placementConstraints shares one read-only copy of identical node
// selectors and toleration lists across pending pods: most pods of a
// cluster carry the same few (every pod has the API server's two
// DefaultTolerationSeconds tolerations, a GPU pod the GPU nodes' taint
// toleration, a workload its pool selector), and the informer would
// otherwise keep about 0.5 KiB per pending pod. Bounded like
// nodeRequests: past maxSharedRequests distinct values, a pod keeps its own.
// Safe for concurrent use.
type placementConstraints struct {
	mu          sync.Mutex
	selectors   map[string]map[string]string
	tolerations map[string][]corev1.Toleration
	key         strings.Builder // guarded by mu
}

func (c *placementConstraints) of(sel map[string]string, tols []corev1.Toleration) (map[string]string, []corev1.Toleration) {
	if len(sel) == 0 && len(tols) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(sel) > 0 {
		keys := make([]string, 0, len(sel))
		for k := range sel {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		c.key.Reset()
		for _, k := range keys {
			c.key.WriteString(k)
			c.key.WriteByte(0)
			c.key.WriteString(sel[k])
			c.key.WriteByte(0)
		}
		sel = share(&c.selectors, c.key.String(), sel)
	}
	if len(tols) > 0 {
		c.key.Reset()
		for _, t := range tols {
			c.key.WriteString(t.Key)
			c.key.WriteByte(0)
			c.key.WriteString(string(t.Operator))
			c.key.WriteByte(0)
			c.key.WriteString(t.Value)
			c.key.WriteByte(0)
			c.key.WriteString(string(t.Effect))
			c.key.WriteByte(0)
			if t.TolerationSeconds != nil {
				c.key.WriteString(strconv.FormatInt(*t.TolerationSeconds, 10))
			}
			c.key.WriteByte(1)
		}
		tols = share(&c.tolerations, c.key.String(), tols)
	}
	return sel, tols
}

// share returns the value kept under key, keeping v there first when there
// is room.
func share[V any](m *map[string]V, key string, v V) V {
	if old, ok := (*m)[key]; ok {
		return old
	}
	if *m == nil {
		*m = map[string]V{}
	}
	if len(*m) < maxSharedRequests {
		(*m)[key] = v
	}
	return v
}

// NodeTransform trims a node to its name, UID, resourceVersion, labels
// (the tiers', and every other one, since a pod's node selector may name
// any), topology annotation, NoSchedule and NoExecute taints (what bind
// checks a pod's tolerations against) and allocatable CPU and memory.
// Label keys and values are interned (see interner): most repeat on every
// node.
func NodeTransform(names contract.Names, tiers topology.Labels) cache.TransformFunc {
	annotations := []string{names.TopologyAnnotation}
	strs := &interner{}
	return func(obj any) (any, error) {
		node, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		var labels map[string]string
		if len(node.Labels) > 0 {
			labels = make(map[string]string, len(node.Labels))
			strs.mu.Lock()
			for k, v := range node.Labels {
				labels[strs.of(k)] = strs.of(v)
			}
			strs.mu.Unlock()
		}
		var taints []corev1.Taint
		for _, t := range node.Spec.Taints {
			if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
				taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
			}
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
			Labels: labels, Annotations: keep(node.Annotations, annotations),
		}, Spec: corev1.NodeSpec{Taints: taints},
			Status: corev1.NodeStatus{Allocatable: keepResources(node.Status.Allocatable, nodeResources)}}, nil
	}
}

// maxInterned bounds the distinct strings an interner shares.
const maxInterned = 1 << 16

// interner shares one copy of each label key and value across nodes: the
// API's decoder allocates every string of every node anew, and a node's
// 20 to 100 labels (kubernetes.io/*, topology, cloud, NVIDIA GPU feature
// discovery) mostly repeat across the fleet. Bounded: past maxInterned
// distinct strings (churning unique values), new ones are kept as they
// are. Callers hold mu.
type interner struct {
	mu   sync.Mutex
	strs map[string]string
}

func (in *interner) of(s string) string {
	if v, ok := in.strs[s]; ok {
		return v
	}
	if in.strs == nil {
		in.strs = map[string]string{}
	}
	if len(in.strs) < maxInterned {
		in.strs[s] = s
	}
	return s
}

func keep(m map[string]string, keys []string) map[string]string {
	n := 0
	for _, k := range keys {
		if _, ok := m[k]; ok {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	// Sized to what is kept: a map sized for every key would hold twice
	// the slots a pod's one or two Rota annotations need.
	out := make(map[string]string, n)
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// containerShapes trims containers to the Rota resources they ask for and
// shares one read-only copy of identical trimmed lists across pods: a
// workload's pods all carry the same container names and requests, and a
// trimmed list of its own (a container and one or two resource maps) costs
// about 1 KiB per pod. Bounded like nodeRequests: past maxSharedRequests
// distinct lists, a pod keeps its own. Safe for concurrent use.
type containerShapes struct {
	mu     sync.Mutex
	shared map[string][]corev1.Container
	key    strings.Builder // guarded by mu
}

// trim keeps, per container, only the Rota resources (and the restart
// policy that makes an init container a sidecar). Containers that ask for
// none are dropped; nil when no container asks.
func (s *containerShapes) trim(cs []corev1.Container, resources []corev1.ResourceName) []corev1.Container {
	out := trimContainers(cs, resources)
	if len(out) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key.Reset()
	for _, c := range out {
		s.key.WriteString(c.Name)
		s.key.WriteByte(0)
		if c.RestartPolicy != nil {
			s.key.WriteString(string(*c.RestartPolicy))
		}
		s.key.WriteByte(0)
		for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			for _, n := range resources {
				if q, ok := rl[n]; ok {
					s.key.WriteString(string(n))
					s.key.WriteByte('=')
					s.key.WriteString(q.String())
				}
				s.key.WriteByte(0)
			}
			s.key.WriteByte(1)
		}
		s.key.WriteByte(2)
	}
	return share(&s.shared, s.key.String(), out)
}

// trimContainers is containerShapes.trim without the sharing.
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
