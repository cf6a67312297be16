package handoff

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// ErrNoMatch is wrapped by errors for requests no pending pod matches.
var ErrNoMatch = errors.New("no pod matches")

// ErrAmbiguous is wrapped by errors for requests several pods match.
var ErrAmbiguous = errors.New("several pods match")

// maxListed bounds how many pods an error message names.
const maxListed = 6

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
	e.assign, e.assignErr = nil, ""
	if v, ok := pod.Annotations[m.names.AssignmentAnnotation]; ok {
		a, err := contract.ParseAssignment([]byte(v))
		switch {
		case err != nil:
			e.assignErr = "unreadable assignment: " + err.Error()
		case a.Node != m.node:
			e.assignErr = fmt.Sprintf("assignment is for node %s", a.Node)
		default:
			e.assign = &a
		}
	}
	for _, k := range []Kind{KindGPU, KindMemory} {
		e.steps[k] = podSteps(pod, m.resourceName(k))
	}
	m.notifyLocked()
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

// Grant is the result of a successful Allocate match.
type Grant struct {
	Pod       string // namespace/name
	PodUID    string
	Container string // container name from the pod spec
	Kind      Kind
	// UUIDs are the GPUs the container gets, in assignment order.
	UUIDs []string
	// MemoryMiB is the container's memory limit for a memory share (units
	// granted x unit size); 0 for whole GPUs.
	MemoryMiB contract.MiB
	// Twins are other pending pods with an identical memory share on the
	// same GPU; see the README for why this is not a guess.
	Twins []string
	// Admitting is set when the kubelet's PodResources list showed this pod
	// as the one being admitted; NotAdmitting names the other pending pods of
	// the same shape, which it showed not being admitted.
	Admitting    bool
	NotAdmitting []string
	// PodResourcesErr says why PodResources could not be asked (the
	// matcher's own rules decided).
	PodResourcesErr string
}

// Env is the container environment for g.
//
//   - NVIDIA_VISIBLE_DEVICES: the GPU UUIDs, comma separated.
//   - CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: for memory shares, "0=<MiB>M"; the
//     container sees exactly one GPU, so its CUDA ordinal is 0.
//   - ROTA_ASSIGNED_POD: the pod whose assignment was matched (namespace/name).
//   - ROTA_GPU_UUIDS, ROTA_GPU_MEMORY_MIB: the assignment as the container
//     sees it.
func (g Grant) Env() map[string]string {
	env := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": strings.Join(g.UUIDs, ","),
		"ROTA_ASSIGNED_POD":      g.Pod,
		"ROTA_GPU_UUIDS":         strings.Join(g.UUIDs, ","),
	}
	if g.Kind == KindMemory {
		mib := strconv.FormatInt(int64(g.MemoryMiB), 10)
		env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + mib + "M"
		env["ROTA_GPU_MEMORY_MIB"] = mib
	}
	return env
}

// candidates returns the pending pods whose next container for k asks for
// exactly n devices and whose assignment owns every device in ids, sorted by
// the order this node saw them bound (then creation time, then name).
func (m *Matcher) candidatesLocked(k Kind, n int, ids []string) []*entry {
	var out []*entry
	for _, e := range m.pods {
		if !e.pending || !e.kindFits(k) {
			continue
		}
		s := e.next(k)
		if s == nil || s.n != n {
			continue
		}
		if k == KindMemory && e.memoryFits(m.unitMiB) != nil {
			continue
		}
		if !all(ids, func(id string) bool { return e.owns(k, id) }) {
			continue
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), a.created.Compare(b.created), cmp.Compare(a.key, b.key))
	})
	return out
}

// twins reports whether every candidate would give the container the same
// thing: a memory share of the same GPU with the same unit count. Whole-GPU
// candidates are never twins: two pending pods cannot own the same GPU.
func twins(k Kind, es []*entry) bool {
	if k != KindMemory {
		return false
	}
	for _, e := range es[1:] {
		if e.assign.GPUs[0].UUID != es[0].assign.GPUs[0].UUID || e.next(k).n != es[0].next(k).n {
			return false
		}
	}
	return true
}

