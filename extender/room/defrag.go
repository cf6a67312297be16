package room

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// Moves bound a defragmentation plan (placement.Defrag) for a queued pod.
type Moves struct {
	// Mover returns the pod of an allocation that may move (nil: it may
	// not): declared movable, preemptible, past its minimum runtime.
	Mover func(*ledger.Allocation) *corev1.Pod
	// Cost is the work moving an allocation loses.
	Cost func(*ledger.Allocation) float64
	// Max bounds the pods the plan moves.
	Max int
}

// Defrag plans the fewest moves of movable pods that make room for a
// queued single pod that fits nowhere now (placement.Defrag): only on a
// node the pod may go to, and each moved pod only to a node it may go to.
// With a plan it returns the claim that holds the freed room for the pod
// (ledger.Claim, for the queue to keep while the moved pods leave).
func (e *Planner) Defrag(pod *corev1.Pod, scope Scope, m Moves) (placement.DefragPlan, ledger.Claim, bool) {
	req, err := e.o.Request(pod)
	if err != nil || m.Mover == nil || m.Max <= 0 {
		return placement.DefragPlan{}, ledger.Claim{}, false
	}
	scope.narrow(&req)
	e.mu.Lock()
	snap := e.o.Ledger.Snapshot()
	e.mu.Unlock()
	target := map[string]bool{}
	for _, n := range e.eligible(pod, snap) {
		target[n] = true
	}
	moved := map[string]*corev1.Pod{}
	matches := map[string]nodeMatch{}
	o := placement.DefragOptions{MaxMoves: m.Max, Cost: m.Cost,
		Target: func(node string) bool { return target[node] },
		Movable: func(a *ledger.Allocation) bool {
			p := m.Mover(a)
			if p != nil {
				moved[a.PodUID], matches[a.PodUID] = p, newNodeMatch(p)
			}
			return p != nil
		},
		Allowed: func(a *ledger.Allocation, name string) bool {
			p := moved[a.PodUID]
			node, ok := e.o.Node(name)
			return p != nil && ok && mayGo(p, matches[a.PodUID], node)
		}}
	plan, ok := placement.Defrag(req, snap, o)
	if !ok {
		return plan, ledger.Claim{}, false
	}
	return plan, req.ClaimOn(plan.Node), true
}

// RoomWithout says whether pods (a single pod, or a gang's members) would
// find room, on nodes they may go to, once the given pods' GPUs are free,
// and returns the claims that hold that room for them (ledger.Claim, one
// per node): reclaim evicts only where the eviction makes room for what it
// serves, and holds the room while the evicted pods stop. With no room it
// returns no claims and says why.
func (e *Planner) RoomWithout(pods []*corev1.Pod, scope Scope, without []string) ([]ledger.Claim, string) {
	if len(pods) == 0 {
		return nil, "nothing to place"
	}
	req, err := e.o.Request(pods[0])
	if err != nil {
		return nil, "invalid GPU request: " + err.Error()
	}
	scope.narrow(&req)
	e.mu.Lock()
	snap := e.o.Ledger.Snapshot()
	e.mu.Unlock()
	snap = snap.Without(without...)
	at := e.eligibleAt(pods[0], snap)
	if len(pods) == 1 {
		for _, i := range at {
			if _, reason := placement.Fit(req, snap.At(int(i))); reason == nil {
				return []ledger.Claim{req.ClaimOn(snap.Names()[i])}, ""
			}
		}
		return nil, "no node the pod may use would fit it with those pods gone"
	}
	g := placement.Gang{Name: req.Job, Member: req}
	for _, p := range pods {
		g.UIDs = append(g.UIDs, string(p.UID))
		g.Pods = append(g.Pods, p.Namespace+"/"+p.Name)
	}
	plan, reason := placement.PlanGang(g, snap, namesAt(snap, at), e.o.Tiers)
	if reason != nil {
		return nil, reason.Message()
	}
	return ledger.ClaimsFor(req.Job, true, req.Models, plan.Allocations), ""
}
