package placement

import (
	"cmp"
	"slices"

	"github.com/rota-sched/rota/pkg/ledger"
)

// Move is one pod a defragmentation plan moves: off the node the plan
// frees, to a node where it fits as it is.
type Move struct {
	Alloc *ledger.Allocation
	To    string
}

// DefragPlan frees room for a request on Node by moving Moves; Cost is the
// work the moves lose (DefragOptions.Cost).
type DefragPlan struct {
	Node  string
	Moves []Move
	Cost  float64
}

// DefragOptions bound a plan.
type DefragOptions struct {
	// Movable says whether an allocation may move: declared movable,
	// preemptible, past its minimum runtime (the caller's rules). A gang
	// moves only whole, and only when all its members are on the node the
	// plan frees and each is movable.
	Movable func(*ledger.Allocation) bool
	// Cost is the work moving an allocation loses (nil: none).
	Cost func(*ledger.Allocation) float64
	// MaxMoves bounds the pods a plan moves (0 moves nothing).
	MaxMoves int
	// MaxCandidates bounds the units (pods or gangs) considered per node,
	// the cheapest first (0: 12).
	MaxCandidates int
	// Target, when set, says which nodes r may go to (its node selector,
	// affinity and tolerations); nil: any.
	Target func(node string) bool
	// Allowed, when set, says which nodes a moved allocation's pod may go
	// to; nil: any.
	Allowed func(a *ledger.Allocation, node string) bool
}

// Defrag finds the plan with the fewest moves that makes r fit on one
// node of snap, when r fits on none now: movable pods leave that node for
// nodes where they fit as they are (first node by name that fits each,
// the largest first). Between plans of as many moves it takes the one that
// loses the least work, then the first node by name. It reports false
// when r already fits somewhere, or no plan within MaxMoves exists.
func Defrag(r Request, snap *ledger.Snapshot, o DefragOptions) (DefragPlan, bool) {
	if o.MaxMoves <= 0 || o.Movable == nil {
		return DefragPlan{}, false
	}
	if o.Cost == nil {
		o.Cost = func(*ledger.Allocation) float64 { return 0 }
	}
	if o.MaxCandidates <= 0 {
		o.MaxCandidates = 12
	}
	for _, name := range snap.Names() {
		if _, reason := Fit(r, snap.Node(name)); reason == nil {
			return DefragPlan{}, false
		}
	}
	gangs := map[string][]*ledger.Allocation{}
	for _, name := range snap.Names() {
		for _, a := range snap.Node(name).Allocs {
			if a.Gang != "" {
				gangs[a.Gang] = append(gangs[a.Gang], a)
			}
		}
	}
	var best DefragPlan
	found := false
	for _, name := range snap.Names() {
		if o.Target != nil && !o.Target(name) {
			continue
		}
		ni := snap.Node(name)
		units := movableUnits(ni, gangs, o)
		limit := o.MaxMoves
		if found {
			limit = len(best.Moves) // no plan with more moves can win
		}
		p, ok := defragNode(r, snap, ni, units, limit, o)
		if ok && (!found || len(p.Moves) < len(best.Moves) || (len(p.Moves) == len(best.Moves) && p.Cost < best.Cost)) {
			best, found = p, true
		}
		if found && len(best.Moves) == 1 && best.Cost <= 0 {
			break // nothing can do better, and later nodes lose the tie by name
		}
	}
	return best, found
}

// unit is what moves together: one pod, or a whole gang.
type unit struct {
	allocs []*ledger.Allocation
	cost   float64
}

