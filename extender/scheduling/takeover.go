package scheduling

import (
	"context"

	"strings"

	"github.com/rota-sched/rota/pkg/ledger"
)

// What an extender keeps in memory only, and how a replica that takes over
// the lease re-derives it (extender/app runs Forget when a replica starts
// and stops leading, RequeueGangs once it leads):
//
//   - Committed allocations are not memory-only: every bound pod carries
//     its assignment annotation, and every replica's informer restores it
//     (extender/state), standby or not.
//   - A single pod's admission hold is not memory-only either: the queue
//     controller records it on the pod (contract.Admission), and every
//     replica's cache reserves it again from that record. Forget keeps it.
//   - Other reservations (a bind in flight, a gang's reserved slots, a
//     gang's admission holds, which the queue controller re-holds as a
//     whole once it runs on the new leader) and gang plans die with the
//     leader. The new leader starts
//     without any (Forget), and re-derives them from the pods' state: a
//     gang member's filter counts the bound members from the informer,
//     plans only the unbound ones, and places them next to the bound ones
//     first (gangs.filter, nearBound); a single pod's bind reserves again
//     when the scheduler retries it.
//   - Waiting gangs (the list that a GPU release requeues) are re-derived
//     by requeueing one unbound member of every gang (RequeueGangs): its
//     filter records the gang as waiting again, or plans it.
//
// A replica that lost the lease drops the same state (Forget): the new
// leader may have bound other pods on the GPUs it reserved, and a stale
// reservation would make the ledger refuse those pods' assignments.

// Forget drops the gang plans, the waiting gangs and every reservation not
// yet committed but the recorded admission holds of single pods, and
// reports how many plans and reservations it dropped.
func (e *Extender) Forget() (plans, reservations int) {
	g := e.gangs
	e.room.Lock()
	g.plansMu.Lock()
	plans = len(g.plans)
	g.plans = map[string]*gangPlan{} // their slots are released below
	g.plansMu.Unlock()
	g.waiting.Flush()
	e.room.Unlock()
	for _, a := range e.ledger.Allocations() {
		if a.State != ledger.Reserved || e.recordedHold(a) {
			continue
		}
		// Releasing a gang member may release its mates first.
		e.ledger.Release(a.PodUID)
		reservations++
	}
	return plans, reservations
}

// RequeueGangs writes the requeue annotation on one unbound member of every
// gang that has unbound members, so that kube-scheduler retries it now
// instead of at its next unschedulable-pool flush; it returns how many
// gangs it requeued. The writes run in the background (see touch).
func (e *Extender) RequeueGangs(ctx context.Context, why string) int {
	var refs []podRef
	for _, key := range e.cache.GangKeys() {
		for _, m := range e.cache.GangMembers(key) {
			if m.Spec.NodeName == "" && m.DeletionTimestamp == nil {
				refs = append(refs, podRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID})
				break
			}
		}
	}
	e.touch(ctx, refs, why)
	return len(refs)
}

// recordedHold reports whether a reservation is a single pod's admission
// hold that the pod's admission record states (the cache restores those).
func (e *Extender) recordedHold(a ledger.Allocation) bool {
	if a.Gang != "" {
		return false
	}
	ns, name, _ := strings.Cut(a.Pod, "/")
	pod, ok := e.cache.Pod(ns, name)
	if !ok || string(pod.UID) != a.PodUID {
		return false
	}
	adm, _ := e.o.Records.Admission(pod, e.names) // the cache restores only believed holds
	return adm != nil && adm.Hold != nil && adm.Hold.Node == a.Node
}
