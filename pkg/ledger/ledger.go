// Package ledger keeps Rota's per-GPU memory ledger: which pod holds which
// GPU, whole or as a memory share, reserved (with an expiry) or committed.
// It is the single source of truth the extender's placement reads from and
// the only place that changes GPU use. It is pure: time comes from callers.
package ledger

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"

	"github.com/rota-sched/rota/pkg/stopcost"
)

// MiB re-exports the contract's memory type.
type MiB = contract.MiB

// State of an allocation.
type State int

const (
	// Reserved allocations hold GPUs until they are committed or expire.
	Reserved State = iota + 1
	// Committed allocations belong to a pod whose assignment annotation is
	// written; they are released only when the pod goes away.
	Committed
)

func (s State) String() string {
	switch s {
	case Reserved:
		return "reserved"
	case Committed:
		return "committed"
	}
	return "unknown"
}

// Share is the part of one GPU an allocation holds.
type Share struct {
	Index     int
	UUID      string
	MemoryMiB MiB
}

// Allocation is what one pod holds on one node. Values stored in the ledger
// are never modified; the ledger replaces them.
type Allocation struct {
	PodUID string
	Pod    string // namespace/name, for messages
	Node   string
	Whole  bool
	GPUs   []Share
	// Gang is the gang key ("namespace/name") and GangSize its member count.
	Gang     string
	GangSize int
	// Priority and Preemptible feed preemption decisions.
	Priority    int32
	Preemptible bool
	// Idle is set when the device plugin marked the pod idle (its GPUs'
	// utilization stayed low for a while); preemption takes idle pods first
	// among equal priority.
	Idle bool
	// CPUMilli and HostMemoryMiB count only on nodes that track them.
	CPUMilli      int64
	HostMemoryMiB MiB
	State         State
	// Expires is when a Reserved allocation lapses.
	Expires time.Time
	// Ends is when the pod is expected to end: its start plus its declared
	// maximum runtime, or an estimate (EndsEstimated); zero when nothing is
	// known, which reservations read as "never". Claims read it (see Claim).
	Ends          time.Time
	EndsEstimated bool
	// Stop is what the pod says about stopping it (its run's start, its
	// checkpoints, its own minimum runtime; GPUs left 0): preemption weighs
	// the work a stop loses by it (pkg/stopcost).
	Stop stopcost.Facts
}

// Errors returned by ledger operations; match them with errors.Is.
var (
	ErrNoCapacity   = errors.New("not enough GPU capacity")
	ErrUnhealthy    = errors.New("GPU unhealthy")
	ErrUnknownNode  = errors.New("unknown node")
	ErrUnknownGPU   = errors.New("unknown GPU")
	ErrConflict     = errors.New("pod already holds a different allocation")
	ErrNotReserved  = errors.New("pod holds no reservation")
	ErrInvalidAlloc = errors.New("invalid allocation")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}

// Ledger is safe for concurrent use. Readers take a Snapshot and work on it
// without holding the ledger's lock.
type Ledger struct {
	mu     sync.RWMutex
	nodes  map[string]*NodeInfo
	allocs map[string]*Allocation
	// orphans are committed allocations on nodes the ledger does not know
	// (yet), or that the node's current topology cannot hold: they are
	// applied when the node appears with room for them.
	orphans map[string]*Allocation
	// gangs indexes the pods of allocs and orphans by gang key.
	gangs map[string]map[string]struct{}
	snap  *Snapshot
	gen   uint64
	// claims are the reservations' holds, by node (see Claim).
	claims map[string]*Claim
	// index is the sorted node names and their positions, shared by
	// snapshots until the set of nodes changes (nil: rebuild it).
	index *nodeIndex
	// last is the latest snapshot built, and dirty the nodes whose info
	// changed since: the next snapshot copies last's infos and replaces
	// only those, instead of copying a map and sorting every name.
	last  *Snapshot
	dirty []string
}

// nodeIndex maps node names to positions in a sorted list; immutable.
type nodeIndex struct {
	names []string
	pos   map[string]int
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{nodes: map[string]*NodeInfo{}, allocs: map[string]*Allocation{}, orphans: map[string]*Allocation{},
		gangs: map[string]map[string]struct{}{}, claims: map[string]*Claim{}}
}

