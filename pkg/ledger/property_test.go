package ledger_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/topology"
)

// world generates random ledger operations over a small cluster, so that
// pods collide on GPUs often.
type world struct {
	r     *rand.Rand
	l     *ledger.Ledger
	now   time.Time
	nodes []string // names that may appear
	seq   int
	uids  []string // every UID ever used
}

func newWorld(seed uint64) *world {
	w := &world{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), l: ledger.New(), now: t0,
		nodes: []string{"n0", "n1", "n2", "n3", "n4"}}
	for _, n := range w.nodes[:3] {
		w.l.UpsertNode(w.randomNode(n))
	}
	return w
}

// randomNode is a node with 2..5 GPUs of 8 or 16 GiB, some unhealthy.
func (w *world) randomNode(name string) *topology.Node {
	n := topology.FromSpec(topology.Spec{Name: name, Model: "T", Count: 2 + w.r.IntN(4),
		MemoryMiB: ledger.MiB(8192 * (1 + w.r.IntN(2))), IslandSize: 2})
	for i := range n.GPUs {
		if w.r.IntN(6) == 0 {
			n.GPUs[i].Healthy, n.GPUs[i].Reason = false, "XID 79"
		}
	}
	return n
}

func (w *world) uid() string {
	w.seq++
	u := fmt.Sprintf("p%03d", w.seq)
	w.uids = append(w.uids, u)
	return u
}

func (w *world) anyUID() string {
	if len(w.uids) == 0 || w.r.IntN(10) == 0 {
		return "nobody"
	}
	return w.uids[w.r.IntN(len(w.uids))]
}

// randomAlloc is a share or 1..3 whole GPUs on a random node; GPU indexes
// may be out of range for the node, on purpose.
func (w *world) randomAlloc(uid string) ledger.Allocation {
	a := ledger.Allocation{PodUID: uid, Pod: "ns/" + uid, Node: w.nodes[w.r.IntN(len(w.nodes))], Priority: int32(w.r.IntN(3))}
	if w.r.IntN(2) == 0 { // a declared end, for claims
		a.Ends = w.now.Add(time.Duration(w.r.IntN(120)) * time.Second)
	}
	if w.r.IntN(2) == 0 {
		a.GPUs = []ledger.Share{{Index: w.r.IntN(5), MemoryMiB: ledger.MiB(1024 * (1 + w.r.IntN(12)))}}
		return a
	}
	a.Whole = true
	for _, i := range w.r.Perm(5)[:1+w.r.IntN(3)] {
		a.GPUs = append(a.GPUs, ledger.Share{Index: i, MemoryMiB: 8192})
	}
	return a
}

