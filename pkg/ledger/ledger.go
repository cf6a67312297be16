// Package ledger keeps Rota's per-GPU memory ledger: which pod holds which
// GPU, whole or as a memory share, reserved (with an expiry) or committed.
// It is the single source of truth the extender's placement reads from and
// the only place that changes GPU use. It is pure: time comes from callers.
package ledger

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
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
	// CPUMilli and HostMemoryMiB count only on nodes that track them.
	CPUMilli      int64
	HostMemoryMiB MiB
	State         State
	// Expires is when a Reserved allocation lapses.
	Expires time.Time
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
	// (yet): they are applied when the node appears.
	orphans map[string]*Allocation
	snap    *Snapshot
	gen     uint64
}

// New returns an empty ledger.
func New() *Ledger {
	return &Ledger{nodes: map[string]*NodeInfo{}, allocs: map[string]*Allocation{}, orphans: map[string]*Allocation{}}
}

// Snapshot is a consistent, immutable view of the ledger.
type Snapshot struct {
	Generation uint64
	nodes      map[string]*NodeInfo
	names      []string
}

// Node returns the node's info or nil.
func (s *Snapshot) Node(name string) *NodeInfo { return s.nodes[name] }

// Names returns all node names, sorted.
func (s *Snapshot) Names() []string { return s.names }

// Len is the number of nodes.
func (s *Snapshot) Len() int { return len(s.nodes) }

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
		nodes := make(map[string]*NodeInfo, len(l.nodes))
		names := make([]string, 0, len(l.nodes))
		for k, v := range l.nodes {
			nodes[k] = v
			names = append(names, k)
		}
		sort.Strings(names)
		l.snap = &Snapshot{Generation: l.gen, nodes: nodes, names: names}
	}
	return l.snap
}

func (l *Ledger) changed() { l.gen++; l.snap = nil }

// UpsertNode adds a node or replaces its topology. Existing allocations on
// the node are kept and re-applied (a GPU that turned unhealthy keeps its
// pods; it only stops receiving new ones).
func (l *Ledger) UpsertNode(n *topology.Node) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ni := newNodeInfo(n)
	for _, a := range l.allocs {
		if a.Node == n.Name {
			ni.apply(a, 1)
		}
	}
	for uid, a := range l.orphans {
		if a.Node == n.Name {
			ni.apply(a, 1)
			l.allocs[uid] = a
			delete(l.orphans, uid)
		}
	}
	l.nodes[n.Name] = ni
	l.changed()
}

// RemoveNode forgets a node. Its allocations become orphans until their pods
// are released (a deleted node's pods are deleted by the API server's GC).
// It returns the allocations that were on the node.
func (l *Ledger) RemoveNode(name string) []Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Allocation
	for uid, a := range l.allocs {
		if a.Node == name {
			out = append(out, *a)
			delete(l.allocs, uid)
			if a.State == Committed {
				l.orphans[uid] = a
			}
		}
	}
	delete(l.nodes, name)
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
	for _, g := range a.GPUs {
		if g.MemoryMiB <= 0 {
			return errorf(ErrInvalidAlloc, "GPU %d: memory %d MiB is not positive", g.Index, g.MemoryMiB)
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

// ReserveAll reserves every allocation or none (gang slots).
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
		if old, ok := l.allocs[a.PodUID]; ok {
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
			staged[a.Node] = ni
		}
		if err := ni.fits(&a); err != nil {
			return fmt.Errorf("reserve %s: %w", nameOr(&a), err)
		}
		ni.apply(&a, 1)
		fresh = append(fresh, &a)
	}
	for _, uid := range renew {
		old := l.allocs[uid]
		if old.State == Reserved {
			c := *old
			c.Expires = expires
			l.replace(&c)
		}
	}
	for name, ni := range staged {
		l.nodes[name] = ni
	}
	for _, a := range fresh {
		l.allocs[a.PodUID] = a
	}
	if len(fresh)+len(renew) > 0 {
		l.changed()
	}
	return nil
}