// Snapshot is a consistent, immutable view of the ledger.
type Snapshot struct {
	Generation uint64
	index      *nodeIndex
	infos      []*NodeInfo // infos[i] is the node index.names[i]
}

// Node returns the node's info or nil.
func (s *Snapshot) Node(name string) *NodeInfo {
	if i, ok := s.index.pos[name]; ok {
		return s.infos[i]
	}
	return nil
}

// Names returns all node names, sorted.
func (s *Snapshot) Names() []string { return s.index.names }

// Len is the number of nodes.
func (s *Snapshot) Len() int { return len(s.infos) }

// Snapshot returns the current view. It is cached between changes, so it is
// cheap to call on every request.
func (l *Ledger) Snapshot() *Snapshot {
	l.mu.RLock()
	s := l.snap
	l.mu.RUnlock()
	if s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.snap == nil {
		l.snap = l.buildSnapshot()
		l.last, l.dirty = l.snap, l.dirty[:0]
	}
	return l.snap
}

// buildSnapshot makes a snapshot of the current nodes: from the last one
// when the set of nodes is the same (a copy of its pointers, with the dirty
// nodes replaced), else from scratch. The caller holds l.mu.
func (l *Ledger) buildSnapshot() *Snapshot {
	if l.index != nil && l.last != nil && l.last.index == l.index {
		infos := slices.Clone(l.last.infos)
		for _, name := range l.dirty {
			infos[l.index.pos[name]] = l.nodes[name]
		}
		return &Snapshot{Generation: l.gen, index: l.index, infos: infos}
	}
	if l.index == nil {
		names := make([]string, 0, len(l.nodes))
		for k := range l.nodes {
			names = append(names, k)
		}
		sort.Strings(names)
		pos := make(map[string]int, len(names))
		for i, n := range names {
			pos[n] = i
		}
		l.index = &nodeIndex{names: names, pos: pos}
	}
	infos := make([]*NodeInfo, len(l.index.names))
	for i, n := range l.index.names {
		infos[i] = l.nodes[n]
	}
	return &Snapshot{Generation: l.gen, index: l.index, infos: infos}
}

// setNode stores a node's new info, a fresh value nobody else holds, with
// the node's claim applied (the caller holds l.mu and calls changed
// afterwards).
func (l *Ledger) setNode(name string, ni *NodeInfo) {
	ni.hold(l.claims[name])
	if _, ok := l.nodes[name]; !ok {
		l.index = nil // a new node: the names change
	}
	l.nodes[name] = ni
	if l.last == nil || l.index == nil || len(l.dirty) >= len(l.nodes) {
		// Nothing to patch from, or patching would not save a rebuild.
		l.last, l.dirty = nil, l.dirty[:0]
		return
	}
	l.dirty = append(l.dirty, name)
}

func (l *Ledger) changed() { l.gen++; l.snap = nil }

// UpsertNode adds a node or replaces its topology. Existing allocations on
// the node are kept and re-applied (a GPU that turned unhealthy keeps its
// pods; it only stops receiving new ones). Committed allocations waiting for
// the node (orphans) are applied now.
//
// An allocation the new topology cannot hold (its GPU is gone, or the GPU
// shrank below what is assigned) is not applied: a committed one becomes an
// orphan again until a later topology holds it or its pod is released; a
// reservation is dropped, together with the rest of its gang's reservations.
// Committed allocations are applied before reservations, each in pod UID order.
func (l *Ledger) UpsertNode(n *topology.Node) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var on []*Allocation
	if old, ok := l.nodes[n.Name]; ok {
		for _, a := range old.Allocs {
			on = append(on, a)
		}
	}
	for _, a := range l.orphans {
		if a.Node == n.Name {
			on = append(on, a)
		}
	}
	slices.SortFunc(on, func(a, b *Allocation) int {
		if a.State != b.State {
			return cmp.Compare(b.State, a.State) // Committed (2) before Reserved (1)
		}
		return cmp.Compare(a.PodUID, b.PodUID)
	})
	ni := newNodeInfo(n)
	var dropped []string
	for _, a := range on {
		if err := ni.holds(a); err != nil {
			if a.State == Committed {
				delete(l.allocs, a.PodUID)
				l.orphans[a.PodUID] = a
			} else {
				delete(l.allocs, a.PodUID)
				l.untrack(a)
				dropped = append(dropped, a.Gang)
			}
			continue
		}
		ni.apply(a, 1)
		delete(l.orphans, a.PodUID)
		l.allocs[a.PodUID] = a
	}
	l.setNode(n.Name, ni)
	for _, g := range dropped {
		l.settleGang(g)
	}
	l.changed()
}

