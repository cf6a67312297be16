package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// Defrag bounds the moves the queue makes to defragment free GPUs.
type Defrag struct {
	// MaxMovedShare bounds the pods moved in any hour, as a share of the
	// running admitted pods (at least one when positive; 0 moves none).
	MaxMovedShare float64
	// MaxMoves bounds the pods one plan moves (0: 2).
	MaxMoves int
	// HoldFor is how long the freed room stays held for the waiting pod,
	// and the room reclaim frees for its workload (0: 10 minutes).
	HoldFor time.Duration
}

// Defragger plans the moves that make room for a queued pod
// (*room.Planner).
type Defragger interface {
	Defrag(pod *corev1.Pod, scope room.Scope, m room.Moves) (placement.DefragPlan, ledger.Claim, bool)
}

// defragTries bounds the waiting pods one pass plans moves for.
const defragTries = 4

// defrag makes room by moving pods, when free GPUs are fragmented: for the
// first waiting single pod (in queue order) of a team whose quota sets
// defrag, that waits for room while no node fits it, it plans the fewest
// moves of movable pods (placement.Defrag through the Defragger), evicts
// them with their checkpoint grace for their controllers to recreate
// (queued again in their old place: a pod's age is its Job's), and holds
// the freed room for the waiting pod. At most one plan per pass, within
// the hourly move budget. A pod is movable when it declares so
// (MovableAnnotation), is preemptible, runs, has a controller, is past its
// minimum runtime and its priority is not above the waiting pod's; a gang
// member only with its whole gang (the planner's rule).
func (c *Controller) defrag(ctx context.Context, cfg quota.Config, res pkgqueue.Result, byKey map[string]*workload,
	victims map[string]*pkgqueue.Victim, victimPods map[string][]*corev1.Pod, now time.Time) {
	if c.o.Defrag.MaxMovedShare <= 0 || c.o.Defragger == nil {
		return
	}
	logger := klog.FromContext(ctx)
	running := map[string]*corev1.Pod{}
	podTeam := map[string]string{}
	for key, pods := range victimPods {
		for _, p := range pods {
			running[string(p.UID)] = p
			if v := victims[key]; v != nil {
				podTeam[string(p.UID)] = v.Team
			}
		}
	}
	c.mu.Lock()
	c.moves = slices.DeleteFunc(c.moves, func(t time.Time) bool { return now.Sub(t) >= pkgqueue.MoveWindow })
	budget := pkgqueue.MoveBudget(c.moves, now, len(running), c.o.Defrag.MaxMovedShare)
	c.mu.Unlock()
	if budget == 0 {
		return
	}
	var keys []string
	for k, st := range res.Waiting {
		wl := byKey[k]
		if st.Reason == pkgqueue.WaitRoom && wl != nil && wl.job == nil && wl.w.Members == 1 && len(wl.pods) == 1 && cfg.TeamDefrag(wl.w.Team) {
			if _, held := c.holds[k]; !held {
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return pkgqueue.Less(&byKey[a].w, &byKey[b].w) })
	snap := c.snapshot()
	lost := map[string]float64{} // pod UID -> GPU-seconds a stop loses now
	for i, k := range keys {
		if i == defragTries {
			return
		}
		wl := byKey[k]
		mover := func(a *ledger.Allocation) *corev1.Pod {
			p := running[a.PodUID]
			if p == nil || !c.movable(logger, p, podTeam[a.PodUID], wl.w.Priority, cfg, snap, now) {
				return nil
			}
			return p
		}
		cost := func(a *ledger.Allocation) float64 {
			if v, ok := lost[a.PodUID]; ok {
				return v
			}
			p := running[a.PodUID]
			if p == nil {
				return 0
			}
			f, pol := c.stopFacts(logger, p, podTeam[a.PodUID], cfg, snap)
			lost[a.PodUID] = stopcost.LostWork(f, now, pol)
			return lost[a.PodUID]
		}
		plan, claim, ok := c.o.Defragger.Defrag(wl.pods[0], c.scopeOf(wl), room.Moves{Mover: mover, Cost: cost, Max: min(c.moves1(), budget)})
		if !ok {
			continue
		}
		c.move(ctx, k, wl, plan, claim, running, lost, now)
		return
	}
}

// moves1 is the most pods one plan moves.
func (c *Controller) moves1() int {
	if c.o.Defrag.MaxMoves > 0 {
		return c.o.Defrag.MaxMoves
	}
	return 2
}

// movable reports whether the queue may move running pod p (of team) to
// make room for a waiting pod of priority prio.
func (c *Controller) movable(logger klog.Logger, p *corev1.Pod, team string, prio int32, cfg quota.Config, snap *ledger.Snapshot, now time.Time) bool {
	if !podreq.Movable(p, c.o.Names) || !podreq.Preemptible(p, c.o.Names) || p.Status.Phase != corev1.PodRunning ||
		p.DeletionTimestamp != nil || metav1.GetControllerOf(p) == nil {
		return false
	}
	if p.Spec.Priority != nil && *p.Spec.Priority > prio {
		return false
	}
	f, pol := c.stopFacts(logger, p, team, cfg, snap)
	return !stopcost.Young(f, now, pol)
}

// move carries a plan out: each moved pod is evicted (its checkpoint grace,
// disruption budgets hold) and the freed room is held for the waiting
// workload. A budget that refuses an eviction is reported on the pod; the
// room freed by the others is held all the same.
func (c *Controller) move(ctx context.Context, key string, wl *workload, plan placement.DefragPlan, claim ledger.Claim,
	running map[string]*corev1.Pod, lost map[string]float64, now time.Time) {
	logger := klog.FromContext(ctx)
	var moved []string
	for _, m := range plan.Moves {
		p := running[m.Alloc.PodUID]
		if p == nil {
			continue
		}
		if err := c.evict(ctx, p); err != nil {
			c.o.Metrics.MovesBlocked.Inc()
			why := blocked(err)
			if why == "" {
				why = err.Error()
			}
			c.event(p, corev1.EventTypeWarning, "MoveBlocked", fmt.Sprintf("not moved to make room for %s on %s: %s", key, plan.Node, why))
			logger.Info("Move eviction held back", "pod", klog.KObj(p), "workload", key, "why", why)
			continue
		}
		moved = append(moved, p.Namespace+"/"+p.Name)
		c.o.Metrics.Moves.Inc()
		c.mu.Lock()
		c.moves = append(c.moves, now)
		c.mu.Unlock()
		c.event(p, corev1.EventTypeWarning, "Moved", fmt.Sprintf(
			"evicted to make room for %s on node %s: free GPUs were enough in total but fragmented; its controller recreates it, "+
				"queued in its old place, and it fits on %s as the cluster stands; about %.0f GPU-minutes since its last checkpoint are lost",
			key, plan.Node, m.To, lost[m.Alloc.PodUID]/60))
	}
	if len(moved) == 0 {
		return
	}
	hold := roomHold{claims: []ledger.Claim{claim}, until: now.Add(c.holdFor()),
		what: fmt.Sprintf("%s moved off node %s for it", strings.Join(moved, ", "), plan.Node)}
	c.holds[key] = hold
	msg := fmt.Sprintf("moving %s off node %s to make room for it (free GPUs were fragmented); the room is held for it until %s",
		strings.Join(moved, ", "), plan.Node, hold.until.UTC().Format(time.RFC3339))
	for _, p := range wl.pods {
		c.event(p, corev1.EventTypeNormal, "MakingRoom", msg)
	}
	logger.Info("Moving pods to make room", "workload", key, "node", plan.Node, "moved", moved, "lostGPUMinutes", plan.Cost/60)
}

func (c *Controller) holdFor() time.Duration {
	if c.o.Defrag.HoldFor > 0 {
		return c.o.Defrag.HoldFor
	}
	return 10 * time.Minute
}