// step applies one random operation and returns its name.
func (w *world) step() string {
	l := w.l
	switch op := w.r.IntN(100); {
	case op < 25:
		_ = l.Reserve(w.randomAlloc(w.uid()), w.now.Add(time.Duration(1+w.r.IntN(60))*time.Second))
		return "reserve"
	case op < 35:
		size := 2 + w.r.IntN(3)
		members := size - w.r.IntN(2) // sometimes a member short
		name := fmt.Sprintf("ns/g%d", w.seq)
		var as []ledger.Allocation
		for range members {
			a := w.randomAlloc(w.uid())
			a.Gang, a.GangSize = name, size
			as = append(as, a)
		}
		_ = l.ReserveAll(as, w.now.Add(time.Duration(1+w.r.IntN(60))*time.Second))
		return "reserveAll"
	case op < 40:
		// Retry an existing reservation (renewal), mixed with a new pod.
		if all := l.Allocations(); len(all) > 0 {
			a := all[w.r.IntN(len(all))]
			_ = l.ReserveAll([]ledger.Allocation{a, w.randomAlloc(w.uid())}, w.now.Add(time.Minute))
		}
		return "renew"
	case op < 55:
		_ = l.Commit(w.anyUID())
		return "commit"
	case op < 65:
		l.Release(w.anyUID())
		return "release"
	case op < 72:
		w.now = w.now.Add(time.Duration(w.r.IntN(30)) * time.Second)
		l.Expire(w.now)
		return "expire"
	case op < 82:
		l.UpsertNode(w.randomNode(w.nodes[w.r.IntN(len(w.nodes))]))
		return "upsertNode"
	case op < 85:
		l.RemoveNode(w.nodes[w.r.IntN(len(w.nodes))])
		return "removeNode"
	case op < 90:
		// Reservations: claims on random nodes, sometimes none.
		var cs []ledger.Claim
		for _, n := range w.nodes {
			if w.r.IntN(3) == 0 {
				c := ledger.Claim{Job: fmt.Sprintf("ns/j%d", w.r.IntN(3)), Node: n, GPUs: w.r.IntN(6), CPUMilli: int64(w.r.IntN(2000))}
				if w.r.IntN(4) > 0 {
					c.Start = w.now.Add(time.Duration(w.r.IntN(90)) * time.Second)
				}
				cs = append(cs, c)
			}
		}
		l.SetClaims(cs)
		return "setClaims"
	case op < 95:
		uid := w.anyUID()
		if w.r.IntN(2) == 0 {
			uid = w.uid()
		}
		_ = l.Restore(w.randomAlloc(uid))
		return "restore"
	default:
		// Restart: rebuild from the nodes and the committed allocations.
		snap := l.Snapshot()
		var nodes []*topology.Node
		for _, n := range snap.Names() {
			nodes = append(nodes, snap.Node(n).Node)
		}
		var committed []ledger.Allocation
		for _, a := range l.Allocations() {
			if a.State == ledger.Committed {
				committed = append(committed, a)
			}
		}
		if errs := l.Rebuild(nodes, committed); len(errs) > 0 {
			return fmt.Sprintf("rebuild (errors %v)", errs)
		}
		return "rebuild"
	}
}

// fingerprint renders everything a snapshot shows.
func fingerprint(s *ledger.Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gen %d names %v\n", s.Generation, s.Names())
	for _, name := range s.Names() {
		ni := s.Node(name)
		fmt.Fprintf(&b, "%s %p %+v cpu %d mem %d\n", name, ni.Node, ni.Use, ni.CPUMilli, ni.HostMemoryMiB)
		for _, k := range keys(ni.Allocs) {
			fmt.Fprintf(&b, "  %s %+v\n", k, *ni.Allocs[k])
		}
	}
	return b.String()
}

// TestLedgerProperties runs long random operation sequences and checks after
// every step that the invariants hold (Check is empty) and that a snapshot
// taken before the step did not change.
func TestLedgerProperties(t *testing.T) {
	seeds, steps := 40, 500
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		w := newWorld(seed)
		var history []string
		for i := range steps {
			before := w.l.Snapshot()
			fp := fingerprint(before)
			history = append(history, w.step())
			if errs := w.l.Check(); len(errs) > 0 {
				t.Fatalf("seed %d step %d (%s): Check() = %v\nlast steps %v", seed, i, history[len(history)-1], errs,
					history[max(0, len(history)-8):])
			}
			if got := fingerprint(before); got != fp {
				t.Fatalf("seed %d step %d (%s): an earlier snapshot changed:\nbefore\n%s\nafter\n%s", seed, i,
					history[len(history)-1], fp, got)
			}
			checkSnapshot(t, w.l.Snapshot())
		}
	}
}

// checkSnapshot checks invariants 1 and 5 on what placement reads.
func checkSnapshot(t *testing.T, s *ledger.Snapshot) {
	t.Helper()
	for _, name := range s.Names() {
		ni := s.Node(name)
		for i, g := range ni.Node.GPUs {
			u := ni.Use[i]
			if u.UsedMiB > g.MemoryMiB || u.UsedMiB < 0 || u.Pods < 0 || (u.Exclusive && u.Pods != 1) {
				t.Fatalf("node %s GPU %d: use %+v, capacity %d", name, g.Index, u, g.MemoryMiB)
			}
			if ni.FreeMiB(i) < 0 || (!g.Healthy && (ni.FreeMiB(i) != 0 || ni.Idle(i))) {
				t.Fatalf("node %s GPU %d: unhealthy GPU offers room", name, g.Index)
			}
		}
	}
}

