package placement

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/rota-sched/rota/pkg/ledger"
)

// Gang is an all-or-nothing group of identical members.
type Gang struct {
	// Name is the gang key ("namespace/name").
	Name string
	// Member is the request of every member (its UID and Pod are ignored).
	Member Request
	// UIDs and Pods identify the members, one entry each.
	UIDs []string
	Pods []string
}

// Size is the member count.
func (g Gang) Size() int { return len(g.UIDs) }

// Tier levels of a plan.
const (
	TierNode = -1
)

// GangPlan places every member of a gang.
type GangPlan struct {
	// Level is TierNode, a tier index (0 = narrowest label), or len(tiers)
	// for the whole cluster.
	Level int
	// Where names the node, the tier value, or "cluster".
	Where string
	// Allocations has one entry per member, in member order.
	Allocations []ledger.Allocation
}

// Nodes returns the distinct nodes of the plan, sorted.
func (p GangPlan) Nodes() []string {
	var out []string
	for _, a := range p.Allocations {
		if !slices.Contains(out, a.Node) {
			out = append(out, a.Node)
		}
	}
	slices.Sort(out)
	return out
}

// maxSlots bounds one node's member count (GPU-free members fit any number).
const maxSlots = 1 << 20

type nodeSlots struct {
	name  string
	slots int
	ni    *ledger.NodeInfo
}

// Slots counts how many pods of request r node ni can hold at once, up to
// limit, without placing them (in the view r sees: see ledger.NodeInfo.For).
func Slots(r Request, ni *ledger.NodeInfo, limit int) int { return slotsFor(r, ni, limit) }

// slotsFor counts how many members of request r node ni can hold at once,
// up to limit, without placing them.
func slotsFor(r Request, ni *ledger.NodeInfo, limit int) int {
	ni = ni.For(r.Job, r.Ends) // a reservation's held room counts only for whom it is open to
	if _, reason := Fit(r, ni); reason != nil {
		return 0
	}
	n := ni.Node
	c := 0
	switch {
	case r.Whole():
		idle := 0
		for s, g := range n.GPUs {
			if r.modelOK(g.Model) && ni.Idle(s) {
				idle++
			}
		}
		c = idle / r.GPUs
	case r.MemoryUnits > 0:
		need := r.NeedMiB(n.MemoryUnitMiB)
		for s, g := range n.GPUs {
			if r.modelOK(g.Model) && g.Healthy {
				c += int(ni.FreeMiB(s) / need)
			}
		}
	default:
		c = limit
	}
	if r.CPUMilli > 0 && n.CPUMilli > 0 {
		c = min(c, int(ni.FreeCPUMilli()/r.CPUMilli))
	}
	if r.HostMemoryMiB > 0 && n.HostMemoryMiB > 0 {
		c = min(c, int(ni.FreeHostMemoryMiB()/r.HostMemoryMiB))
	}
	return min(c, limit)
}

