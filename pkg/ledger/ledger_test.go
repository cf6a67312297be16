package ledger_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/topology"
)

const gpuMiB = 81920

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expires = t0.Add(time.Minute)
)

// gpuNode is an 8-GPU node with two NVLink islands of 4.
func gpuNode(name string) *topology.Node {
	return topology.FromSpec(topology.Spec{Name: name, Model: "H100", Count: 8, MemoryMiB: gpuMiB, IslandSize: 4})
}

// withHealth returns a copy of n with GPU idx marked unhealthy for reason.
func withHealth(n *topology.Node, idx int, healthy bool, reason string) *topology.Node {
	c := *n
	c.GPUs = slices.Clone(n.GPUs)
	c.GPUs[idx].Healthy, c.GPUs[idx].Reason = healthy, reason
	return &c
}

func share(uid, node string, idx int, mib ledger.MiB) ledger.Allocation {
	return ledger.Allocation{PodUID: uid, Pod: "ns/" + uid, Node: node, GPUs: []ledger.Share{{Index: idx, MemoryMiB: mib}}}
}

func whole(uid, node string, idxs ...int) ledger.Allocation {
	a := ledger.Allocation{PodUID: uid, Pod: "ns/" + uid, Node: node, Whole: true}
	for _, i := range idxs {
		a.GPUs = append(a.GPUs, ledger.Share{Index: i, MemoryMiB: gpuMiB})
	}
	return a
}

func gang(name string, size int, as ...ledger.Allocation) []ledger.Allocation {
	for i := range as {
		as[i].Gang, as[i].GangSize = name, size
	}
	return as
}

func newLedger(t *testing.T, nodes ...string) *ledger.Ledger {
	t.Helper()
	l := ledger.New()
	for _, n := range nodes {
		l.UpsertNode(gpuNode(n))
	}
	return l
}

func mustCheck(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	if errs := l.Check(); len(errs) > 0 {
		t.Fatalf("Check() = %v", errs)
	}
}

func use(l *ledger.Ledger, node string, idx int) ledger.GPUUse {
	ni := l.Snapshot().Node(node)
	return ni.Use[ni.Node.Slot(idx)]
}

