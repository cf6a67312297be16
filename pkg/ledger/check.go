package ledger

import (
	"fmt"
	"slices"
	"sort"
)

// Check verifies DESIGN.md invariants 1 and 2 over the whole ledger and
// returns one error per violation (nil when all hold). Tests call it after
// every step; the extender exports its result as a metric.
//
//  1. On every GPU the assigned memory is at most its capacity, and a GPU
//     owned whole carries no other allocation. The cached per-GPU use must
//     equal the use recomputed from the allocations.
//  2. A gang that holds any reservation holds one for every member: it is
//     never partly reserved.
//
// It also checks that the cached snapshot, when there is one, shows every
// node as the ledger holds it (snapshots are patched, not rebuilt, between
// changes).
func (l *Ledger) Check() []error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var errs []error
	names := make([]string, 0, len(l.nodes))
	for n := range l.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	if s := l.snap; s != nil {
		if !slices.Equal(s.Names(), names) {
			errs = append(errs, fmt.Errorf("snapshot: nodes %d, ledger %d: the snapshot's node list is stale", s.Len(), len(names)))
		} else {
			for i, name := range names {
				if s.infos[i] != l.nodes[name] {
					errs = append(errs, fmt.Errorf("snapshot: node %s is stale", name))
				}
			}
		}
	}
	// Allocations by node, in one walk: a check is linear in nodes plus
	// allocations, and holds the read lock only that long.
	onNode := make(map[string][]*Allocation, len(l.nodes))
	for _, a := range l.allocs {
		onNode[a.Node] = append(onNode[a.Node], a)
	}
	for _, name := range names {
		ni := l.nodes[name]
		want := make([]GPUUse, len(ni.Node.GPUs))
		for _, a := range onNode[name] {
			if ni.Allocs[a.PodUID] != a {
				errs = append(errs, fmt.Errorf("node %s: allocation of %s missing from the node view", name, nameOr(a)))
			}
			for _, g := range a.GPUs {
				s := ni.Node.Slot(g.Index)
				if s < 0 {
					errs = append(errs, fmt.Errorf("node %s: %s holds GPU %d that the node does not have", name, nameOr(a), g.Index))
					continue
				}
				want[s].UsedMiB += g.MemoryMiB
				want[s].Pods++
				if a.Whole {
					want[s].Exclusive = true
				}
			}
		}
		if len(ni.Allocs) != len(onNode[name]) {
			errs = append(errs, fmt.Errorf("node %s: node view lists %d allocations, ledger %d", name, len(ni.Allocs), len(onNode[name])))
		}
		for s, w := range want {
			g := ni.Node.GPUs[s]
			if w.UsedMiB > g.MemoryMiB {
				errs = append(errs, fmt.Errorf("node %s GPU %d: %s assigned, capacity %s", name, g.Index, w.UsedMiB, g.MemoryMiB))
			}
			if w.Exclusive && w.Pods > 1 {
				errs = append(errs, fmt.Errorf("node %s GPU %d: owned whole but held by %d pods", name, g.Index, w.Pods))
			}
			if w != ni.Use[s] {
				errs = append(errs, fmt.Errorf("node %s GPU %d: cached use %+v, recomputed %+v", name, g.Index, ni.Use[s], w))
			}
		}
	}
	// A claim holds at most what it asks for, only GPUs that are healthy,
	// of its models and free at its start, and the view other pods see is
	// the node's own with those GPUs owned whole.
	for _, name := range names {
		ni := l.nodes[name]
		if ni.Claim != l.claims[name] {
			errs = append(errs, fmt.Errorf("node %s: the node view's claim is not the ledger's", name))
			continue
		}
		c := ni.Claim
		if c == nil {
			continue
		}
		if len(ni.heldSlots) > c.GPUs {
			errs = append(errs, fmt.Errorf("node %s: claim of %s holds %d GPUs, asks for %d", name, c.Job, len(ni.heldSlots), c.GPUs))
		}
		for _, s := range ni.heldSlots {
			g := ni.Node.GPUs[s]
			if !g.Healthy || !c.modelOK(g.Model) {
				errs = append(errs, fmt.Errorf("node %s: claim of %s holds GPU %d, unhealthy or of another model", name, c.Job, g.Index))
			}
			for _, a := range ni.Allocs {
				if a.usesSlot(ni, s) && (a.Ends.IsZero() || c.Start.IsZero() || a.Ends.After(c.Start)) {
					errs = append(errs, fmt.Errorf("node %s: claim of %s holds GPU %d, which %s keeps past the start", name, c.Job, g.Index, nameOr(a)))
				}
			}
		}
		v := ni.held
		if v == nil || v.Claim != c || len(v.Use) != len(ni.Use) {
			errs = append(errs, fmt.Errorf("node %s: claim of %s has no consistent held view", name, c.Job))
			continue
		}
		for s := range ni.Use {
			want := ni.Use[s]
			if slices.Contains(ni.heldSlots, s) {
				want.Exclusive = true
			}
			if v.Use[s] != want {
				errs = append(errs, fmt.Errorf("node %s GPU slot %d: held view %+v, want %+v", name, s, v.Use[s], want))
			}
		}
	}
	// Gang membership counts allocations and orphans (committed pods whose
	// node is not known): both are pods that hold GPUs.
	type gangCount struct{ size, held, reserved int }
	gangs := map[string]*gangCount{}
	count := func(a *Allocation) {
		if a.Gang == "" {
			return
		}
		gc := gangs[a.Gang]
		if gc == nil {
			gc = &gangCount{}
			gangs[a.Gang] = gc
		}
		gc.size = max(gc.size, a.GangSize)
		gc.held++
		if a.State == Reserved {
			gc.reserved++
		}
	}
	for _, a := range l.allocs {
		count(a)
	}
	for uid, a := range l.orphans {
		count(a)
		if _, ok := l.allocs[uid]; ok {
			errs = append(errs, fmt.Errorf("pod %s is both allocated and orphaned", nameOr(a)))
		}
		if a.State != Committed {
			errs = append(errs, fmt.Errorf("orphan %s is not committed", nameOr(a)))
		}
	}
	keys := make([]string, 0, len(gangs))
	for k := range gangs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		gc := gangs[k]
		if gc.reserved > 0 && gc.held < gc.size {
			errs = append(errs, fmt.Errorf("gang %s: partly reserved, %d of %d members hold GPUs", k, gc.held, gc.size))
		}
		if len(l.gangs[k]) != gc.held {
			errs = append(errs, fmt.Errorf("gang %s: index lists %d members, ledger %d", k, len(l.gangs[k]), gc.held))
		}
	}
	for k := range l.gangs {
		if gangs[k] == nil {
			errs = append(errs, fmt.Errorf("gang %s: index lists members the ledger does not hold", k))
		}
	}
	return errs
}
