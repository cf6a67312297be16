package room

import (
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// PlanGang plans a gang's members that still need room and reserves one
// slot each until expires: the smallest topology tier among candidates
// that holds them all (placement.PlanGang). boundOn are the nodes of
// members already bound (a plan of a previous leader, partly carried out
// before it died): the narrowest group that holds every one of them is
// tried first, so that a takeover does not scatter a gang. size is the
// gang's whole size, bound members included. Call it with the planning
// lock held (Lock); every gang plan, the queue's and the gang planner's,
// is stamped and reserved here. reason says why the gang does not fit; err that the
// reservation failed (another plan took a GPU first: plan again).
func (e *Planner) PlanGang(g placement.Gang, snap *ledger.Snapshot, candidates, boundOn []string, size int,
	expires time.Time) (placement.GangPlan, *placement.Reason, error) {
	plan, reason := e.nearest(g, snap, candidates, boundOn)
	if reason != nil {
		return plan, reason, nil
	}
	for i := range plan.Allocations {
		a := &plan.Allocations[i]
		a.Priority, a.Preemptible = g.Member.Priority, g.Member.Preemptible
		a.Gang, a.GangSize = g.Name, size
	}
	if err := e.o.Ledger.ReserveAll(plan.Allocations, expires); err != nil {
		return plan, nil, err
	}
	for i := range plan.Allocations {
		plan.Allocations[i].State, plan.Allocations[i].Expires = ledger.Reserved, expires
	}
	return plan, nil, nil
}

// nearest runs placement.PlanGang near the bound members first (their node,
// then each tier), then over every candidate.
func (e *Planner) nearest(g placement.Gang, snap *ledger.Snapshot, candidates, boundOn []string) (placement.GangPlan, *placement.Reason) {
	if len(boundOn) > 0 {
		for level := placement.TierNode; level < e.o.Tiers; level++ {
			near := nearBound(snap, candidates, boundOn, level)
			if near == nil {
				continue
			}
			if plan, reason := placement.PlanGang(g, snap, near, e.o.Tiers); reason == nil {
				return plan, nil
			}
		}
	}
	return placement.PlanGang(g, snap, candidates, e.o.Tiers)
}

// nearBound returns the candidates in the group of the given level
// (placement.TierNode: the node itself) that holds every node in boundOn,
// or nil when they are not in one group of that level.
func nearBound(snap *ledger.Snapshot, candidates, boundOn []string, level int) []string {
	group := func(node string) string {
		if level == placement.TierNode {
			return node
		}
		ni := snap.Node(node)
		if ni == nil {
			return ""
		}
		return ni.Node.Tier(level)
	}
	want := group(boundOn[0])
	if want == "" {
		return nil
	}
	for _, n := range boundOn[1:] {
		if group(n) != want {
			return nil
		}
	}
	var out []string
	for _, n := range candidates {
		if group(n) == want {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
