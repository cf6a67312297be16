package scheduling

import (
	"context"
	"errors"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/stopcost"
)

var errNoPod = errors.New("the request names no pod")

// PreemptGuard keeps the queue's rules in kube-scheduler's own priority
// preemption (extender/queue.Guard): For reads what it needs once per
// preempt call and returns, for one node's victims, those (by pod UID) that
// must stay however the preemptor's priority compares, and why.
type PreemptGuard interface {
	For(preemptor *corev1.Pod) func(victims []*ledger.Allocation) (keep map[string]bool, why string)
}

// spareFunc is a PreemptGuard's answer for one preemptor; nil keeps nothing.
type spareFunc = func(victims []*ledger.Allocation) (keep map[string]bool, why string)

// errNotReady answers every verb until the ledger is rebuilt from the API
// server: kube-scheduler calls the extender whatever /readyz says, and a
// decision on a half-built ledger could give a pod GPUs another pod holds.
var errNotReady = errors.New("rota-extender is starting: its GPU ledger is not rebuilt from the API server yet; the scheduler will retry")

// notReady returns errNotReady (and counts it for verb) until the ledger is
// rebuilt.
func (e *Extender) notReady(verb string) error {
	if e.Ready() {
		return nil
	}
	e.metrics.Decisions.WithLabelValues(verb, "error", "NotReady").Inc()
	return errNotReady
}

// Preempt answers the preempt verb (ProcessPreemption). For every node the
// scheduler proposes, it keeps the scheduler's victims that hold no GPUs
// (they free what the scheduler's plugins need) and replaces its GPU
// victims with the set placement.Victims picks on the node's ledger view. A pod may be evicted only
// when it is bound (committed), has a lower priority than the preemptor,
// is not labelled preemptible=false, and is not in a gang larger than
// MaxPreemptibleGangSize; a gang member takes its whole gang, so a gang is
// eligible only when all its members run on that node. With a Guard, no
// team is taken below its quota guarantee for another team's pod (the
// queue's reclaim rule): its victims are dropped and the set chosen again.
// A node is dropped when no eligible set makes room.
// The answer names victims by UID, as the scheduler knows them.
func (e *Extender) Preempt(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error) {
	start := e.now()
	if args == nil || args.Pod == nil {
		e.metrics.Decisions.WithLabelValues("preempt", "error", "NoPod").Inc()
		return nil, errNoPod
	}
	if err := e.notReady("preempt"); err != nil {
		return nil, err
	}
	pod := args.Pod
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod))
	in := args.NodeNameToMetaVictims
	if in == nil && args.NodeNameToVictims != nil {
		in = make(map[string]*extenderv1.MetaVictims, len(args.NodeNameToVictims))
		for n, v := range args.NodeNameToVictims {
			mv := &extenderv1.MetaVictims{}
			if v != nil {
				mv.NumPDBViolations = v.NumPDBViolations
				for _, p := range v.Pods {
					if p != nil {
						mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(p.UID)})
					}
				}
			}
			in[n] = mv
		}
	}
	out := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	req, err := e.request(pod)
	if err != nil || !podreq.Wants(pod, e.names) {
		// Nothing of ours to free: the scheduler's victims stand.
		out.NodeNameToMetaVictims = in
		e.metrics.Decisions.WithLabelValues("preempt", "passthrough", "").Inc()
		return out, nil
	}
	var prio int32
	if pod.Spec.Priority != nil {
		prio = *pod.Spec.Priority
	}
	snap := e.ledger.Snapshot()
	var spare spareFunc
	if e.o.Guard != nil {
		spare = e.o.Guard.For(pod)
	}
	dropped := 0
	guarded := "" // why the guard kept victims, on one node (they read alike)
	for node, mv := range in {
		victims, spared, ok := e.victimsOn(spare, req, prio, snap.Node(node), mv)
		if spared != "" {
			guarded = spared
		}
		if !ok {
			dropped++
			logger.V(5).Info("Preemption cannot make room on node", "node", node, "spared", spared)
			continue
		}
		res := &extenderv1.MetaVictims{}
		if mv != nil {
			res.NumPDBViolations = mv.NumPDBViolations
		}
		for _, uid := range victims {
			res.Pods = append(res.Pods, &extenderv1.MetaPod{UID: uid})
		}
		out.NodeNameToMetaVictims[node] = res
	}
	outcome := "victims"
	if len(out.NodeNameToMetaVictims) == 0 {
		outcome = "nofit"
	}
	e.metrics.Decisions.WithLabelValues("preempt", outcome, "").Inc()
	msg := ""
	if guarded != "" {
		msg = "quota guarantees kept victims: " + guarded
	}
	e.decisions.add(pod.Namespace+"/"+pod.Name, Decision{Time: start, Verb: "preempt", Outcome: outcome,
		Nodes: len(in), Fits: len(out.NodeNameToMetaVictims), Message: msg, Duration: e.now().Sub(start).String()})
	logger.V(4).Info("Preempt decision", "outcome", outcome, "nodes", len(in),
		"fits", len(out.NodeNameToMetaVictims), "dropped", dropped, "guarantees", guarded)
	return out, nil
}