func TestReserveErrors(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(l *ledger.Ledger) error
		give    []ledger.Allocation
		wantErr error
		wantMsg string
	}{
		{"share fits", nil, []ledger.Allocation{share("p", "n1", 0, 40960)}, nil, ""},
		{"unknown node", nil, []ledger.Allocation{share("p", "nx", 0, 1024)}, ledger.ErrUnknownNode, "node nx is not known"},
		{"unknown GPU", nil, []ledger.Allocation{share("p", "n1", 9, 1024)}, ledger.ErrUnknownGPU, "node n1 has no GPU 9"},
		{"UUID mismatch", nil, []ledger.Allocation{{PodUID: "p", Node: "n1", GPUs: []ledger.Share{{Index: 0, UUID: "GPU-other", MemoryMiB: 1}}}},
			ledger.ErrUnknownGPU, "not GPU-other"},
		{"over capacity", func(l *ledger.Ledger) error { return l.Reserve(share("a", "n1", 3, 63488), expires) },
			[]ledger.Allocation{share("p", "n1", 3, 40960)}, ledger.ErrNoCapacity, "GPU 3 of node n1 has 18 GiB free, pod needs 40 GiB"},
		{"share on a GPU owned whole", func(l *ledger.Ledger) error { return l.Reserve(whole("a", "n1", 2), expires) },
			[]ledger.Allocation{share("p", "n1", 2, 1024)}, ledger.ErrNoCapacity, "owned whole by another pod"},
		{"whole on a shared GPU", func(l *ledger.Ledger) error { return l.Reserve(share("a", "n1", 2, 1024), expires) },
			[]ledger.Allocation{whole("p", "n1", 1, 2)}, ledger.ErrNoCapacity, "GPU 2 of node n1 is shared by 1 pods"},
		{"unhealthy GPU", func(l *ledger.Ledger) error { l.UpsertNode(withHealth(gpuNode("n1"), 5, false, "XID 79")); return nil },
			[]ledger.Allocation{share("p", "n1", 5, 1024)}, ledger.ErrUnhealthy, "GPU 5 of node n1 is unhealthy: XID 79"},
		{"conflict", func(l *ledger.Ledger) error { return l.Reserve(share("p", "n1", 0, 1024), expires) },
			[]ledger.Allocation{share("p", "n1", 1, 1024)}, ledger.ErrConflict, "ns/p already holds GPUs on node n1"},
		{"conflict with a committed orphan", func(l *ledger.Ledger) error { return l.Restore(share("p", "gone", 0, 1024)) },
			[]ledger.Allocation{share("p", "n1", 0, 1024)}, ledger.ErrConflict, "already holds GPUs on node gone"},
		{"no pod UID", nil, []ledger.Allocation{share("", "n1", 0, 1024)}, ledger.ErrInvalidAlloc, "needs a pod UID"},
		{"holds nothing", nil, []ledger.Allocation{{PodUID: "p", Node: "n1"}}, ledger.ErrInvalidAlloc, "holds nothing"},
		{"share on two GPUs", nil, []ledger.Allocation{{PodUID: "p", Node: "n1", GPUs: []ledger.Share{{Index: 0, MemoryMiB: 1}, {Index: 1, MemoryMiB: 1}}}},
			ledger.ErrInvalidAlloc, "exactly one GPU"},
		{"zero memory", nil, []ledger.Allocation{share("p", "n1", 0, 0)}, ledger.ErrInvalidAlloc, "is not positive"},
		{"same GPU twice", nil, []ledger.Allocation{whole("p", "n1", 4, 4)}, ledger.ErrInvalidAlloc, "names GPU 4 twice"},
		{"negative CPU", nil, []ledger.Allocation{{PodUID: "p", Node: "n1", CPUMilli: -1, GPUs: []ledger.Share{{Index: 0, MemoryMiB: 1}}}},
			ledger.ErrInvalidAlloc, "negative CPU"},
		{"pod twice", nil, []ledger.Allocation{share("p", "n1", 0, 1), share("p", "n1", 1, 1)}, ledger.ErrInvalidAlloc, "appears twice"},
		{"partial gang", nil, gang("ns/g", 3, whole("a", "n1", 0), whole("b", "n1", 1)), ledger.ErrInvalidAlloc,
			"gang ns/g: reservation leaves it partly placed, 2 of 3 members"},
		{"gang completes earlier members", func(l *ledger.Ledger) error {
			return l.ReserveAll(gang("ns/g", 2, whole("a", "n1", 0), whole("b", "n1", 1)), expires)
		}, gang("ns/g", 3, whole("c", "n2", 0)), nil, ""},
		{"second member fails", nil, []ledger.Allocation{share("a", "n1", 0, 1024), share("b", "n1", 0, gpuMiB)}, ledger.ErrNoCapacity, "reserve ns/b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(t, "n1", "n2")
			if tc.setup != nil {
				if err := tc.setup(l); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			before := l.Allocations()
			snap := l.Snapshot()
			err := l.ReserveAll(tc.give, expires)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("ReserveAll() error = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("error %q does not contain %q", err, tc.wantMsg)
				}
				// All or nothing: a failed reservation changes nothing.
				if diff := cmp.Diff(before, l.Allocations()); diff != "" {
					t.Errorf("failed ReserveAll changed the ledger (-before +after):\n%s", diff)
				}
				if l.Snapshot() != snap {
					t.Errorf("failed ReserveAll replaced the snapshot")
				}
			}
			mustCheck(t, l)
		})
	}
}

