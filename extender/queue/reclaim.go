package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// addVictim records a running admitted pod as reclaimable work: a pod
// alone, or its whole gang (evicting one member would break it).
func (c *Controller) addVictim(victims map[string]*pkgqueue.Victim, pods map[string][]*corev1.Pod, pod *corev1.Pod,
	adm *contract.Admission, ref *podreq.GangRef, acct quota.Account, amt quota.Amount) {
	key := podreq.WorkloadKey(pod, ref)
	v := victims[key]
	if v == nil {
		v = &pkgqueue.Victim{Key: key, Team: acct.Team, Account: acct, Preemptible: podreq.Preemptible(pod, c.o.Names),
			Protected: ref != nil && c.o.MaxPreemptibleGangSize > 0 && ref.Size > c.o.MaxPreemptibleGangSize}
		victims[key] = v
	}
	v.Amount = v.Amount.Add(amt)
	v.Preemptible = v.Preemptible && podreq.Preemptible(pod, c.o.Names)
	if adm != nil {
		if adm.AdmittedAt.After(v.AdmittedAt) {
			v.AdmittedAt = adm.AdmittedAt
		}
	} else if pod.CreationTimestamp.After(v.AdmittedAt) {
		v.AdmittedAt = pod.CreationTimestamp.Time
	}
	pods[key] = append(pods[key], pod)
}

// reclaim gives a team below its guarantee back the capacity other teams
// borrowed: for the first workload (in team order) that waits for room and
// stays within its guarantee, pkg/queue chooses the victims (newest admitted
// first, preemptible only, never a victim team below its guarantee), and
// they are evicted through the Eviction API, so controllers see a
// disruption and disruption budgets hold. One reclaim per pass; a workload
// is reclaimed for at most once per ReclaimCooldown.
func (c *Controller) reclaim(ctx context.Context, in pkgqueue.Input, res pkgqueue.Result, byKey map[string]*workload,
	victims map[string]*pkgqueue.Victim, victimPods map[string][]*corev1.Pod, now time.Time) {
	logger := klog.FromContext(ctx)
	vs := make([]pkgqueue.Victim, 0, len(victims))
	snap := c.snapshot() // once per pass, not per victim
	for _, v := range victims {
		vs = append(vs, c.stopCost(logger, *v, victimPods[v.Key], in.Config, snap, now))
	}
	keys := pkgqueue.ReclaimOrder(in.Config, res, func(k string) *pkgqueue.Workload { return &byKey[k].w })
	// Said on the first few workloads that reclaim cannot serve now only
	// because borrowed work is inside its minimum runtime.
	told := 0
	for _, k := range keys {
		wl := byKey[k]
		c.mu.Lock()
		last, recent := c.reclaimed[k]
		c.mu.Unlock()
		if recent && now.Sub(last) < c.o.ReclaimCooldown {
			continue
		}
		cands := vs
		if c.o.UrgentPriority > 0 && wl.w.Priority >= c.o.UrgentPriority {
			// Urgent work may take what is inside its minimum runtime.
			cands = slices.Clone(vs)
			for i := range cands {
				cands[i].Young = false
			}
		}
		for _, a := range wl.w.Accounts {
			chosen := pkgqueue.Reclaim(in.Config, in.Admitted, &wl.w, a, cands)
			var claims []ledger.Claim
			if len(chosen) > 0 {
				var room bool
				if claims, room = c.reclaimRoom(logger, wl, a, chosen, victimPods); !room {
					continue
				}
			}
			if len(chosen) == 0 {
				if told < reclaimTellMax {
					if at := pkgqueue.ReclaimableAt(in.Config, in.Admitted, &wl.w, a, cands, reclaimTimesMax); !at.IsZero() {
						told++
						st := res.Waiting[k]
						st.Message += fmt.Sprintf("; GPUs team %s lent can be reclaimed for it from %s, when the borrowed work passes its minimum runtime",
							a.Team, at.UTC().Format("2006-01-02 15:04:05 MST"))
						res.Waiting[k] = st
					}
				}
				continue
			}
			c.mu.Lock()
			c.reclaimed[k] = now
			c.mu.Unlock()
			// Past the team's own guarantee, what comes back is its
			// groups' pool that was lent (pkg/queue reclaimLent).
			what := fmt.Sprintf("team %s's guarantee", a.Team)
			if g, _, _, _ := in.Config.AccountLimits(a); !in.Admitted[a].Total().Add(wl.w.Need()).Fits(g) {
				what = fmt.Sprintf("the pool team %s's groups lent (%s)", a.Team, strings.Join(in.Config.Path(a.Team), " < "))
			}
			for _, v := range chosen {
				for _, p := range victimPods[v.Key] {
					msg := fmt.Sprintf("evicted for %s to return %s (team %s borrows above its own); of the work that could go, this loses the least since its last checkpoint: about %.0f GPU-minutes",
						k, what, v.Team, v.LostWork/60)
					if err := c.takeBack(ctx, p); err != nil {
						if why := blocked(err); why != "" {
							// Said on the pod, and tried again after the cooldown.
							c.event(p, corev1.EventTypeWarning, "ReclaimBlocked", fmt.Sprintf(
								"not evicted for %s: %s (%v); tried again in %s", k, why, err, c.o.ReclaimCooldown))
							logger.Info("Reclaim eviction held back", "pod", klog.KObj(p), "why", why, "err", err)
							continue
						}
						logger.Error(err, "Reclaim eviction failed", "pod", klog.KObj(p))
						continue
					}
					c.event(p, corev1.EventTypeWarning, "Reclaimed", msg)
				}
			}
			for _, p := range wl.pods {
				c.event(p, corev1.EventTypeNormal, "Reclaiming", fmt.Sprintf("evicting %d workloads that other teams borrowed to return %s", len(chosen), what))
			}
			if len(claims) > 0 {
				c.holds[k] = roomHold{claims: claims, until: now.Add(c.holdFor()),
					what: fmt.Sprintf("%d workloads of other teams were reclaimed for it", len(chosen))}
			}
			c.o.Metrics.Reclaims.WithLabelValues(a.Team).Inc()
			logger.Info("Reclaimed borrowed capacity", "workload", k, "account", a.String(), "victims", len(chosen))
			return
		}
	}
}