// PlanGang places all members of g in the smallest topology tier that holds
// them: one node, then one group of each tier label (narrowest first, e.g.
// leaf switch, then zone), then the whole cluster. Within a level it picks
// the group whose capacity for the members is the smallest that suffices
// (keeping big groups whole) and fills its nodes that hold the most members
// first (fewest nodes). candidates limits the nodes (nil: all).
//
// When the gang does not fit, the reason says how many members fit and
// what the largest group holds; nothing is reserved.
func PlanGang(g Gang, snap *ledger.Snapshot, candidates []string, tiers int) (GangPlan, *Reason) {
	size := g.Size()
	if size == 0 {
		return GangPlan{}, &Reason{Code: GangNoFit, GPU: -1, Text: fmt.Sprintf("gang %s has no members", g.Name)}
	}
	if candidates == nil {
		candidates = snap.Names()
	}
	all := make([]nodeSlots, 0, len(candidates))
	total := 0
	for _, name := range candidates {
		ni := snap.Node(name)
		if ni == nil {
			continue
		}
		// Count the node's full capacity for members (not capped at the
		// gang size), so that "tightest" can tell a node or group that
		// holds exactly the gang from a larger one.
		if s := slotsFor(g.Member, ni, maxSlots); s > 0 {
			all = append(all, nodeSlots{name: name, slots: s, ni: ni})
			total += s
		}
	}
	// Most slots first, then name: fills the fewest nodes, deterministically.
	slices.SortFunc(all, func(a, b nodeSlots) int {
		if c := cmp.Compare(b.slots, a.slots); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	// A name listed twice would let two members take the same GPUs.
	all = slices.CompactFunc(all, func(a, b nodeSlots) bool { return a.name == b.name })
	total = 0
	for _, ns := range all {
		total += ns.slots
	}
	// Level: one node — the tightest node that holds all.
	best := -1
	for i, ns := range all {
		if ns.slots >= size && (best < 0 || ns.slots < all[best].slots ||
			(ns.slots == all[best].slots && ns.name < all[best].name)) {
			best = i
		}
	}
	if best >= 0 {
		return fill(g, TierNode, all[best].name, all[best:best+1])
	}
	bestGroup := map[int]string{}
	bestHeld := map[int]int{}
	for level := 0; level < tiers; level++ {
		groups := map[string]int{}
		for _, ns := range all {
			if v := ns.ni.Node.Tier(level); v != "" {
				groups[v] += ns.slots
			}
		}
		pick, pickSlots := "", 0
		for v, s := range groups {
			if s > bestHeld[level] || (s == bestHeld[level] && v < bestGroup[level]) {
				bestGroup[level], bestHeld[level] = v, s
			}
			if s >= size && (pick == "" || s < pickSlots || (s == pickSlots && v < pick)) {
				pick, pickSlots = v, s
			}
		}
		if pick != "" {
			var members []nodeSlots
			for _, ns := range all {
				if ns.ni.Node.Tier(level) == pick {
					members = append(members, ns)
				}
			}
			return fill(g, level, pick, members)
		}
	}
	if total >= size {
		return fill(g, tiers, "cluster", all)
	}
	each := g.Member.Describe(1024)
	if len(all) > 0 {
		each = g.Member.Describe(all[0].ni.Node.MemoryUnitMiB)
	}
	text := fmt.Sprintf("gang %s: %d of %d members fit in the cluster (each needs %s); %d more must fit",
		g.Name, min(total, size), size, each, size-min(total, size))
	if len(all) > 0 {
		text += fmt.Sprintf("; the best node holds %d", all[0].slots)
	}
	for level := 0; level < tiers; level++ {
		if bestGroup[level] != "" {
			text += fmt.Sprintf(", the best tier-%d group %q holds %d", level, bestGroup[level], bestHeld[level])
		}
	}
	return GangPlan{}, &Reason{Code: GangNoFit, GPU: -1, NeedGPUs: size, FreeGPUs: min(total, size), Text: text}
}

// fill places the members on the given nodes, in order, using Fit on a
// scratch copy of each node so members on one node get distinct GPUs.
func fill(g Gang, level int, where string, nodes []nodeSlots) (GangPlan, *Reason) {
	plan := GangPlan{Level: level, Where: where}
	m := 0
	for _, ns := range nodes {
		ni := ns.ni
		for k := 0; k < ns.slots && m < g.Size(); k++ {
			r := g.Member
			r.UID, r.Pod = g.UIDs[m], ""
			if m < len(g.Pods) {
				r.Pod = g.Pods[m]
			}
			c, reason := Fit(r, ni)
			if reason != nil {
				break
			}
			a := c.Allocation(r, ni)
			a.Gang, a.GangSize = g.Name, g.Size()
			plan.Allocations = append(plan.Allocations, a)
			ni = ni.With(&a)
			m++
		}
	}
	if m < g.Size() {
		return GangPlan{}, &Reason{Code: GangNoFit, GPU: -1, Text: fmt.Sprintf(
			"gang %s: only %d of %d members could be placed in %s", g.Name, m, g.Size(), where)}
	}
	return plan, nil
}