func TestReserveIdempotent(t *testing.T) {
	l := newLedger(t, "n1")
	a := share("p", "n1", 2, 20480)
	if err := l.Reserve(a, expires); err != nil {
		t.Fatal(err)
	}
	later := expires.Add(time.Minute)
	if err := l.Reserve(a, later); err != nil {
		t.Fatalf("retrying the same reservation: %v", err)
	}
	got, _ := l.Get("p")
	if !got.Expires.Equal(later) || got.State != ledger.Reserved {
		t.Errorf("retry did not extend the expiry: %+v", got)
	}
	if u := use(l, "n1", 2); u.UsedMiB != 20480 || u.Pods != 1 {
		t.Errorf("retry counted the memory twice: %+v", u)
	}
	if n := len(l.Expire(expires)); n != 0 {
		t.Errorf("Expire at the old expiry released %d", n)
	}
	mustCheck(t, l)
}

// TestReserveAllRenewAndFresh renews one pod and adds another on the same
// node in one call: the node view must point at the renewed value.
func TestReserveAllRenewAndFresh(t *testing.T) {
	l := newLedger(t, "n1")
	g := gang("ns/g", 2, share("a", "n1", 0, 1024), share("b", "n1", 0, 1024))
	if err := l.ReserveAll(g[:1], expires); err == nil {
		t.Fatal("a partial gang reservation was accepted")
	}
	if err := l.Reserve(share("x", "n1", 1, 1024), expires); err != nil {
		t.Fatal(err)
	}
	later := expires.Add(time.Hour)
	if err := l.ReserveAll([]ledger.Allocation{share("x", "n1", 1, 1024), share("y", "n1", 1, 1024)}, later); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, l)
	if ni := l.Snapshot().Node("n1"); !ni.Allocs["x"].Expires.Equal(later) {
		t.Errorf("node view holds the old value of x: %+v", ni.Allocs["x"])
	}
}

func TestCommit(t *testing.T) {
	l := newLedger(t, "n1")
	if err := l.Commit("p"); !errors.Is(err, ledger.ErrNotReserved) {
		t.Errorf("Commit(unknown) = %v, want ErrNotReserved", err)
	}
	if err := l.Reserve(whole("p", "n1", 0, 1), expires); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second commit is a no-op
		if err := l.Commit("p"); err != nil {
			t.Fatalf("Commit() = %v", err)
		}
	}
	got, _ := l.Get("p")
	if got.State != ledger.Committed || !got.Expires.IsZero() || got.State.String() != "committed" {
		t.Errorf("after Commit: %+v", got)
	}
	if out := l.Expire(expires.Add(time.Hour)); len(out) != 0 {
		t.Errorf("Expire released a committed pod: %+v", out)
	}
	// Reserving the same GPUs again after commit is a no-op, not a conflict.
	if err := l.Reserve(whole("p", "n1", 0, 1), expires); err != nil {
		t.Errorf("re-reserving a committed pod: %v", err)
	}
	got, _ = l.Get("p")
	if got.State != ledger.Committed {
		t.Errorf("re-reserve turned a committed pod back into %v", got.State)
	}
	mustCheck(t, l)
}

func TestExpire(t *testing.T) {
	l := newLedger(t, "n1", "n2")
	if err := l.Reserve(share("b", "n1", 0, 1024), expires); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(share("a", "n1", 0, 1024), expires); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(share("c", "n1", 0, 1024), expires.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := l.ReserveAll(gang("ns/g", 2, whole("g1", "n2", 0), whole("g2", "n2", 1)), expires.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if out := l.Expire(expires.Add(-time.Nanosecond)); len(out) != 0 {
		t.Errorf("Expire before the expiry released %+v", out)
	}
	out := l.Expire(expires) // exactly at the expiry
	if uids := uidsOf(out); !slices.Equal(uids, []string{"a", "b"}) {
		t.Errorf("Expire() released %v, want [a b] sorted", uids)
	}
	if u := use(l, "n1", 0); u.UsedMiB != 1024 || u.Pods != 1 {
		t.Errorf("after Expire GPU 0 use = %+v", u)
	}
	mustCheck(t, l)
	if out := l.Expire(expires.Add(2 * time.Hour)); !slices.Equal(uidsOf(out), []string{"c", "g1", "g2"}) {
		t.Errorf("Expire() released %v", uidsOf(out))
	}
	mustCheck(t, l)
	if n := len(l.Allocations()); n != 0 {
		t.Errorf("%d allocations left after everything expired", n)
	}
}

func uidsOf(as []ledger.Allocation) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.PodUID)
	}
	return out
}

