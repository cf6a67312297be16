package scheduling

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/reserve"
)

// Hold is the room the queue controller holds in the ledger for pods it is
// about to admit, until they bind or the hold lapses.
type Hold struct {
	// Allocations has one reservation per pod, in the order of the pods.
	Allocations []ledger.Allocation
	// Level and Where are a gang's planned domain (placement.GangPlan);
	// Level is placement.TierNode for a single pod.
	Level int
	Where string
}

// HoldRoom reserves room for pods that the queue admits together: a single
// pod on the node the policy ranks best, a gang's members in the smallest
// topology tier that holds them all (placement.PlanGang), each until
// expires. model, when set, restricts the GPUs to that model (the quota
// account the pods are charged to). It holds everything or nothing; when it
// holds nothing the reason says why, in words.
//
// A held pod that kube-scheduler then filters passes only its held node
// (see Filter) and binds onto the held GPUs, so two admissions never count
// the same free GPUs and an admitted pod does not lose its room to one
// admitted later.
func (e *Extender) HoldRoom(pods []*corev1.Pod, model string, expires time.Time) (Hold, string) {
	if len(pods) == 0 {
		return Hold{}, "nothing to hold"
	}
	req, err := e.request(pods[0])
	if err != nil {
		return Hold{}, "invalid GPU request: " + err.Error()
	}
	if model != "" {
		req.Models = []string{model}
	}
	e.gangs.mu.Lock() // planning and holding are serialized with gang planning
	defer e.gangs.mu.Unlock()
	snap := e.ledger.Snapshot()
	if snap.Len() == 0 {
		return Hold{}, "no GPU node is known yet"
	}
	candidates := e.eligible(pods[0], snap)
	if len(candidates) == 0 {
		return Hold{}, fmt.Sprintf("none of the %d GPU nodes matches the pod's %s and tolerations", snap.Len(), affinityTerms(pods[0]))
	}
	if len(pods) == 1 {
		return e.holdOne(req, snap, candidates, expires)
	}
	ref, _ := podreq.GangOf(pods[0], e.names)
	key := pods[0].Namespace + "/" + pods[0].Name
	if ref != nil {
		key = ref.Key
	}
	g := placement.Gang{Name: key, Member: req}
	for _, p := range pods {
		g.UIDs = append(g.UIDs, string(p.UID))
		g.Pods = append(g.Pods, p.Namespace+"/"+p.Name)
	}
	plan, reason := placement.PlanGang(g, snap, candidates, e.o.Tiers)
	if reason != nil {
		return Hold{}, reason.Message()
	}
	for i := range plan.Allocations {
		plan.Allocations[i].Priority, plan.Allocations[i].Preemptible = req.Priority, req.Preemptible
		plan.Allocations[i].Gang, plan.Allocations[i].GangSize = key, len(pods)
	}
	if err := e.ledger.ReserveAll(plan.Allocations, expires); err != nil {
		return Hold{}, fmt.Sprintf("gang %s: holding its room failed: %v", key, err)
	}
	for i := range plan.Allocations {
		plan.Allocations[i].State, plan.Allocations[i].Expires = ledger.Reserved, expires
	}
	return Hold{Allocations: plan.Allocations, Level: plan.Level, Where: plan.Where}, ""
}

// holdOne holds one pod on the best node: the highest policy score, the
// first by name among equals.
func (e *Extender) holdOne(req placement.Request, snap *ledger.Snapshot, candidates []string, expires time.Time) (Hold, string) {
	best, bestScore := "", int64(0)
	var bestChoice placement.Choice
	var tally reasonTally
	for _, n := range candidates {
		ni := snap.Node(n)
		c, reason := placement.Fit(req, ni)
		if reason != nil {
			if reason.Node == "" {
				reason.Node = n
			}
			tally.add(reason, n, reason.Message)
			continue
		}
		if s := e.policy.Score(req, ni, c); best == "" || s > bestScore {
			best, bestScore, bestChoice = n, s, c
		}
	}
	if best == "" {
		return Hold{}, tally.summary(len(candidates))
	}
	a := bestChoice.Allocation(req, snap.Node(best))
	if err := e.ledger.Reserve(a, expires); err != nil {
		return Hold{}, fmt.Sprintf("holding room on node %s failed: %v", best, err)
	}
	a.State, a.Expires = ledger.Reserved, expires
	return Hold{Allocations: []ledger.Allocation{a}, Level: placement.TierNode, Where: best}, ""
}

// eligible lists the ledger's nodes that kube-scheduler could place pod on
// as far as its node selector, required node affinity and tolerations go
// (the checks bind repeats, checkNode), so that room is never held where the
// pod cannot go. Members of a gang share these (they ask the same).
func (e *Extender) eligible(pod *corev1.Pod, snap *ledger.Snapshot) []string {
	aff := nodeaffinity.GetRequiredNodeAffinity(pod)
	out := make([]string, 0, snap.Len())
	for _, n := range snap.Names() {
		node, ok := e.cache.Node(n)
		if !ok {
			continue
		}
		if match, err := aff.Match(node); err != nil || !match {
			continue
		}
		if len(node.Spec.Taints) > 0 && checkNode(pod, node, nil) != nil {
			continue
		}
		out = append(out, n)
	}
	return out
}

// ReleaseHold frees what a hold reserved for pods that were not admitted
// after all (the admitting update failed). Pods that bound meanwhile keep
// their GPUs.
func (e *Extender) ReleaseHold(h Hold) {
	for _, a := range h.Allocations {
		if cur, ok := e.ledger.Get(a.PodUID); ok && cur.State == ledger.Reserved {
			e.ledger.Release(a.PodUID)
		}
	}
}

// heldNode returns the node of a single pod's admission or bind hold.
func (e *Extender) heldNode(pod *corev1.Pod) (string, bool) {
	a, ok := e.ledger.Get(string(pod.UID))
	if !ok || a.State != ledger.Reserved || a.Gang != "" {
		return "", false
	}
	return a.Node, true
}

// ReservationJob describes a queued workload's pods for reservation
// planning (pkg/reserve): what each member asks for (with model, when set,
// as its GPU models), the job's key, and the nodes its pods may run on.
func (e *Extender) ReservationJob(pods []*corev1.Pod, model string) (reserve.Job, []string, error) {
	if len(pods) == 0 {
		return reserve.Job{}, nil, fmt.Errorf("no pods")
	}
	req, err := e.request(pods[0])
	if err != nil {
		return reserve.Job{}, nil, err
	}
	if model != "" {
		req.Models = []string{model}
	}
	ref, _ := podreq.GangOf(pods[0], e.names)
	job := reserve.Job{Key: req.Job, Gang: ref != nil, Member: req, Members: len(pods)}
	if ref != nil {
		job.Members = max(ref.Size, len(pods))
	}
	return job, e.eligible(pods[0], e.ledger.Snapshot()), nil
}

// SetClaims replaces the reservations' holds in the ledger.
func (e *Extender) SetClaims(claims []ledger.Claim) { e.ledger.SetClaims(claims) }

// Tiers is the number of topology tier labels.
func (e *Extender) Tiers() int { return e.o.Tiers }
