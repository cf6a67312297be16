package handoff

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rota-sched/rota/pkg/contract"
)

// Kind says which of the plugin's two resources a request is for.
type Kind int

const (
	// KindGPU is <domain>/gpu: whole GPUs, device ID = GPU UUID.
	KindGPU Kind = iota
	// KindMemory is <domain>/gpu-memory: units of one GPU's memory.
	KindMemory
)

// Matcher maps kubelet device requests to the pods bound to one node.
type Matcher struct {
	node    string
	names   contract.Names
	unitMiB contract.MiB

	mu      sync.Mutex
	pods    map[string]*entry // by pod UID
	seq     uint64
	changed chan struct{} // closed and replaced on every update
	lister  PodLister     // the kubelet's PodResources List; nil when unavailable
	getter  PodGetter     // reads a pod from the API server; nil when unavailable
}

// entry is one pod bound to the node.
type entry struct {
	uid, key string // key is namespace/name
	created  time.Time
	seq      uint64 // order in which this node first saw the pod bound
	pending  bool   // phase Pending and not being deleted
	live     bool   // phase neither Succeeded nor Failed: its containers may run

	assign    *contract.Assignment
	assignErr string // why the annotation is unusable, when assign is nil and it is present

	steps [2][]step     // by Kind: containers asking for the resource, in kubelet order
	done  [2]int        // steps allocated so far
	given [2][][]string // device IDs per allocated step
}

// step is one container's request for one resource.
type step struct {
	container string
	n         int
	init      bool
}

// NewMatcher returns a Matcher for the named node; unitMiB is the size of
// one gpu-memory device.
func NewMatcher(node string, names contract.Names, unitMiB contract.MiB) *Matcher {
	return &Matcher{node: node, names: names, unitMiB: unitMiB,
		pods: map[string]*entry{}, changed: make(chan struct{})}
}

// KindOf maps a resource name to its kind.
func (m *Matcher) KindOf(resourceName string) (Kind, bool) {
	switch resourceName {
	case m.names.GPU:
		return KindGPU, true
	case m.names.GPUMemory:
		return KindMemory, true
	}
	return 0, false
}

func (m *Matcher) resourceName(k Kind) string {
	if k == KindGPU {
		return m.names.GPU
	}
	return m.names.GPUMemory
}

func (m *Matcher) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Upsert records the current state of a pod. Pods bound to other nodes are
// forgotten.
func (m *Matcher) Upsert(pod *corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	uid := string(pod.UID)
	if pod.Spec.NodeName != m.node {
		if _, ok := m.pods[uid]; ok {
			delete(m.pods, uid)
			m.notifyLocked()
		}
		return
	}
	e, ok := m.pods[uid]
	if !ok {
		m.seq++
		e = &entry{uid: uid, seq: m.seq}
		m.pods[uid] = e
	}
	e.key = pod.Namespace + "/" + pod.Name
	e.created = pod.CreationTimestamp.Time
	e.pending = (pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "") && pod.DeletionTimestamp == nil
	e.live = pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
	e.assign, e.assignErr = m.assignmentOf(pod)
	for _, k := range []Kind{KindGPU, KindMemory} {
		e.steps[k] = podSteps(pod, m.resourceName(k))
	}
	m.notifyLocked()
}

// assignmentOf reads the pod's assignment annotation: the assignment, or
// why it is unusable; neither when the pod has none.
func (m *Matcher) assignmentOf(pod *corev1.Pod) (*contract.Assignment, string) {
	v, ok := pod.Annotations[m.names.AssignmentAnnotation]
	if !ok {
		return nil, ""
	}
	a, err := contract.ParseAssignment([]byte(v))
	switch {
	case err != nil:
		return nil, "unreadable assignment: " + err.Error()
	case a.Node != m.node:
		return nil, fmt.Sprintf("assignment is for node %s", a.Node)
	}
	return &a, ""
}

// Delete forgets a pod.
func (m *Matcher) Delete(uid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pods[uid]; ok {
		delete(m.pods, uid)
		m.notifyLocked()
	}
}

// Allocated reports how many containers of the pod got devices of k.
func (m *Matcher) Allocated(uid string, k Kind) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.pods[uid]; ok {
		return e.done[k]
	}
	return 0
}

// podSteps lists the containers asking for res in the order the kubelet
// allocates them: init containers first, then app containers, each in spec
// order, skipping those that ask for none.
func podSteps(pod *corev1.Pod, res string) []step {
	var out []step
	add := func(cs []corev1.Container, init bool) {
		for _, c := range cs {
			q, ok := c.Resources.Limits[corev1.ResourceName(res)]
			if !ok {
				q, ok = c.Resources.Requests[corev1.ResourceName(res)]
			}
			if !ok {
				continue
			}
			if n := quantity(q); n > 0 {
				out = append(out, step{container: c.Name, n: n, init: init})
			}
		}
	}
	add(pod.Spec.InitContainers, true)
	add(pod.Spec.Containers, false)
	return out
}

func quantity(q resource.Quantity) int {
	v, ok := q.AsInt64()
	if !ok || v < 0 || v > 1<<30 {
		return 0
	}
	return int(v)
}

// next returns the step the kubelet allocates next for k, or nil.
func (e *entry) next(k Kind) *step {
	if e.done[k] >= len(e.steps[k]) {
		return nil
	}
	return &e.steps[k][e.done[k]]
}

// kindFits reports whether the assignment is of the right sort for k.
func (e *entry) kindFits(k Kind) bool {
	return e.assign != nil && e.assign.Whole == (k == KindGPU)
}

// owns reports whether the device ID belongs to the pod's assignment.
func (e *entry) owns(k Kind, id string) bool {
	if k == KindGPU {
		return slices.ContainsFunc(e.assign.GPUs, func(g contract.AssignedGPU) bool { return g.UUID == id })
	}
	uuid, _, ok := ParseMemoryDeviceID(id)
	return ok && uuid == e.assign.GPUs[0].UUID
}

// memoryFits checks a memory share's units against its assigned MiB: the
// pod's effective request (the larger of its largest init container and the
// sum of its app containers) must not exceed the assignment.
func (e *entry) memoryFits(unitMiB contract.MiB) error {
	var initMax, apps int
	for _, s := range e.steps[KindMemory] {
		if s.init {
			initMax = max(initMax, s.n)
		} else {
			apps += s.n
		}
	}
	units := max(initMax, apps)
	if got := e.assign.GPUs[0].MemoryMiB; contract.MiB(units)*unitMiB > got {
		return fmt.Errorf("asks for %d units of %s but its assignment gives %s", units, unitMiB, got)
	}
	return nil
}

func all(ids []string, f func(string) bool) bool {
	for _, id := range ids {
		if !f(id) {
			return false
		}
	}
	return true
}