func TestRelease(t *testing.T) {
	l := newLedger(t, "n1")
	if _, ok := l.Release("p"); ok {
		t.Errorf("Release(unknown) reported a release")
	}
	if err := l.Reserve(whole("p", "n1", 0, 1, 2), expires); err != nil {
		t.Fatal(err)
	}
	got, ok := l.Release("p")
	if !ok || got.PodUID != "p" || len(got.GPUs) != 3 {
		t.Errorf("Release() = %+v, %v", got, ok)
	}
	if ni := l.Snapshot().Node("n1"); ni.IdleGPUs() != 8 || ni.UsedMiB() != 0 {
		t.Errorf("after Release: %d idle, %d used", ni.IdleGPUs(), ni.UsedMiB())
	}
	mustCheck(t, l)
}

// TestGangNeverPartlyReserved: losing one member's reservation (release,
// expiry, node removal, topology change) releases the gang's other
// reservations; committed members stay.
func TestGangNeverPartlyReserved(t *testing.T) {
	members := func() []ledger.Allocation {
		return gang("ns/g", 3, whole("g1", "n1", 0), whole("g2", "n1", 1), whole("g3", "n2", 0))
	}
	tests := []struct {
		name     string
		step     func(l *ledger.Ledger)
		wantLeft []string
	}{
		{"release a reserved member", func(l *ledger.Ledger) { l.Release("g2") }, []string{"g1"}},
		{"release the committed member", func(l *ledger.Ledger) { l.Release("g1") }, nil},
		{"expire", func(l *ledger.Ledger) { l.Expire(expires) }, []string{"g1"}},
		{"remove a node with a reserved member", func(l *ledger.Ledger) { l.RemoveNode("n2") }, []string{"g1"}},
		{"GPU of a reserved member removed", func(l *ledger.Ledger) {
			n := gpuNode("n2")
			n.GPUs = n.GPUs[1:]
			l.UpsertNode(n)
		}, []string{"g1"}},
		{"health flip keeps everything", func(l *ledger.Ledger) { l.UpsertNode(withHealth(gpuNode("n1"), 1, false, "XID 48")) },
			[]string{"g1", "g2", "g3"}},
		{"remove a node with only the committed member", func(l *ledger.Ledger) {
			l.RemoveNode("n1") // g1 becomes an orphan and still counts; g2 was reserved there
		}, []string{"g1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(t, "n1", "n2")
			if err := l.ReserveAll(members(), expires); err != nil {
				t.Fatal(err)
			}
			if err := l.Commit("g1"); err != nil {
				t.Fatal(err)
			}
			tc.step(l)
			mustCheck(t, l)
			if got := uidsOf(l.Allocations()); !slices.Equal(got, tc.wantLeft) {
				t.Errorf("left %v, want %v", got, tc.wantLeft)
			}
		})
	}
}