// RoomChecker says whether queued pods would find room once some pods'
// GPUs are free, and which claims would hold it (*room.Planner).
type RoomChecker interface {
	RoomWithout(pods []*corev1.Pod, scope room.Scope, without []string) ([]ledger.Claim, string)
}

// reclaimRoom returns the claims that hold, for wl, the room evicting
// chosen frees: quota returned where no node the workload may use gains
// room would only stop work for nothing (the freed GPUs go to whatever fits
// there). ok is false when there is no such room. Without a RoomChecker it
// trusts quota alone and holds nothing.
func (c *Controller) reclaimRoom(logger klog.Logger, wl *workload, a quota.Account, chosen []pkgqueue.Victim,
	victimPods map[string][]*corev1.Pod) (claims []ledger.Claim, ok bool) {
	rc, has := c.o.Holder.(RoomChecker)
	if !has {
		return nil, true
	}
	var uids []string
	for _, v := range chosen {
		for _, p := range victimPods[v.Key] {
			uids = append(uids, string(p.UID))
		}
	}
	claims, why := rc.RoomWithout(wl.pods, c.scope(a), uids)
	if len(claims) == 0 {
		logger.V(2).Info("Reclaim would not make room; no eviction", "workload", wl.w.Key, "account", a.String(),
			"victims", len(chosen), "why", why)
		return nil, false
	}
	return claims, true
}

// reclaimTellMax bounds the workloads a pass tells when reclaim can serve
// them (pkg/queue.ReclaimableAt runs the reclaim search once per distinct
// time, at most reclaimTimesMax times).
const (
	reclaimTellMax  = 8
	reclaimTimesMax = 16
)