func movableUnits(ni *ledger.NodeInfo, gangs map[string][]*ledger.Allocation, o DefragOptions) []unit {
	var out []unit
	seen := map[string]bool{}
	for _, a := range ni.Allocs {
		if a.State != ledger.Committed || len(a.GPUs) == 0 {
			continue
		}
		members := []*ledger.Allocation{a}
		if a.Gang != "" {
			if seen[a.Gang] {
				continue
			}
			seen[a.Gang] = true
			members = gangs[a.Gang]
		}
		u := unit{}
		ok := true
		for _, m := range members {
			ok = ok && m.Node == ni.Node.Name && m.State == ledger.Committed && o.Movable(m)
			u.cost += o.Cost(m)
		}
		if ok {
			u.allocs = slices.Clone(members)
			slices.SortFunc(u.allocs, func(x, y *ledger.Allocation) int { return cmp.Compare(x.PodUID, y.PodUID) })
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(x, y unit) int {
		if c := cmp.Compare(x.cost, y.cost); c != 0 {
			return c
		}
		if c := cmp.Compare(len(x.allocs), len(y.allocs)); c != 0 {
			return c
		}
		return cmp.Compare(x.allocs[0].PodUID, y.allocs[0].PodUID)
	})
	if len(out) > o.MaxCandidates {
		out = out[:o.MaxCandidates]
	}
	return out
}

// defragNode searches the sets of units on ni of at most limit pods, by
// increasing size, for the cheapest that frees r's room and can be placed
// elsewhere.
func defragNode(r Request, snap *ledger.Snapshot, ni *ledger.NodeInfo, units []unit, limit int, o DefragOptions) (DefragPlan, bool) {
	if !couldFree(r, ni, units) {
		return DefragPlan{}, false
	}
	// Most nodes cannot host r even with every candidate gone.
	var all []string
	for _, u := range units {
		for _, a := range u.allocs {
			all = append(all, a.PodUID)
		}
	}
	if len(all) == 0 {
		return DefragPlan{}, false
	}
	if _, reason := Fit(r, ni.Without(all...)); reason != nil {
		return DefragPlan{}, false
	}
	var best DefragPlan
	found := false
	var chosen []int
	var search func(from, pods int, cost float64)
	search = func(from, pods int, cost float64) {
		if found && (pods > len(best.Moves) || (pods == len(best.Moves) && cost >= best.Cost)) {
			return
		}
		if len(chosen) > 0 {
			var allocs []*ledger.Allocation
			for _, i := range chosen {
				allocs = append(allocs, units[i].allocs...)
			}
			if moves, ok := placeElsewhere(r, snap, ni, allocs, o.Allowed); ok {
				best, found = DefragPlan{Node: ni.Node.Name, Moves: moves, Cost: cost}, true
				return // a superset moves more
			}
		}
		for i := from; i < len(units); i++ {
			n := pods + len(units[i].allocs)
			if n > limit {
				continue
			}
			chosen = append(chosen, i)
			search(i+1, n, cost+units[i].cost)
			chosen = chosen[:len(chosen)-1]
		}
	}
	search(0, 0, 0)
	return best, found
}

// placeElsewhere checks that r fits on ni without allocs, and places each
// of allocs, the largest first, on the first other node (by name) it fits
// as it is and allowed permits; false when one fits nowhere.
func placeElsewhere(r Request, snap *ledger.Snapshot, ni *ledger.NodeInfo, allocs []*ledger.Allocation,
	allowed func(*ledger.Allocation, string) bool) ([]Move, bool) {
	uids := make([]string, len(allocs))
	for i, a := range allocs {
		uids[i] = a.PodUID
	}
	if _, reason := Fit(r, ni.Without(uids...)); reason != nil {
		return nil, false
	}
	order := slices.Clone(allocs)
	slices.SortStableFunc(order, func(x, y *ledger.Allocation) int { return cmp.Compare(held(y), held(x)) })
	cur := map[string]*ledger.NodeInfo{}
	var moves []Move
	for _, a := range order {
		req := requestOf(a, ni)
		placed := false
		for _, name := range snap.Names() {
			if name == ni.Node.Name || (allowed != nil && !allowed(a, name)) {
				continue
			}
			m := cur[name]
			if m == nil {
				m = snap.Node(name)
			}
			c, reason := Fit(req, m)
			if reason != nil {
				continue
			}
			c.Node = name
			moved := c.Allocation(req, m)
			cur[name] = m.With(&moved)
			moves = append(moves, Move{Alloc: a, To: name})
			placed = true
			break
		}
		if !placed {
			return nil, false
		}
	}
	return moves, true
}

// requestOf is the request an allocation's pod makes, to place it again:
// in the node pool it runs in.
func requestOf(a *ledger.Allocation, ni *ledger.NodeInfo) Request {
	r := Request{UID: a.PodUID, Pod: a.Pod, Priority: a.Priority, Preemptible: a.Preemptible,
		CPUMilli: a.CPUMilli, HostMemoryMiB: a.HostMemoryMiB, Pool: ni.Node.Pool}
	if a.Whole {
		r.GPUs = len(a.GPUs)
		return r
	}
	unit := ni.Node.MemoryUnitMiB
	if unit <= 0 {
		unit = 1
	}
	if len(a.GPUs) > 0 {
		r.MemoryUnits = int64((a.GPUs[0].MemoryMiB + unit - 1) / unit)
	}
	return r
}

// couldFree is a quick upper bound, without copying the node: whether
// moving every candidate could free r's GPUs (by count of GPUs that would
// be idle, or memory on one GPU). Fit on the node without them decides.
func couldFree(r Request, ni *ledger.NodeInfo, units []unit) bool {
	slot := map[int]int{}
	for s, g := range ni.Node.GPUs {
		slot[g.Index] = s
	}
	pods := make([]int, len(ni.Use))
	mem := make([]MiB, len(ni.Use))
	for _, u := range units {
		for _, a := range u.allocs {
			for _, sh := range a.GPUs {
				if s, ok := slot[sh.Index]; ok {
					pods[s]++
					mem[s] += sh.MemoryMiB
				}
			}
		}
	}
	need := r.NeedMiB(ni.Node.MemoryUnitMiB)
	idle := 0
	for s, g := range ni.Node.GPUs {
		if !g.Healthy || !r.modelOK(g.Model) || g.LeakedMiB > 0 {
			continue
		}
		u := ni.Use[s]
		freed := u.Pods == pods[s] // every allocation on it would go
		if freed {
			idle++
		}
		if !r.Whole() && g.MemoryMiB >= need && (freed || (!u.Exclusive && g.MemoryMiB-u.UsedMiB+mem[s] >= need)) {
			return true
		}
	}
	return r.Whole() && idle >= r.GPUs
}