// Allocate matches one kubelet Allocate container request (resource kind k,
// device IDs ids) to exactly one pending pod, waiting up to wait for the pod
// informer to catch up, and records the container as allocated. With a
// PodResources lister set, the kubelet's list says which of the pending pods
// of this shape it is admitting; the devices must belong to that pod.
func (m *Matcher) Allocate(ctx context.Context, k Kind, ids []string, wait time.Duration) (Grant, error) {
	if len(ids) == 0 {
		return Grant{}, fmt.Errorf("%w: the kubelet asked for zero %s devices", ErrNoMatch, m.resourceName(k))
	}
	var g Grant
	err := m.waitLocked(ctx, wait, func(a *admission) (bool, error) {
		g = Grant{}
		shape := m.candidatesLocked(k, len(ids), nil)
		cs := slices.DeleteFunc(slices.Clone(shape), func(e *entry) bool {
			return !all(ids, func(id string) bool { return e.owns(k, id) })
		})
		if len(cs) == 0 {
			return false, m.noMatchLocked(k, len(ids), ids)
		}
		admitting := false
		if m.lister != nil {
			if !a.fetched {
				return false, errNeedAdmission
			}
			if a.usable() {
				adm := m.admittingLocked(k, a, shape)
				if len(adm) == 0 {
					return false, m.noneAdmittingLocked(k, len(ids), shape)
				}
				narrowed := slices.DeleteFunc(slices.Clone(cs), func(e *entry) bool { return !slices.Contains(adm, e) })
				if len(narrowed) == 0 {
					return true, fmt.Errorf("%w: the kubelet is admitting %s (PodResources), but the %s devices %s it chose belong to the assignment of %s; refusing to hand another pod's GPU",
						ErrNoMatch, keys(adm), m.resourceName(k), list(ids), keys(cs))
				}
				for _, e := range shape {
					if !slices.Contains(adm, e) {
						g.NotAdmitting = append(g.NotAdmitting, e.key)
					}
				}
				cs, admitting = narrowed, true
			} else {
				g.PodResourcesErr = a.err.Error()
			}
		}
		if len(cs) > 1 && !twins(k, cs) {
			by := ""
			if admitting {
				by = " (the kubelet's PodResources lists each of them as being admitted)"
			}
			return true, fmt.Errorf("%w on node %s for %s devices %s: %s%s; refusing to guess (each pod's assignment must name distinct devices)",
				ErrAmbiguous, m.node, m.resourceName(k), list(ids), keys(cs), by)
		}
		e := cs[0]
		s := e.next(k)
		g.Pod, g.PodUID, g.Container, g.Kind, g.Admitting = e.key, e.uid, s.container, k, admitting
		if k == KindGPU {
			for _, a := range e.assign.GPUs {
				if slices.Contains(ids, a.UUID) {
					g.UUIDs = append(g.UUIDs, a.UUID)
				}
			}
		} else {
			g.UUIDs = []string{e.assign.GPUs[0].UUID}
			g.MemoryMiB = contract.MiB(len(ids)) * m.unitMiB
			for _, t := range cs[1:] {
				g.Twins = append(g.Twins, t.key)
			}
		}
		e.done[k]++
		e.given[k] = append(e.given[k], slices.Clone(ids))
		return true, nil
	})
	return g, err
}

// Undo takes back a grant Allocate returned, for a kubelet request with
// several containers that fails at a later one: the kubelet discards the
// whole answer, so none of its containers is allocated. Undo grants in
// reverse order.
func (m *Matcher) Undo(g Grant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.pods[g.PodUID]
	if !ok || e.done[g.Kind] == 0 {
		return
	}
	e.done[g.Kind]--
	if n := len(e.given[g.Kind]); n > 0 {
		e.given[g.Kind] = e.given[g.Kind][:n-1]
	}
	m.notifyLocked()
}

// Preference is the answer to one GetPreferredAllocation container request.
type Preference struct {
	// IDs are the devices to prefer: the must-include IDs, then the pod's.
	IDs []string
	// Pod is the pod steered to (namespace/name).
	Pod string
	// Others are other pending pods of the same shape that could also have
	// been meant, when PodResources could not tell (for the caller to log).
	Others []string
	// Admitting is set when the kubelet's PodResources list showed Pod as
	// the pod being admitted; NotAdmitting names the other pending pods of
	// the same shape.
	Admitting    bool
	NotAdmitting []string
	// PodResourcesErr says why PodResources could not be asked.
	PodResourcesErr string
}