// victimsOn returns the UIDs to evict on one node, or false. The
// scheduler's victims that hold no Rota allocation stay (they free what its
// own plugins need). Its GPU victims are only a proposal: kube-scheduler
// counts GPU resources per node, not per GPU, and picks the newest
// low-priority pods, which may be labelled preemptible=false or sit on the
// wrong GPU. Rota replaces them with placement.Victims over every eligible
// allocation on the node, which frees one GPU for a share or enough idle
// GPUs for whole-GPU pods. The scheduler accepts any pod of the node.
func (e *Extender) victimsOn(spare spareFunc, req placement.Request, prio int32, ni *ledger.NodeInfo, mv *extenderv1.MetaVictims) ([]string, string, bool) {
	if ni == nil {
		return nil, "", false
	}
	var base []string
	if mv != nil {
		for _, p := range mv.Pods {
			if p == nil {
				continue
			}
			if _, ours := ni.Allocs[p.UID]; ours {
				continue
			}
			base = append(base, p.UID)
		}
	}
	extra, spared, ok := e.guardedVictims(spare, req, prio, ni)
	if !ok || (len(extra) == 0 && len(base) == 0) {
		return nil, spared, false
	}
	out := slices.Clone(base)
	add := func(uid string) {
		if !slices.Contains(out, uid) {
			out = append(out, uid)
		}
	}
	for _, a := range extra {
		add(a.PodUID)
		if a.Gang != "" {
			for _, m := range ni.Allocs {
				if m.Gang == a.Gang {
					add(m.PodUID)
				}
			}
		}
	}
	return out, spared, true
}

// guardedVictims is placement.Victims under the Guard: while the chosen set
// would take a team below its guarantee, that team's allocations on the
// node are kept and the set is chosen again (each round keeps at least one
// more team, so it ends). It returns why teams were spared.
func (e *Extender) guardedVictims(spare spareFunc, req placement.Request, prio int32, ni *ledger.NodeInfo) ([]*ledger.Allocation, string, bool) {
	keep := map[string]bool{}
	var whys []string
	for {
		extra, ok := placement.VictimsByCost(req, ni, func(a *ledger.Allocation) bool { return !keep[a.PodUID] && e.evictable(a, prio, ni) },
			e.lostWork(ni))
		if !ok || spare == nil || len(extra) == 0 {
			return extra, strings.Join(whys, "; "), ok
		}
		more, why := spare(extra)
		grew := false
		for uid := range more {
			if !keep[uid] {
				keep[uid], grew = true, true
			}
		}
		if !grew {
			return extra, strings.Join(whys, "; "), true
		}
		whys = append(whys, why)
	}
}

// evictable says whether allocation a on node ni may be evicted for a pod
// of priority prio.
func (e *Extender) evictable(a *ledger.Allocation, prio int32, ni *ledger.NodeInfo) bool {
	if a.State != ledger.Committed || a.Priority >= prio || !a.Preemptible {
		return false
	}
	if (e.o.UrgentPriority <= 0 || prio < e.o.UrgentPriority) && stopcost.Young(a.Stop, e.now(), e.o.StopCost) {
		return false // inside its own minimum runtime
	}
	if a.Gang == "" {
		return true
	}
	size := a.GangSize
	members := e.cache.GangMembers(a.Gang)
	size = max(size, len(members))
	if size > e.o.MaxPreemptibleGangSize {
		return false
	}
	// The whole gang must run on this node: only its pods can be named here.
	for _, m := range members {
		if m.Spec.NodeName != ni.Node.Name {
			return false
		}
	}
	return true
}

// lostWork is the work stopping an allocation on ni loses now, in
// GPU-seconds (pkg/stopcost).
func (e *Extender) lostWork(ni *ledger.NodeInfo) func(*ledger.Allocation) float64 {
	now := e.now()
	return func(a *ledger.Allocation) float64 {
		f := a.Stop
		f.GPUs = ni.GPUsOf(a)
		return stopcost.LostWork(f, now, e.o.StopCost)
	}
}