// RemoveNode forgets a node. Its committed allocations become orphans until
// their pods are released (a deleted node's pods are deleted by the API
// server's GC); its reservations are dropped, together with the rest of their
// gangs' reservations. It returns the allocations that were on the node.
func (l *Ledger) RemoveNode(name string) []Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Allocation
	var dropped []string
	if ni, ok := l.nodes[name]; ok {
		for uid, a := range ni.Allocs {
			out = append(out, *a)
			delete(l.allocs, uid)
			if a.State == Committed {
				l.orphans[uid] = a
			} else {
				l.untrack(a)
				dropped = append(dropped, a.Gang)
			}
		}
	}
	if _, ok := l.nodes[name]; ok {
		delete(l.nodes, name)
		l.index = nil
	}
	for _, g := range dropped {
		l.settleGang(g)
	}
	l.changed()
	sortAllocs(out)
	return out
}

func validate(a *Allocation) error {
	if a.PodUID == "" || a.Node == "" {
		return errorf(ErrInvalidAlloc, "allocation needs a pod UID and a node")
	}
	if len(a.GPUs) == 0 && a.CPUMilli <= 0 && a.HostMemoryMiB <= 0 {
		return errorf(ErrInvalidAlloc, "allocation of %s holds nothing", nameOr(a))
	}
	if a.CPUMilli < 0 || a.HostMemoryMiB < 0 {
		return errorf(ErrInvalidAlloc, "allocation of %s has negative CPU or host memory", nameOr(a))
	}
	if !a.Whole && len(a.GPUs) > 1 {
		return errorf(ErrInvalidAlloc, "a memory share names exactly one GPU, got %d", len(a.GPUs))
	}
	if a.GangSize < 0 {
		return errorf(ErrInvalidAlloc, "allocation of %s has a negative gang size", nameOr(a))
	}
	for i, g := range a.GPUs {
		if g.MemoryMiB <= 0 {
			return errorf(ErrInvalidAlloc, "GPU %d: memory %d MiB is not positive", g.Index, g.MemoryMiB)
		}
		for _, h := range a.GPUs[:i] {
			if h.Index == g.Index {
				return errorf(ErrInvalidAlloc, "allocation of %s names GPU %d twice", nameOr(a), g.Index)
			}
		}
	}
	return nil
}

func sameGPUs(a, b *Allocation) bool {
	return a.Node == b.Node && a.Whole == b.Whole && slices.Equal(a.GPUs, b.GPUs)
}

// Reserve records a's GPUs for the pod until expires, after checking that
// they are healthy and free. Reserving the same GPUs again for the same pod
// only extends the expiry (retries are idempotent); a different allocation
// for a pod that already holds one fails with ErrConflict.
func (l *Ledger) Reserve(a Allocation, expires time.Time) error {
	return l.ReserveAll([]Allocation{a}, expires)
}

