package sim

import (
	"fmt"
	"math"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// mover makes room for a pod that fits no node by moving placed pods
// (Config.MoveBudget): placement.Defrag finds the fewest moves off one
// node, and they are applied through the ledger as a real move is: the
// pod's allocation is released, then reserved and committed on its new
// node with Fit's choice there.
type mover struct {
	budget        float64
	perPod        int
	maxCandidates int
	// reqs is every arrived pod's request by UID, to place it again.
	reqs map[string]placement.Request
	pos  map[string]int
	// shapes are the shapes of placed pods (shapeKey), with where each
	// fits now: a pod whose shape fits no other node cannot move (a plan
	// only fills the other nodes), so it is no candidate.
	shapes  map[string]*shapeFit
	shapeOf map[string]*shapeFit
}

// shapeFit is where one request shape fits, memoised per node while the
// node's ledger entry is the same.
type shapeFit struct {
	req    placement.Request
	placed int
	nis    []*ledger.NodeInfo
	ok     []bool
	// fits counts the nodes it fits now; first is one of them.
	fits  int
	first string
}

func newMover(cfg Config, names []string) *mover {
	m := &mover{budget: cfg.MoveBudget, perPod: cfg.MaxMovesPerPod, maxCandidates: cfg.MaxCandidates,
		reqs: map[string]placement.Request{}, pos: make(map[string]int, len(names)),
		shapes: map[string]*shapeFit{}, shapeOf: map[string]*shapeFit{}}
	if m.perPod <= 0 {
		m.perPod = DefaultMaxMovesPerPod
	}
	for i, n := range names {
		m.pos[n] = i
	}
	return m
}

// arrived records a pod's request, placed whether it was placed.
func (m *mover) arrived(r placement.Request, placed bool) {
	m.reqs[r.UID] = r
	if !placed || len(r.Models) > 0 || (r.GPUs == 0 && r.MemoryUnits == 0) {
		return
	}
	key := shapeKey(r)
	sf := m.shapes[key]
	if sf == nil {
		sf = &shapeFit{req: r}
		m.shapes[key] = sf
	}
	sf.placed++
	m.shapeOf[r.UID] = sf
}

// refresh updates where each placed shape fits in snap; it reports whether
// some shape fits anywhere (else nothing can move).
func (m *mover) refresh(snap *ledger.Snapshot) bool {
	names := snap.Names()
	any := false
	for _, sf := range m.shapes {
		if sf.nis == nil {
			sf.nis, sf.ok = make([]*ledger.NodeInfo, len(names)), make([]bool, len(names))
		}
		sf.fits, sf.first = 0, ""
		for i, name := range names {
			ni := snap.Node(name)
			if sf.nis[i] != ni {
				_, reason := placement.Fit(sf.req, ni)
				sf.nis[i], sf.ok[i] = ni, reason == nil
			}
			if sf.ok[i] {
				if sf.fits == 0 {
					sf.first = name
				}
				sf.fits++
			}
		}
		any = any || sf.fits > 0
	}
	return any
}

// movable: a placed pod with GPUs may move when its shape fits some other
// node as the cluster is, except one that accepts only some GPU models (a
// plan places moved pods by their size alone) and gang members.
func (m *mover) movable(a *ledger.Allocation) bool {
	sf := m.shapeOf[a.PodUID]
	return sf != nil && a.Gang == "" && (sf.fits > 1 || (sf.fits == 1 && sf.first != a.Node))
}

// budgetLeft is how many pods may still move, after arrived pods and moves
// made so far.
func (m *mover) budgetLeft(arrived, moves int) int {
	return int(math.Floor(m.budget*float64(arrived)+1e-9)) - moves
}

// tryMoves makes room for r, which fits no node of snap, when the budget
// (after arrived pods and moves made so far) allows a plan and the
// cluster's free GPU capacity (freeMilli) could hold r at all. It returns
// the pods moved and the indexes of the nodes that changed; 0 when nothing
// moved.
func (m *mover) tryMoves(l *ledger.Ledger, r placement.Request, snap *ledger.Snapshot, needMilli, freeMilli int64, arrived, moves int) (int, []int, error) {
	left := m.budgetLeft(arrived, moves)
	n := min(m.perPod, left)
	if n <= 0 || needMilli == 0 || needMilli > freeMilli || !m.refresh(snap) {
		return 0, nil, nil
	}
	plan, ok := placement.Defrag(r, snap, placement.DefragOptions{Movable: m.movable, MaxMoves: n, MaxCandidates: m.maxCandidates})
	if !ok || len(plan.Moves) == 0 {
		return 0, nil, nil
	}
	if len(plan.Moves) > n {
		return 0, nil, fmt.Errorf("move plan of %d pods exceeds its bound %d", len(plan.Moves), n)
	}
	touched := []int{m.pos[plan.Node]}
	for _, mv := range plan.Moves {
		if _, ok := l.Release(mv.Alloc.PodUID); !ok {
			return 0, nil, fmt.Errorf("move %s: not in the ledger", mv.Alloc.PodUID)
		}
	}
	// In the plan's order: each pod goes where the plan put it, onto the
	// node as the moves before it left it.
	for _, mv := range plan.Moves {
		req := m.reqs[mv.Alloc.PodUID]
		ni := l.Snapshot().Node(mv.To)
		c, reason := placement.Fit(req, ni)
		if reason != nil {
			return 0, nil, fmt.Errorf("move %s to %s: %s", req.UID, mv.To, reason)
		}
		c.Node = mv.To
		if err := commit(l, req, ni, c); err != nil {
			return 0, nil, fmt.Errorf("move %s: %w", req.UID, err)
		}
		touched = append(touched, m.pos[mv.To])
	}
	return len(plan.Moves), touched, nil
}