func TestRestore(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(l *ledger.Ledger)
		give    ledger.Allocation
		wantErr error
	}{
		{"on an unhealthy GPU", func(l *ledger.Ledger) { l.UpsertNode(withHealth(gpuNode("n1"), 0, false, "XID 79")) },
			share("p", "n1", 0, 1024), nil},
		{"over capacity", func(l *ledger.Ledger) { _ = l.Restore(share("a", "n1", 0, 61440)) }, share("p", "n1", 0, 40960), ledger.ErrNoCapacity},
		{"share on a GPU owned whole", func(l *ledger.Ledger) { _ = l.Restore(whole("a", "n1", 0)) }, share("p", "n1", 0, 1), ledger.ErrNoCapacity},
		{"whole on a shared GPU", func(l *ledger.Ledger) { _ = l.Restore(share("a", "n1", 0, 1)) }, whole("p", "n1", 0), ledger.ErrNoCapacity},
		{"unknown GPU", nil, share("p", "n1", 8, 1), ledger.ErrUnknownGPU},
		{"same GPU twice", nil, whole("p", "n1", 3, 3), ledger.ErrInvalidAlloc},
		{"unknown node becomes an orphan", nil, share("p", "later", 0, 1), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(t, "n1")
			if tc.setup != nil {
				tc.setup(l)
			}
			before := l.Allocations()
			err := l.Restore(tc.give)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("Restore() = %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if diff := cmp.Diff(before, l.Allocations()); diff != "" {
					t.Errorf("refused Restore recorded something (-before +after):\n%s", diff)
				}
			} else if got, ok := l.Get("p"); !ok || got.State != ledger.Committed {
				t.Errorf("Get() after Restore = %+v, %v", got, ok)
			}
			mustCheck(t, l)
		})
	}
}

func TestRestoreReplacesWhatThePodHeld(t *testing.T) {
	l := newLedger(t, "n1")
	if err := l.Reserve(share("p", "n1", 0, 1024), expires); err != nil {
		t.Fatal(err)
	}
	// Same GPUs: the reservation is committed in place.
	if err := l.Restore(share("p", "n1", 0, 1024)); err != nil {
		t.Fatal(err)
	}
	if a, _ := l.Get("p"); a.State != ledger.Committed {
		t.Errorf("state = %v", a.State)
	}
	// Different GPUs: the annotation is the truth.
	if err := l.Restore(share("p", "n1", 4, 2048)); err != nil {
		t.Fatal(err)
	}
	if u := use(l, "n1", 0); u != (ledger.GPUUse{}) {
		t.Errorf("GPU 0 still used: %+v", u)
	}
	if u := use(l, "n1", 4); u.UsedMiB != 2048 {
		t.Errorf("GPU 4 use = %+v", u)
	}
	mustCheck(t, l)
}

