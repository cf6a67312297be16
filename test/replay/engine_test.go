//go:build replay

package replay

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/sim"
)

// engine is the simulator's placement loop (pkg/sim: placement.Fit on every
// node, the policy's score, the best wins, ties to the lowest name) on its
// own ledger, with the per-shape memo pkg/sim uses. The replay runs it twice:
// alone, as the reference (it must reproduce sim.Run), and as a mirror of
// the real cluster (each real placement is applied to it) to judge every
// real decision against what the engine would have chosen in that state.
type engine struct {
	l      *ledger.Ledger
	names  []string
	policy placement.Policy
	memo   map[string][]memo
}

type memo struct {
	ni     *ledger.NodeInfo
	ok     bool
	choice placement.Choice
	score  int64
}

func newEngine(nodes []sim.Node, policy placement.Policy) *engine {
	l := ledger.New()
	for _, n := range sim.Cluster(nodes) {
		l.UpsertNode(n)
	}
	return &engine{l: l, names: l.Snapshot().Names(), policy: policy, memo: map[string][]memo{}}
}

func shapeKey(r placement.Request) string {
	return fmt.Sprintf("%d/%d/%d/%d/%s", r.GPUs, r.MemoryUnits, r.CPUMilli, r.HostMemoryMiB, strings.Join(r.Models, "|"))
}

// evaluate fits and scores r on every node (memoised).
func (e *engine) evaluate(r placement.Request) []memo {
	key := shapeKey(r)
	es := e.memo[key]
	if es == nil {
		es = make([]memo, len(e.names))
		e.memo[key] = es
	}
	snap := e.l.Snapshot()
	for i, name := range e.names {
		ni := snap.Node(name)
		if es[i].ni == ni {
			continue
		}
		c, reason := placement.Fit(r, ni)
		es[i] = memo{ni: ni, ok: reason == nil, choice: c}
		if es[i].ok {
			es[i].score = e.policy.Score(r, ni, c)
		}
	}
	return es
}

// best is the engine's choice: index (-1: fits nowhere), its score and how
// many nodes share that score.
func best(es []memo) (idx int, score int64, ties int) {
	idx = -1
	for i, m := range es {
		switch {
		case !m.ok:
		case idx < 0 || m.score > score:
			idx, score, ties = i, m.score, 1
		case m.score == score:
			ties++
		}
	}
	return idx, score, ties
}

func (e *engine) index(name string) int {
	for i, n := range e.names {
		if n == name {
			return i
		}
	}
	return -1
}

// commit records r on node index i with the choice placement.Fit makes there.
func (e *engine) commit(r placement.Request, i int) error {
	ni := e.l.Snapshot().Node(e.names[i])
	c, reason := placement.Fit(r, ni)
	if reason != nil {
		return fmt.Errorf("%s does not fit on %s: %v", r.Pod, e.names[i], reason)
	}
	if err := e.l.Reserve(c.Allocation(r, ni), time.Time{}); err != nil {
		return err
	}
	return e.l.Commit(r.UID)
}

// curve accumulates the protocol's GPU allocation ratio at an arrived-demand
// percentage (pkg/sim's Point.Alloc): the mean over every arrival whose
// arrived request, as a percentage of capacity, rounds to x.
type curve struct {
	capMilli, arrived, alloc int64
	sum                      map[int]float64
	n                        map[int]int
}

func newCurve(capMilli int64) *curve {
	return &curve{capMilli: capMilli, sum: map[int]float64{}, n: map[int]int{}}
}

func (c *curve) add(p sim.Pod, placed bool) {
	c.arrived += p.GPUMilliTotal()
	if placed {
		c.alloc += p.GPUMilliTotal()
	}
	x := int(math.Round(100 * float64(c.arrived) / float64(c.capMilli)))
	c.sum[x] += 100 * float64(c.alloc) / float64(c.capMilli)
	c.n[x]++
}

// at returns the mean allocation ratio at x percent, and false when no
// arrival landed there.
func (c *curve) at(x int) (float64, bool) {
	if c.n[x] == 0 {
		return 0, false
	}
	return c.sum[x] / float64(c.n[x]), true
}

// last is the allocation ratio after the last arrival so far.
func (c *curve) last() float64 { return 100 * float64(c.alloc) / float64(c.capMilli) }