// ReserveAll reserves every allocation or none (gang slots). A gang member
// (Gang set, GangSize > 0) may only be reserved when, afterwards, every
// member of its gang holds GPUs: a gang is never partly reserved.
func (l *Ledger) ReserveAll(as []Allocation, expires time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	staged := map[string]*NodeInfo{}
	var fresh []*Allocation
	var renew []string
	seen := map[string]bool{}
	for i := range as {
		a := as[i]
		a.State, a.Expires = Reserved, expires
		if err := validate(&a); err != nil {
			return err
		}
		if seen[a.PodUID] {
			return errorf(ErrInvalidAlloc, "pod %s appears twice in one reservation", a.PodUID)
		}
		seen[a.PodUID] = true
		old, ok := l.allocs[a.PodUID]
		if !ok {
			old, ok = l.orphans[a.PodUID]
		}
		if ok {
			if !sameGPUs(old, &a) {
				return errorf(ErrConflict, "pod %s already holds GPUs on node %s", nameOr(old), old.Node)
			}
			renew = append(renew, a.PodUID)
			continue
		}
		ni := staged[a.Node]
		if ni == nil {
			cur, ok := l.nodes[a.Node]
			if !ok {
				return errorf(ErrUnknownNode, "node %s is not known to the ledger", a.Node)
			}
			ni = cur.clone()
			ni.hold(l.claims[a.Node])
			staged[a.Node] = ni
		}
		if err := ni.For(a.job(), a.declaredEnd()).fits(&a); err != nil {
			return fmt.Errorf("reserve %s: %w", nameOr(&a), err)
		}
		ni.apply(&a, 1)
		ni.hold(l.claims[a.Node])
		fresh = append(fresh, &a)
	}
	if err := l.gangsComplete(fresh); err != nil {
		return err
	}
	for name, ni := range staged {
		l.setNode(name, ni)
	}
	for _, a := range fresh {
		l.allocs[a.PodUID] = a
		l.track(a)
	}
	// Renew after the staged nodes are in place, so that the node views
	// point at the renewed values.
	for _, uid := range renew {
		if old, ok := l.allocs[uid]; ok && old.State == Reserved {
			c := *old
			c.Expires = expires
			l.replace(&c)
		}
	}
	if len(fresh)+len(renew) > 0 {
		l.changed()
	}
	return nil
}

// gangsComplete checks that every gang of the fresh allocations would hold
// all its members once they are added.
func (l *Ledger) gangsComplete(fresh []*Allocation) error {
	type count struct{ size, held int }
	var gangs map[string]*count
	for _, a := range fresh {
		if a.Gang == "" {
			continue
		}
		if gangs == nil {
			gangs = map[string]*count{}
		}
		c := gangs[a.Gang]
		if c == nil {
			c = &count{size: l.gangSize(a.Gang), held: len(l.gangs[a.Gang])}
			gangs[a.Gang] = c
		}
		c.size = max(c.size, a.GangSize)
		c.held++
	}
	for name, c := range gangs {
		if c.held < c.size {
			return errorf(ErrInvalidAlloc, "gang %s: reservation leaves it partly placed, %d of %d members would hold GPUs",
				name, c.held, c.size)
		}
	}
	return nil
}

// replace swaps an allocation value without changing GPU use.
func (l *Ledger) replace(a *Allocation) {
	l.allocs[a.PodUID] = a
	if ni, ok := l.nodes[a.Node]; ok {
		c := ni.clone()
		c.Allocs[a.PodUID] = a
		l.setNode(a.Node, c)
	}
}

func nameOr(a *Allocation) string {
	if a.Pod != "" {
		return a.Pod
	}
	return a.PodUID
}

// Commit turns the pod's reservation into a committed allocation. Committing
// an already committed pod (orphans included) is a no-op.
func (l *Ledger) Commit(podUID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.orphans[podUID]; ok {
		return nil
	}
	a, ok := l.allocs[podUID]
	if !ok {
		return errorf(ErrNotReserved, "pod %s", podUID)
	}
	if a.State == Committed {
		return nil
	}
	c := *a
	c.State, c.Expires = Committed, time.Time{}
	l.replace(&c)
	l.changed()
	return nil
}