// Preferred answers one GetPreferredAllocation container request: the
// devices of the pending pod whose next container for k asks for size
// devices and whose assigned devices are all available (or must be
// included). With a PodResources lister set, the kubelet's list says which
// of them it is admitting (also when only one is known: the pod being
// admitted may not have reached the informer yet); without it, the first in
// bound order is chosen and the others are reported. Allocate still checks
// the final choice.
func (m *Matcher) Preferred(ctx context.Context, k Kind, available, mustInclude []string, size int, wait time.Duration) (Preference, error) {
	avail := make(map[string]bool, len(available)+len(mustInclude))
	for _, id := range available {
		avail[id] = true
	}
	for _, id := range mustInclude {
		avail[id] = true
	}
	var p Preference
	err := m.waitLocked(ctx, wait, func(a *admission) (bool, error) {
		p = Preference{}
		cs := m.candidatesLocked(k, size, mustInclude)
		if len(cs) > 0 && m.lister != nil {
			if !a.fetched {
				return false, errNeedAdmission
			}
			if a.usable() {
				adm := m.admittingLocked(k, a, cs)
				switch {
				case len(adm) == 0:
					return false, m.noneAdmittingLocked(k, size, cs)
				case len(adm) > 1 && !twins(k, adm):
					return true, fmt.Errorf("%w on node %s for %d %s devices: %s, and the kubelet's PodResources lists each of them as being admitted; refusing to guess",
						ErrAmbiguous, m.node, size, m.resourceName(k), keys(adm))
				}
				for _, e := range cs {
					if !slices.Contains(adm, e) {
						p.NotAdmitting = append(p.NotAdmitting, e.key)
					}
				}
				cs, p.Admitting = adm[:1], true
			} else {
				p.PodResourcesErr = a.err.Error()
			}
		}
		for _, e := range cs {
			got := m.pickLocked(e, k, avail, mustInclude, size)
			if len(got) < size {
				continue
			}
			if p.IDs == nil {
				p.IDs, p.Pod = got, e.key
				continue
			}
			p.Others = append(p.Others, e.key)
		}
		switch {
		case p.IDs != nil:
			return true, nil
		case p.Admitting:
			// The kubelet's available devices do not change during this
			// call, and steering to another pod's devices would hand them
			// the wrong GPU: fail now.
			e := cs[0]
			return true, fmt.Errorf("%w: the kubelet is admitting %s (PodResources), but only %d of the %d %s devices it needs from its assignment %s are available to it (held by pods the kubelet still counts?)",
				ErrNoMatch, e.key, len(m.pickLocked(e, k, avail, mustInclude, size)), size, m.resourceName(k), strings.Join(e.assign.UUIDs(), ","))
		}
		return false, m.noMatchLocked(k, size, mustInclude)
	})
	return p, err
}

// noneAdmittingLocked explains that several pending pods ask for a shape but
// the kubelet's PodResources list shows none of them being admitted (the
// pod it admits may not have reached the informer yet).
func (m *Matcher) noneAdmittingLocked(k Kind, n int, es []*entry) error {
	return fmt.Errorf("%w: pending pods %s on node %s ask for %d %s devices, but the kubelet's PodResources lists none of them as being admitted",
		ErrNoMatch, keys(es), m.node, n, m.resourceName(k))
}

// pickLocked chooses size devices of e's assignment among avail, starting
// with mustInclude: GPUs in assignment order, memory units in unit order.
func (m *Matcher) pickLocked(e *entry, k Kind, avail map[string]bool, mustInclude []string, size int) []string {
	out := slices.Clone(mustInclude)
	if k == KindGPU {
		for _, a := range e.assign.GPUs {
			if len(out) >= size {
				break
			}
			if avail[a.UUID] && !slices.Contains(out, a.UUID) {
				out = append(out, a.UUID)
			}
		}
		return out
	}
	uuid := e.assign.GPUs[0].UUID
	var units []int
	for id := range avail {
		if u, n, ok := ParseMemoryDeviceID(id); ok && u == uuid && !slices.Contains(mustInclude, id) {
			units = append(units, n)
		}
	}
	slices.Sort(units)
	for _, n := range units {
		if len(out) >= size {
			break
		}
		out = append(out, MemoryDeviceID(uuid, n))
	}
	return out
}

// waitLocked runs try under the lock until it reports done or the wait
// (bounded by ctx) runs out, re-running it after every pod update. When try
// asks for the kubelet's PodResources list (errNeedAdmission), it is fetched
// once, without the lock, and try runs again at once. It returns try's last
// error.
func (m *Matcher) waitLocked(ctx context.Context, wait time.Duration, try func(*admission) (bool, error)) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var a admission
	for {
		m.mu.Lock()
		done, err := try(&a)
		ch, lister := m.changed, m.lister
		m.mu.Unlock()
		if errors.Is(err, errNeedAdmission) && !a.fetched {
			a.fetch(ctx, lister)
			continue
		}
		if done || err == nil {
			return err
		}
		select {
		case <-ch:
		case <-timer.C:
			return err
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		}
	}
}