// replace swaps an allocation value without changing GPU use.
func (l *Ledger) replace(a *Allocation) {
	l.allocs[a.PodUID] = a
	if ni, ok := l.nodes[a.Node]; ok {
		c := ni.clone()
		c.Allocs[a.PodUID] = a
		l.nodes[a.Node] = c
	}
}

func nameOr(a *Allocation) string {
	if a.Pod != "" {
		return a.Pod
	}
	return a.PodUID
}

// Commit turns the pod's reservation into a committed allocation. Committing
// an already committed pod is a no-op.
func (l *Ledger) Commit(podUID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
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
// and records nothing, when the allocation would break invariant 1.
func (l *Ledger) Restore(a Allocation) error {
	a.State, a.Expires = Committed, time.Time{}
	if err := validate(&a); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.allocs[a.PodUID]; ok {
		if sameGPUs(old, &a) {
			if old.State != Committed {
				c := *old
				c.State, c.Expires = Committed, time.Time{}
				l.replace(&c)
				l.changed()
			}
			return nil
		}
		// The annotation is the truth: drop what we held for the pod.
		l.releaseLocked(a.PodUID)
	}
	if _, ok := l.orphans[a.PodUID]; ok {
		delete(l.orphans, a.PodUID)
	}
	ni, ok := l.nodes[a.Node]
	if !ok {
		l.orphans[a.PodUID] = &a
		return nil
	}
	// Health is not checked: check capacity on a healthy view.
	for _, g := range a.GPUs {
		s := ni.Node.Slot(g.Index)
		if s < 0 {
			return errorf(ErrUnknownGPU, "restore %s: node %s has no GPU %d", nameOr(&a), a.Node, g.Index)
		}
		u, gpu := ni.Use[s], ni.Node.GPUs[s]
		if u.Exclusive || (a.Whole && u.Pods > 0) || u.UsedMiB+g.MemoryMiB > gpu.MemoryMiB {
			return errorf(ErrNoCapacity, "restore %s: GPU %d of node %s is already taken", nameOr(&a), g.Index, a.Node)
		}
	}
	c := ni.clone()
	c.apply(&a, 1)
	l.nodes[a.Node] = c
	l.allocs[a.PodUID] = &a
	l.changed()
	return nil
}

// Release frees whatever the pod holds. It reports what was released.
func (l *Ledger) Release(podUID string) (Allocation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releaseLocked(podUID)
}

func (l *Ledger) releaseLocked(podUID string) (Allocation, bool) {
	if a, ok := l.orphans[podUID]; ok {
		delete(l.orphans, podUID)
		l.changed()
		return *a, true
	}
	a, ok := l.allocs[podUID]
	if !ok {
		return Allocation{}, false
	}
	delete(l.allocs, podUID)
	if ni, ok := l.nodes[a.Node]; ok {
		c := ni.clone()
		c.apply(a, -1)
		l.nodes[a.Node] = c
	}
	l.changed()
	return *a, true
}

// Expire releases every reservation whose expiry is not after now and
// returns them, sorted by pod UID.
func (l *Ledger) Expire(now time.Time) []Allocation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Allocation
	for uid, a := range l.allocs {
		if a.State == Reserved && !a.Expires.After(now) {
			if r, ok := l.releaseLocked(uid); ok {
				out = append(out, r)
			}
		}
	}
	sortAllocs(out)
	return out
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
// returned with their errors and left out.
func (l *Ledger) Rebuild(nodes []*topology.Node, allocs []Allocation) []error {
	fresh := New()
	for _, n := range nodes {
		fresh.UpsertNode(n)
	}
	var errs []error
	sortAllocs(allocs)
	for _, a := range allocs {
		if err := fresh.Restore(a); err != nil {
			errs = append(errs, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes, l.allocs, l.orphans = fresh.nodes, fresh.allocs, fresh.orphans
	l.changed()
	return errs
}

func sortAllocs(as []Allocation) {
	sort.Slice(as, func(i, j int) bool { return as[i].PodUID < as[j].PodUID })
}