// Restore records a committed allocation read back from a pod's assignment
// annotation (start-up rebuild, or a pod bound by another replica). It does
// not refuse unhealthy GPUs (the pod is already there). It returns an error,
// and records nothing, when the allocation would break invariant 1; what the
// ledger held for the pod before is dropped in either case when it differs
// (the annotation is the truth).
func (l *Ledger) Restore(a Allocation) error {
	a.State, a.Expires = Committed, time.Time{}
	if err := validate(&a); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old, ok := l.allocs[a.PodUID]
	if !ok {
		old, ok = l.orphans[a.PodUID]
	}
	if ok && sameGPUs(old, &a) {
		if old.State != Committed || !old.Ends.Equal(a.Ends) || old.EndsEstimated != a.EndsEstimated || old.Idle != a.Idle || old.Stop != a.Stop {
			c := *old
			c.State, c.Expires = Committed, time.Time{}
			c.Ends, c.EndsEstimated = a.Ends, a.EndsEstimated
			c.Idle = a.Idle
			c.Stop = a.Stop
			l.replace(&c)
			l.changed()
		}
		return nil
	}
	oldGang := ""
	if ok {
		// The annotation is the truth: drop what we held for the pod.
		l.removeLocked(a.PodUID)
		oldGang = old.Gang
		l.changed()
	}
	err := l.restoreLocked(&a)
	if oldGang != "" {
		l.settleGang(oldGang)
	}
	if err == nil && a.Gang != "" && a.Gang != oldGang {
		// A larger declared gang size may leave reservations partial.
		l.settleGang(a.Gang)
	}
	return err
}

func (l *Ledger) restoreLocked(a *Allocation) error {
	ni, ok := l.nodes[a.Node]
	if !ok {
		l.orphans[a.PodUID] = a
		l.track(a)
		l.changed()
		return nil
	}
	// Health is not checked: check capacity on a healthy view.
	if err := ni.holds(a); err != nil {
		return fmt.Errorf("restore %s: %w", nameOr(a), err)
	}
	c := ni.clone()
	c.apply(a, 1)
	l.setNode(a.Node, c)
	l.allocs[a.PodUID] = a
	l.track(a)
	l.changed()
	return nil
}

// Release frees whatever the pod holds. It reports what was released. When
// the pod belongs to a gang whose other members still hold reservations,
// those reservations are released too: a gang is never partly reserved.
func (l *Ledger) Release(podUID string) (Allocation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.releaseLocked(podUID)
	if len(out) == 0 {
		return Allocation{}, false
	}
	return out[0], true
}

// releaseLocked releases the pod and, if that leaves its gang partly
// reserved, the gang's other reservations. The pod comes first in the result.
func (l *Ledger) releaseLocked(podUID string) []Allocation {
	a, ok := l.removeLocked(podUID)
	if !ok {
		return nil
	}
	out := []Allocation{*a}
	if a.Gang != "" {
		out = append(out, l.settleGang(a.Gang)...)
	}
	return out
}

// removeLocked forgets the pod's allocation (or orphan) and frees its GPUs.
func (l *Ledger) removeLocked(podUID string) (*Allocation, bool) {
	if a, ok := l.orphans[podUID]; ok {
		delete(l.orphans, podUID)
		l.untrack(a)
		l.changed()
		return a, true
	}
	a, ok := l.allocs[podUID]
	if !ok {
		return nil, false
	}
	delete(l.allocs, podUID)
	l.untrack(a)
	if ni, ok := l.nodes[a.Node]; ok {
		c := ni.clone()
		c.apply(a, -1)
		l.setNode(a.Node, c)
	}
	l.changed()
	return a, true
}

// track and untrack keep the gang index in step with allocs and orphans.
func (l *Ledger) track(a *Allocation) {
	if a.Gang == "" {
		return
	}
	m := l.gangs[a.Gang]
	if m == nil {
		m = map[string]struct{}{}
		l.gangs[a.Gang] = m
	}
	m[a.PodUID] = struct{}{}
}

func (l *Ledger) untrack(a *Allocation) {
	if m := l.gangs[a.Gang]; m != nil {
		delete(m, a.PodUID)
		if len(m) == 0 {
			delete(l.gangs, a.Gang)
		}
	}
}

func (l *Ledger) member(uid string) *Allocation {
	if a, ok := l.allocs[uid]; ok {
		return a
	}
	return l.orphans[uid]
}

// gangSize is the largest size any held member of the gang declares.
func (l *Ledger) gangSize(gang string) int {
	size := 0
	for uid := range l.gangs[gang] {
		if a := l.member(uid); a != nil {
			size = max(size, a.GangSize)
		}
	}
	return size
}