// noMatchLocked explains why no pod matched: which pods wait for the
// resource on this node and what each of them lacks.
func (m *Matcher) noMatchLocked(k Kind, n int, ids []string) error {
	res := m.resourceName(k)
	var why []string
	es := make([]*entry, 0, len(m.pods))
	for _, e := range m.pods {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	for _, e := range es {
		if !e.pending || len(e.steps[k]) == 0 {
			continue
		}
		var r string
		s := e.next(k)
		switch {
		case e.assign == nil && e.assignErr != "":
			r = e.assignErr
		case e.assign == nil:
			r = "has no " + m.names.AssignmentAnnotation + " annotation (was it scheduled by the Rota extender?)"
		case !e.kindFits(k) && k == KindGPU:
			r = "its assignment is a memory share, not whole GPUs"
		case !e.kindFits(k):
			r = "its assignment is whole GPUs, not a memory share"
		case s == nil:
			r = "every container already got its devices"
		case s.n != n:
			r = fmt.Sprintf("container %s asks for %d, not %d", s.container, s.n, n)
		case k == KindMemory && e.memoryFits(m.unitMiB) != nil:
			r = e.memoryFits(m.unitMiB).Error()
		default:
			r = "its assignment " + strings.Join(e.assign.UUIDs(), ",") + " does not hold these devices"
		}
		why = append(why, e.key+": "+r)
	}
	if len(why) == 0 {
		return fmt.Errorf("%w: no pending pod on node %s asks for %s (request: %d devices %s)", ErrNoMatch, m.node, res, n, list(ids))
	}
	if len(why) > maxListed {
		why = append(why[:maxListed], fmt.Sprintf("and %d more", len(why)-maxListed))
	}
	return fmt.Errorf("%w: no pending pod on node %s has an assignment for %d %s devices %s; %s",
		ErrNoMatch, m.node, n, res, list(ids), strings.Join(why, "; "))
}

// PodDevices is what the kubelet PodResources API reports for one pod.
type PodDevices struct {
	Namespace, Name string
	// Containers maps container name to resource name to device IDs.
	Containers map[string]map[string][]string
}

// Mismatch is a container that holds devices its pod's assignment does not
// name (the kubelet did not follow GetPreferredAllocation).
type Mismatch struct {
	Pod, Container, Resource string
	DeviceIDs                []string
}

// Reconcile marks the containers the kubelet reports as allocated (after a
// plugin restart the matcher would otherwise offer them again) and returns
// the containers whose devices contradict their pod's assignment.
func (m *Matcher) Reconcile(list []PodDevices) []Mismatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := make(map[string]*entry, len(m.pods))
	for _, e := range m.pods {
		byKey[e.key] = e
	}
	var out []Mismatch
	changed := false
	for _, p := range list {
		e, ok := byKey[p.Namespace+"/"+p.Name]
		if !ok {
			continue
		}
		for _, k := range []Kind{KindGPU, KindMemory} {
			res := m.resourceName(k)
			done := 0
			for i, s := range e.steps[k] {
				ids := p.Containers[s.container][res]
				if len(ids) == 0 {
					continue
				}
				done = i + 1
				if e.assign != nil && e.kindFits(k) && !all(ids, func(id string) bool { return e.owns(k, id) }) {
					out = append(out, Mismatch{Pod: e.key, Container: s.container, Resource: res, DeviceIDs: slices.Clone(ids)})
				}
			}
			if done > e.done[k] {
				e.done[k] = done
				changed = true
			}
		}
	}
	if changed {
		m.notifyLocked()
	}
	return out
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

func all(ids []string, f func(string) bool) bool {
	for _, id := range ids {
		if !f(id) {
			return false
		}
	}
	return true
}

func keys(es []*entry) string {
	ks := make([]string, 0, len(es))
	for _, e := range es {
		ks = append(ks, e.key)
	}
	if len(ks) > maxListed {
		ks = append(ks[:maxListed], fmt.Sprintf("and %d more", len(ks)-maxListed))
	}
	return strings.Join(ks, ", ")
}

func list(ids []string) string {
	if len(ids) > maxListed {
		return "[" + strings.Join(ids[:maxListed], " ") + fmt.Sprintf(" … %d in all]", len(ids))
	}
	return "[" + strings.Join(ids, " ") + "]"
}