// stopCost fills a victim's LostWork (its pods' GPUs times the time since
// their last checkpoints) and Young (some pod inside its minimum runtime).
// A pod's unreadable declaration counts as not made, and is logged.
func (c *Controller) stopCost(logger klog.Logger, v pkgqueue.Victim, pods []*corev1.Pod, cfg quota.Config, snap *ledger.Snapshot, now time.Time) pkgqueue.Victim {
	for _, pod := range pods {
		f, p := c.stopFacts(logger, pod, v.Team, cfg, snap)
		v.LostWork += stopcost.LostWork(f, now, p)
		v.Young = v.Young || stopcost.Young(f, now, p)
		if u := stopcost.YoungUntil(f, now, p); u.After(v.YoungUntil) {
			v.YoungUntil = u
		}
	}
	return v
}

// stopFacts reads what stopping a running pod of team costs, with the
// policy that weighs it.
func (c *Controller) stopFacts(logger klog.Logger, pod *corev1.Pod, team string, cfg quota.Config, snap *ledger.Snapshot) (stopcost.Facts, stopcost.Policy) {
	p := c.o.StopCost
	p.TeamMinRuntime = cfg.TeamMinRuntime(team)
	f, err := podreq.StopFacts(pod, c.o.Names)
	if err != nil {
		logger.V(2).Info("Ignoring a pod's unreadable checkpoint or minimum runtime", "pod", klog.KObj(pod), "err", err)
	}
	f.GPUs = heldGPUs(snap, pod)
	return f, p
}

// snapshot is the ledger's snapshot, nil without one.
func (c *Controller) snapshot() *ledger.Snapshot {
	if c.o.Snapshot == nil {
		return nil
	}
	return c.o.Snapshot()
}

// heldGPUs is how many GPUs a bound pod holds in the ledger.
func heldGPUs(s *ledger.Snapshot, pod *corev1.Pod) float64 {
	if s == nil {
		return 0
	}
	ni := s.Node(pod.Spec.NodeName)
	if ni == nil || ni.Node == nil {
		return 0
	}
	if a := ni.Allocs[string(pod.UID)]; a != nil {
		return ni.GPUsOf(a)
	}
	return 0
}

// evictTimeout bounds one eviction call: the API server holds an eviction
// while the pod's disruption budget is not yet computed, and the queue's
// pass must not wait with it.
const evictTimeout = 5 * time.Second

// blocked says why an eviction error means "not now" rather than a
// failure: a PodDisruptionBudget that allows no disruption (429), or an
// API server that held the eviction past evictTimeout.
func blocked(err error) string {
	switch {
	case apierrors.IsTooManyRequests(err):
		return "its PodDisruptionBudget allows no disruption now"
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return fmt.Sprintf("the API server held the eviction past %s (a disruption budget it has not computed yet?)", evictTimeout)
	}
	return ""
}

// takeBack stops a pod that reclaim chose: a pod of an admitted Job
// queued suspended by suspending its Job (evicted, the Job controller
// would create it again, admitted by the Job's record), any other by
// evicting it.
func (c *Controller) takeBack(ctx context.Context, pod *corev1.Pod) error {
	if ok, err := c.suspendJob(ctx, pod); ok {
		return err
	}
	return c.evict(ctx, pod)
}

// evict asks the API server to evict a pod (policy/v1), with the pod's own
// grace period, waiting at most evictTimeout.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, evictTimeout)
	defer cancel()
	opts := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	if g, ok := c.grace(pod); ok {
		secs := int64(g / time.Second)
		opts.GracePeriodSeconds = &secs
	}
	return c.o.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: opts,
	})
}

// grace is the grace period of the queue's eviction of pod: its
// checkpoint-grace annotation, capped by MaxCheckpointGrace; ok is false
// when it declares none (or no cap is set), and the pod's own
// terminationGracePeriodSeconds applies.
func (c *Controller) grace(pod *corev1.Pod) (time.Duration, bool) {
	if c.o.MaxCheckpointGrace <= 0 {
		return 0, false
	}
	return podreq.CheckpointGrace(pod, c.o.Names, c.o.MaxCheckpointGrace)
}