// settleGang restores invariant 2 for one gang: when fewer members than the
// gang size hold GPUs, the members that are only reserved are released
// (committed members are bound pods and stay). It returns what it released,
// sorted by pod UID.
func (l *Ledger) settleGang(gang string) []Allocation {
	members := l.gangs[gang]
	if gang == "" || len(members) >= l.gangSize(gang) {
		return nil
	}
	var uids []string
	for uid := range members {
		if a := l.member(uid); a != nil && a.State == Reserved {
			uids = append(uids, uid)
		}
	}
	slices.Sort(uids)
	var out []Allocation
	for _, uid := range uids {
		if a, ok := l.removeLocked(uid); ok {
			out = append(out, *a)
		}
	}
	return out
}

// Expire releases every reservation whose expiry is not after now (and the
// other reservations of the gangs they belong to) and returns them, sorted
// by pod UID.
func (l *Ledger) Expire(now time.Time) []Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var expired []string
	for uid, a := range l.allocs {
		if a.State == Reserved && !a.Expires.After(now) {
			expired = append(expired, uid)
		}
	}
	slices.Sort(expired)
	var out []Allocation
	for _, uid := range expired {
		out = append(out, l.releaseLocked(uid)...)
	}
	sortAllocs(out)
	return out
}

// HasNode reports whether the ledger knows the node.
func (l *Ledger) HasNode(name string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, ok := l.nodes[name]
	return ok
}

// Get returns the pod's allocation.
func (l *Ledger) Get(podUID string) (Allocation, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if a, ok := l.allocs[podUID]; ok {
		return *a, true
	}
	if a, ok := l.orphans[podUID]; ok {
		return *a, true
	}
	return Allocation{}, false
}

// Allocations returns every allocation (orphans included), sorted by pod UID.
func (l *Ledger) Allocations() []Allocation {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Allocation, 0, len(l.allocs)+len(l.orphans))
	for _, a := range l.allocs {
		out = append(out, *a)
	}
	for _, a := range l.orphans {
		out = append(out, *a)
	}
	sortAllocs(out)
	return out
}

// Rebuild replaces the whole ledger with the given nodes and committed
// allocations, as read from the API server. Allocations that do not fit are
// returned with their errors and left out. allocs is not modified.
func (l *Ledger) Rebuild(nodes []*topology.Node, allocs []Allocation) []error {
	fresh := New()
	for _, n := range nodes {
		fresh.UpsertNode(n)
	}
	var errs []error
	sorted := slices.Clone(allocs)
	sortAllocs(sorted)
	for _, a := range sorted {
		if err := fresh.Restore(a); err != nil {
			errs = append(errs, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes, l.allocs, l.orphans, l.gangs = fresh.nodes, fresh.allocs, fresh.orphans, fresh.gangs
	for name, ni := range l.nodes { // the claims stay
		ni.hold(l.claims[name])
	}
	l.index, l.last, l.dirty = nil, nil, l.dirty[:0] // every node is new
	l.changed()
	return errs
}

func sortAllocs(as []Allocation) {
	sort.Slice(as, func(i, j int) bool { return as[i].PodUID < as[j].PodUID })
}

// GPUsOf is how many of ni's GPUs a holds: one per whole GPU, a share's
// fraction of its GPU's memory.
func (ni *NodeInfo) GPUsOf(a *Allocation) float64 {
	if a.Whole {
		return float64(len(a.GPUs))
	}
	total := 0.0
	for _, sh := range a.GPUs {
		for _, g := range ni.Node.GPUs {
			if g.Index == sh.Index && g.MemoryMiB > 0 {
				total += float64(sh.MemoryMiB) / float64(g.MemoryMiB)
			}
		}
	}
	return total
}

// Without returns a snapshot in which the allocations of the given pods
// are gone, as if they had ended: the nodes holding them are copies without
// them (NodeInfo.Without), the others are shared with s.
func (s *Snapshot) Without(uids ...string) *Snapshot {
	out := &Snapshot{Generation: s.Generation, index: s.index, infos: s.infos}
	copied := false
	for i, ni := range s.infos {
		var here []string
		for _, u := range uids {
			if _, ok := ni.Allocs[u]; ok {
				here = append(here, u)
			}
		}
		if len(here) == 0 {
			continue
		}
		if !copied {
			out.infos = slices.Clone(s.infos)
			copied = true
		}
		out.infos[i] = ni.Without(here...)
	}
	return out
}
