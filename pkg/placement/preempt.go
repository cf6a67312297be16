package placement

import (
	"cmp"
	"slices"

	"github.com/rota-sched/rota/pkg/ledger"
)

// Victims picks the pods to evict from node ni so that r fits there: only
// allocations eligible says may go, lowest priority first, then idle pods
// (ledger.Allocation.Idle), then the smallest holdings. For a memory share it frees one GPU (the GPU whose victims are
// fewest and least important); for whole GPUs it evicts greedily and then
// returns any victim whose eviction turned out unnecessary. It reports false
// when no eligible set makes room.
func Victims(r Request, ni *ledger.NodeInfo, eligible func(*ledger.Allocation) bool) ([]*ledger.Allocation, bool) {
	return VictimsByCost(r, ni, eligible, nil)
}

// VictimsByCost is Victims where cost, the work stopping an allocation
// loses (pkg/stopcost; nil: none), breaks the ties Victims' rules leave:
// between allocations of equal priority, idleness and size the cheaper
// goes first, and between share victim sets equal by those rules the
// cheaper set.
func VictimsByCost(r Request, ni *ledger.NodeInfo, eligible func(*ledger.Allocation) bool, cost func(*ledger.Allocation) float64) ([]*ledger.Allocation, bool) {
	if cost == nil {
		cost = func(*ledger.Allocation) float64 { return 0 }
	}
	if _, reason := Fit(r, ni); reason == nil {
		return nil, true
	}
	var cands []*ledger.Allocation
	for _, a := range ni.Allocs {
		if eligible(a) {
			cands = append(cands, a)
		}
	}
	slices.SortFunc(cands, victimOrder(cost))
	if !r.Whole() && !r.GPUFree() {
		// Free one GPU; when the pod still does not fit (CPU or host memory
		// on nodes that track them), fall back to the general search.
		if set, ok := shareVictims(r, ni, cands, cost); ok {
			if _, reason := Fit(r, without(ni, set)); reason == nil {
				return set, true
			}
		}
	}
	var chosen []*ledger.Allocation
	cur := ni
	for _, a := range cands {
		chosen = append(chosen, a)
		cur = cur.Without(a.PodUID)
		if _, reason := Fit(r, cur); reason == nil {
			break
		}
	}
	if _, reason := Fit(r, cur); reason != nil {
		return nil, false
	}
	// Give back victims that were not needed, most important first.
	for i := len(chosen) - 1; i >= 0; i-- {
		rest := slices.Delete(slices.Clone(chosen), i, i+1)
		if _, reason := Fit(r, without(ni, rest)); reason == nil {
			chosen = rest
		}
	}
	return chosen, true
}

func without(ni *ledger.NodeInfo, as []*ledger.Allocation) *ledger.NodeInfo {
	uids := make([]string, len(as))
	for i, a := range as {
		uids[i] = a.PodUID
	}
	return ni.Without(uids...)
}

func victimOrder(cost func(*ledger.Allocation) float64) func(a, b *ledger.Allocation) int {
	return func(a, b *ledger.Allocation) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		if a.Idle != b.Idle { // idle pods first among equal priority
			if a.Idle {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(held(a), held(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(cost(a), cost(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.PodUID, b.PodUID)
	}
}

func held(a *ledger.Allocation) MiB {
	var s MiB
	for _, g := range a.GPUs {
		s += g.MemoryMiB
	}
	return s
}

// heldOn is the memory a holds on the GPU with index idx.
func heldOn(a *ledger.Allocation, idx int) MiB {
	for _, sh := range a.GPUs {
		if sh.Index == idx {
			return sh.MemoryMiB
		}
	}
	return 0
}

// shareVictims frees enough memory on one GPU.
func shareVictims(r Request, ni *ledger.NodeInfo, cands []*ledger.Allocation, cost func(*ledger.Allocation) float64) ([]*ledger.Allocation, bool) {
	need := r.NeedMiB(ni.Node.MemoryUnitMiB)
	var best []*ledger.Allocation
	found := false
	for s, g := range ni.Node.GPUs {
		if !g.Healthy || !r.modelOK(g.Model) || g.MemoryMiB < need {
			continue
		}
		free := g.MemoryMiB - ni.Use[s].UsedMiB
		// A GPU owned whole has no room until its owner goes, whatever
		// memory the owner's assignment names.
		owned := ni.Use[s].Exclusive
		var set []*ledger.Allocation
		for _, a := range cands {
			if free >= need && !owned {
				break
			}
			if m := heldOn(a, g.Index); m > 0 {
				set = append(set, a)
				free += m
				if a.Whole {
					owned = false
				}
			}
		}
		// Pods on this GPU that may not be evicted keep their memory.
		if free < need || owned {
			continue
		}
		// Give back victims that were not needed, most important first
		// (a small low-priority pod taken early may be unnecessary once a
		// larger one is evicted).
		for i := len(set) - 1; i >= 0; i-- {
			if m := heldOn(set[i], g.Index); !set[i].Whole && free-m >= need {
				free -= m
				set = slices.Delete(set, i, i+1)
			}
		}
		if !found || better(set, best, cost) {
			best, found = set, true
		}
	}
	return best, found
}

// better prefers fewer victims, then a lower highest priority, then fewer
// busy (not idle) victims, then less lost work.
func better(a, b []*ledger.Allocation, cost func(*ledger.Allocation) float64) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	if pa, pb := maxPriority(a), maxPriority(b); pa != pb {
		return pa < pb
	}
	if ba, bb := busy(a), busy(b); ba != bb {
		return ba < bb
	}
	return total(a, cost) < total(b, cost)
}

func total(as []*ledger.Allocation, cost func(*ledger.Allocation) float64) float64 {
	s := 0.0
	for _, a := range as {
		s += cost(a)
	}
	return s
}

// busy counts the victims not marked idle.
func busy(as []*ledger.Allocation) int {
	n := 0
	for _, a := range as {
		if !a.Idle {
			n++
		}
	}
	return n
}

func maxPriority(as []*ledger.Allocation) int32 {
	var m int32 = -1 << 31
	for _, a := range as {
		m = max(m, a.Priority)
	}
	return m
}