func TestOrphans(t *testing.T) {
	l := ledger.New()
	// Two pods claim the same whole GPU of a node the ledger does not know.
	if err := l.Restore(whole("a", "n1", 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Restore(whole("b", "n1", 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Restore(share("c", "n1", 1, 1024)); err != nil {
		t.Fatal(err)
	}
	if got, ok := l.Get("a"); !ok || got.State != ledger.Committed {
		t.Errorf("orphan a: %+v, %v", got, ok)
	}
	l.UpsertNode(gpuNode("n1"))
	mustCheck(t, l)
	ni := l.Snapshot().Node("n1")
	if ni.Allocs["a"] == nil || ni.Allocs["c"] == nil || ni.Allocs["b"] != nil {
		t.Errorf("applied orphans %v, want a and c (b conflicts with a)", keys(ni.Allocs))
	}
	if u := use(l, "n1", 0); u.Pods != 1 || !u.Exclusive {
		t.Errorf("GPU 0 use = %+v", u)
	}
	// b still waits; it is applied once a frees the GPU and the node is seen again.
	if _, ok := l.Get("b"); !ok {
		t.Errorf("orphan b was lost")
	}
	l.Release("a")
	l.UpsertNode(gpuNode("n1"))
	mustCheck(t, l)
	if l.Snapshot().Node("n1").Allocs["b"] == nil {
		t.Errorf("orphan b not applied after a left")
	}
	// Releasing an orphan forgets it.
	if err := l.Restore(share("d", "elsewhere", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if got, ok := l.Release("d"); !ok || got.PodUID != "d" {
		t.Errorf("Release(orphan) = %+v, %v", got, ok)
	}
	if _, ok := l.Get("d"); ok {
		t.Errorf("released orphan still there")
	}
	if err := l.Commit("b"); err != nil {
		t.Errorf("Commit(committed) = %v", err)
	}
	mustCheck(t, l)
}

func keys(m map[string]*ledger.Allocation) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestRemoveNode(t *testing.T) {
	l := newLedger(t, "n1", "n2")
	if err := l.Restore(whole("c", "n1", 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(share("r", "n1", 1, 1024), expires); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(share("other", "n2", 1, 1024), expires); err != nil {
		t.Fatal(err)
	}
	out := l.RemoveNode("n1")
	if got := uidsOf(out); !slices.Equal(got, []string{"c", "r"}) {
		t.Errorf("RemoveNode() = %v, want [c r]", got)
	}
	if l.Snapshot().Node("n1") != nil || l.Snapshot().Len() != 1 {
		t.Errorf("node n1 still in the snapshot")
	}
	if _, ok := l.Get("c"); !ok {
		t.Errorf("committed pod c lost (it should wait as an orphan)")
	}
	if _, ok := l.Get("r"); ok {
		t.Errorf("reservation r survived its node")
	}
	mustCheck(t, l)
	l.UpsertNode(gpuNode("n1"))
	if u := use(l, "n1", 0); !u.Exclusive {
		t.Errorf("orphan c not re-applied when n1 came back: %+v", u)
	}
	if out := l.RemoveNode("unknown"); len(out) != 0 {
		t.Errorf("RemoveNode(unknown) = %+v", out)
	}
	mustCheck(t, l)
}

func TestUpsertNode(t *testing.T) {
	l := newLedger(t, "n1")
	if err := l.Restore(share("s", "n1", 2, 61440)); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(whole("w", "n1", 6, 7), expires); err != nil {
		t.Fatal(err)
	}
	// GPU 2 fails: its pod stays, new work is refused.
	l.UpsertNode(withHealth(gpuNode("n1"), 2, false, "XID 79"))
	mustCheck(t, l)
	if u := use(l, "n1", 2); u.UsedMiB != 61440 {
		t.Errorf("pod on the failed GPU lost: %+v", u)
	}
	if err := l.Reserve(share("new", "n1", 2, 1024), expires); !errors.Is(err, ledger.ErrUnhealthy) {
		t.Errorf("Reserve on the failed GPU = %v, want ErrUnhealthy", err)
	}
	// It recovers.
	l.UpsertNode(gpuNode("n1"))
	if err := l.Reserve(share("new", "n1", 2, 1024), expires); err != nil {
		t.Errorf("Reserve after recovery = %v", err)
	}
	// The GPU shrinks below what is assigned: the committed pods become
	// orphans, the reservations on it go.
	small := gpuNode("n1")
	small.GPUs[2].MemoryMiB = 40960
	small.GPUs = small.GPUs[:7] // GPU 7 is gone
	l.UpsertNode(small)
	mustCheck(t, l)
	if _, ok := l.Get("w"); ok {
		t.Errorf("reservation on a vanished GPU survived")
	}
	if got, ok := l.Get("s"); !ok || got.State != ledger.Committed {
		t.Errorf("committed pod s lost: %+v, %v", got, ok)
	}
	if _, ok := l.Get("new"); !ok {
		t.Errorf("reservation new (1 GiB, still fits) lost")
	}
	// The full GPU is back: the orphan is applied again.
	l.UpsertNode(gpuNode("n1"))
	mustCheck(t, l)
	if u := use(l, "n1", 2); u.UsedMiB != 61440+1024 || u.Pods != 2 {
		t.Errorf("GPU 2 use = %+v", u)
	}
}

func TestRebuild(t *testing.T) {
	l := newLedger(t, "old")
	if err := l.Reserve(share("stale", "old", 0, 1024), expires); err != nil {
		t.Fatal(err)
	}
	allocs := []ledger.Allocation{
		share("z", "n1", 0, 40960),
		share("a", "n1", 0, 40960),
		share("zz", "n1", 0, 1024), // does not fit after a and z
		whole("w", "n2", 0),
		share("o", "nowhere", 0, 1),
	}
	given := slices.Clone(allocs)
	errs := l.Rebuild([]*topology.Node{gpuNode("n1"), gpuNode("n2")}, allocs)
	if len(errs) != 1 || !errors.Is(errs[0], ledger.ErrNoCapacity) || !strings.Contains(errs[0].Error(), "ns/zz") {
		t.Errorf("Rebuild() errors = %v, want one ErrNoCapacity for ns/zz", errs)
	}
	if diff := cmp.Diff(given, allocs); diff != "" {
		t.Errorf("Rebuild() reordered its input (-given +after):\n%s", diff)
	}
	if got := uidsOf(l.Allocations()); !slices.Equal(got, []string{"a", "o", "w", "z"}) {
		t.Errorf("after Rebuild: %v", got)
	}
	if l.Snapshot().Node("old") != nil {
		t.Errorf("node not in the rebuild survived")
	}
	for _, a := range l.Allocations() {
		if a.State != ledger.Committed {
			t.Errorf("%s is %v after Rebuild", a.PodUID, a.State)
		}
	}
	mustCheck(t, l)
}

func TestSnapshot(t *testing.T) {
	l := newLedger(t, "b", "a", "c")
	s1 := l.Snapshot()
	if s2 := l.Snapshot(); s2 != s1 {
		t.Errorf("Snapshot() not cached between changes")
	}
	if got := s1.Names(); !slices.Equal(got, []string{"a", "b", "c"}) || s1.Len() != 3 {
		t.Errorf("Names() = %v, Len() = %d", got, s1.Len())
	}
	if s1.Node("x") != nil {
		t.Errorf("Node(unknown) != nil")
	}
	ni := s1.Node("a")
	if err := l.Reserve(whole("p", "a", 0), expires); err != nil {
		t.Fatal(err)
	}
	s2 := l.Snapshot()
	if s2.Generation <= s1.Generation {
		t.Errorf("generation did not grow: %d -> %d", s1.Generation, s2.Generation)
	}
	if ni.Use[0] != (ledger.GPUUse{}) || len(ni.Allocs) != 0 || s1.Node("a") != ni {
		t.Errorf("old snapshot changed: %+v", ni.Use[0])
	}
	if !s2.Node("a").Use[0].Exclusive {
		t.Errorf("new snapshot lacks the reservation")
	}
}

func TestNodeInfo(t *testing.T) {
	n := withHealth(gpuNode("n1"), 7, false, "XID 79")
	n.CPUMilli, n.HostMemoryMiB = 8000, 65536
	l := ledger.New()
	l.UpsertNode(n)
	a := share("s", "n1", 0, 20480)
	a.CPUMilli, a.HostMemoryMiB = 3000, 1024
	if err := l.Reserve(a, expires); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(whole("w", "n1", 1), expires); err != nil {
		t.Fatal(err)
	}
	ni := l.Snapshot().Node("n1")
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"Name", ni.Name(), "n1"},
		{"FreeMiB share", ni.FreeMiB(0), ledger.MiB(gpuMiB - 20480)},
		{"FreeMiB whole", ni.FreeMiB(1), ledger.MiB(0)},
		{"FreeMiB unhealthy", ni.FreeMiB(7), ledger.MiB(0)},
		{"Idle shared", ni.Idle(0), false},
		{"Idle free", ni.Idle(2), true},
		{"Idle unhealthy", ni.Idle(7), false},
		{"IdleGPUs", ni.IdleGPUs(), 5},
		{"HealthyGPUs", ni.HealthyGPUs(), 7},
		{"UsedMiB", ni.UsedMiB(), ledger.MiB(20480 + gpuMiB)},
		{"FreeCPUMilli", ni.FreeCPUMilli(), int64(5000)},
		{"FreeHostMemoryMiB", ni.FreeHostMemoryMiB(), ledger.MiB(65536 - 1024)},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	// With/Without are what-ifs: ni is not changed.
	w := ni.With(&ledger.Allocation{PodUID: "x", Node: "n1", Whole: true, GPUs: []ledger.Share{{Index: 2, MemoryMiB: gpuMiB}}})
	if w.IdleGPUs() != 4 || ni.IdleGPUs() != 5 {
		t.Errorf("With: %d idle (orig %d)", w.IdleGPUs(), ni.IdleGPUs())
	}
	wo := ni.Without("s", "w", "nobody")
	if wo.IdleGPUs() != 7 || wo.FreeCPUMilli() != 8000 || ni.UsedMiB() != 20480+gpuMiB {
		t.Errorf("Without: %d idle, %d CPU", wo.IdleGPUs(), wo.FreeCPUMilli())
	}
	// CPU and host memory count on nodes that track them.
	b := share("cpu", "n1", 3, 1)
	b.CPUMilli = 6000
	if err := l.Reserve(b, expires); !errors.Is(err, ledger.ErrNoCapacity) || !strings.Contains(err.Error(), "5000m CPU free, pod needs 6000m") {
		t.Errorf("Reserve over CPU = %v", err)
	}
	b.CPUMilli, b.HostMemoryMiB = 1, 65536
	if err := l.Reserve(b, expires); !errors.Is(err, ledger.ErrNoCapacity) || !strings.Contains(err.Error(), "host memory free") {
		t.Errorf("Reserve over host memory = %v", err)
	}
	untracked := ledger.New()
	untracked.UpsertNode(gpuNode("u"))
	if ni := untracked.Snapshot().Node("u"); ni.FreeCPUMilli() != -1 || ni.FreeHostMemoryMiB() != -1 {
		t.Errorf("untracked node reports CPU %d, host memory %d", ni.FreeCPUMilli(), ni.FreeHostMemoryMiB())
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[ledger.State]string{ledger.Reserved: "reserved", ledger.Committed: "committed", 0: "unknown"} {
		if got := fmt.Sprint(s); got != want {
			t.Errorf("State(%d) = %q, want %q", int(s), got, want)
		}
	}
}

func TestSnapshotWithout(t *testing.T) {
	l := ledger.New()
	l.UpsertNode(gpuNode("n1"))
	l.UpsertNode(gpuNode("n2"))
	for _, a := range []ledger.Allocation{
		{PodUID: "a", Pod: "ns/a", Node: "n1", Whole: true, GPUs: []ledger.Share{{Index: 0, MemoryMiB: gpuMiB}}},
		{PodUID: "b", Pod: "ns/b", Node: "n1", Whole: true, GPUs: []ledger.Share{{Index: 1, MemoryMiB: gpuMiB}}},
		{PodUID: "c", Pod: "ns/c", Node: "n2", Whole: true, GPUs: []ledger.Share{{Index: 0, MemoryMiB: gpuMiB}}},
	} {
		if err := l.Restore(a); err != nil {
			t.Fatal(err)
		}
	}
	s := l.Snapshot()
	w := s.Without("a", "nobody")
	if _, ok := w.Node("n1").Allocs["a"]; ok || w.Node("n1").Use[0].Pods != 0 {
		t.Errorf("n1 without a still holds it: %+v", w.Node("n1").Use[0])
	}
	if _, ok := w.Node("n1").Allocs["b"]; !ok {
		t.Error("n1 without a lost b")
	}
	if w.Node("n2") != s.Node("n2") {
		t.Error("n2, untouched, was copied")
	}
	if _, ok := s.Node("n1").Allocs["a"]; !ok {
		t.Error("the snapshot itself changed")
	}
	if s.Without().Node("n1") != s.Node("n1") {
		t.Error("without nothing, a node was copied")
	}
}