// TestReserveReleaseChangesNothing: reserving a fresh pod and releasing it
// leaves the ledger's view as it was.
func TestReserveReleaseChangesNothing(t *testing.T) {
	for seed := range uint64(20) {
		w := newWorld(seed + 1000)
		for range 100 {
			w.step()
		}
		// Rendering without the generation, which does move.
		render := func() string {
			s := w.l.Snapshot()
			fp := fingerprint(s)
			return fp[strings.Index(fp, "\n"):] + fmt.Sprint(s.Names())
		}
		for range 50 {
			before, allocs := render(), w.l.Allocations()
			uid := w.uid()
			if err := w.l.Reserve(w.randomAlloc(uid), w.now.Add(time.Hour)); err != nil {
				continue
			}
			w.l.Release(uid)
			if got := render(); got != before || !slices.EqualFunc(allocs, w.l.Allocations(), sameAlloc) {
				t.Fatalf("seed %d: reserve+release of %s changed the ledger:\n%s\nvs\n%s", seed, uid, before, got)
			}
		}
	}
}

func sameAlloc(a, b ledger.Allocation) bool {
	return a.PodUID == b.PodUID && a.State == b.State && slices.Equal(a.GPUs, b.GPUs) && a.Expires.Equal(b.Expires)
}

// TestConcurrentReserve: many goroutines reserve, commit, release and read
// snapshots on a few nodes at once; no GPU ever goes over capacity. Run it
// with -race.
func TestConcurrentReserve(t *testing.T) {
	l := ledger.New()
	nodes := []string{"c0", "c1", "c2"}
	for _, n := range nodes {
		l.UpsertNode(topology.FromSpec(topology.Spec{Name: n, Model: "H100", Count: 4, MemoryMiB: 16384, IslandSize: 2}))
	}
	const workers, perWorker = 16, 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[string]ledger.Allocation{} // successful reservations still held
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range perWorker {
				uid := fmt.Sprintf("w%d-%d", w, i)
				a := ledger.Allocation{PodUID: uid, Node: nodes[r.IntN(len(nodes))]}
				if r.IntN(3) == 0 {
					a.Whole = true
					a.GPUs = []ledger.Share{{Index: r.IntN(4), MemoryMiB: 16384}}
				} else {
					a.GPUs = []ledger.Share{{Index: r.IntN(4), MemoryMiB: ledger.MiB(2048 * (1 + r.IntN(4)))}}
				}
				if err := l.Reserve(a, expires); err == nil {
					mu.Lock()
					won[uid] = a
					mu.Unlock()
					if r.IntN(2) == 0 {
						_ = l.Commit(uid)
					}
				}
				if r.IntN(3) == 0 {
					victim := fmt.Sprintf("w%d-%d", w, r.IntN(i+1))
					if _, ok := l.Release(victim); ok {
						mu.Lock()
						delete(won, victim)
						mu.Unlock()
					}
				}
				if i%50 == 0 {
					checkSnapshot(t, l.Snapshot())
				}
			}
		})
	}
	// A reader that keeps checking snapshots while the writers run.
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				checkSnapshot(t, l.Snapshot())
			}
		}
	})
	wg.Wait()
	close(stop)
	reader.Wait()
	if errs := l.Check(); len(errs) > 0 {
		t.Fatalf("Check() = %v", errs)
	}
	// What the ledger holds is exactly what the workers won and kept, and
	// per GPU it fits.
	used := map[string]ledger.MiB{}
	for uid, a := range won {
		got, ok := l.Get(uid)
		if !ok || !slices.Equal(got.GPUs, a.GPUs) {
			t.Fatalf("pod %s: ledger has %+v, %v", uid, got, ok)
		}
		used[fmt.Sprintf("%s/%d", a.Node, a.GPUs[0].Index)] += a.GPUs[0].MemoryMiB
	}
	for k, v := range used {
		if v > 16384 {
			t.Errorf("GPU %s holds %d MiB", k, v)
		}
	}
	if n := len(l.Allocations()); n != len(won) {
		t.Errorf("ledger holds %d allocations, workers kept %d", n, len(won))
	}
}
