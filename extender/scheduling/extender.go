package scheduling

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/binder"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// PodGroups reads scheduler-plugins' PodGroup objects.
type PodGroups interface {
	// MinMember returns the PodGroup's spec.minMember.
	MinMember(ctx context.Context, namespace, name string) (int, error)
}

// Options configure New. Names, SchedulerNames, Cache, Ledger, Binder and
// Metrics are required.
type Options struct {
	Names contract.Names
	// Records signs the records this part writes and decides which it
	// believes (podreq.Records; the zero value signs and checks nothing).
	Records podreq.Records
	// Parser is the process's one parse of pods' requests (shared with the
	// queue, its guard and the status page); nil makes one from Names and
	// Records.
	Parser *podreq.Parser
	// SchedulerNames are the spec.schedulerName values of the pods bind
	// serves (the profiles that call this extender); bind refuses any other
	// pod.
	SchedulerNames []string
	// Tiers is the number of topology tier labels (gang planning levels).
	Tiers  int
	Policy placement.Policy
	// Pools says which node pool a team's pods place on and which policy
	// scores a pool's nodes; nil: no pools, Policy everywhere.
	Pools  *nodepool.Policies
	Cache  *state.Cache
	Ledger *ledger.Ledger
	Binder *binder.Binder
	// Recorder emits refusal events on pods; nil emits none.
	Recorder record.EventRecorder
	Metrics  *metrics.Metrics
	// PodGroups is nil when the PodGroup CRD is not installed: pod-group
	// gangs then need the gang-size annotation.
	PodGroups PodGroups

	// Guard keeps the queue's guarantees in priority preemption; nil
	// applies only the verb's own rules.
	Guard PreemptGuard

	BindTTL                time.Duration
	GangTTL                time.Duration
	MaxPreemptibleGangSize int
	// StopCost weighs the work a preemption loses (pkg/stopcost): between
	// victims the verb's rules leave equal, the cheaper goes; a pod inside
	// its own minimum runtime is not a victim unless the preemptor's
	// priority is at least UrgentPriority (0: never urgent). Teams'
	// minimum runtimes are the Guard's.
	StopCost       stopcost.Policy
	UrgentPriority int32
	FilterBestOnly bool
	// Room plans and holds room in the ledger, for the queue's holds and
	// this extender's gang plans alike; nil makes one from the options
	// above (room.Options.Candidates from HoldCandidates).
	Room           *room.Planner
	HoldCandidates int
	DebugPods      int
	DebugTTL       time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Extender answers the extender verbs.
type Extender struct {
	o         Options
	names     contract.Names
	ledger    *ledger.Ledger
	cache     *state.Cache
	binder    *binder.Binder
	metrics   *metrics.Metrics
	pools     *nodepool.Policies
	now       func() time.Time
	decisions *decisionLog
	gangs     *gangs
	room      *room.Planner
	bg        sync.WaitGroup
}

// New builds an Extender.
func New(o Options) (*Extender, error) {
	if o.Cache == nil || o.Ledger == nil || o.Binder == nil || o.Metrics == nil {
		return nil, errors.New("scheduling: cache, ledger, binder and metrics are required")
	}
	if len(o.SchedulerNames) == 0 {
		return nil, errors.New("scheduling: SchedulerNames is required (the schedulers whose pods bind serves)")
	}
	o.SchedulerNames = slices.Clone(o.SchedulerNames)
	if o.Policy == nil {
		p, err := placement.NewPolicy(placement.DefaultPolicyName, nil)
		if err != nil {
			return nil, err
		}
		o.Policy = p
	}
	if o.Pools == nil {
		o.Pools = nodepool.New(klog.Background(), nil, o.Policy, nil)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Parser == nil {
		o.Parser = podreq.NewParser(podreq.Options{Names: o.Names}, o.Records, 0)
	}
	if o.BindTTL <= 0 {
		o.BindTTL = 30 * time.Second
	}
	if o.GangTTL <= 0 {
		o.GangTTL = 2 * time.Minute
	}
	if o.DebugTTL <= 0 {
		o.DebugTTL = 30 * time.Minute
	}
	e := &Extender{o: o, names: o.Names, ledger: o.Ledger, cache: o.Cache, binder: o.Binder,
		metrics: o.Metrics, pools: o.Pools, now: o.Now,
		decisions: newDecisionLog(o.DebugPods, o.DebugTTL)}
	e.room = o.Room
	if e.room == nil {
		r, err := room.New(room.Options{Ledger: o.Ledger, Node: o.Cache.Node, Request: e.request,
			Gang:   func(p *corev1.Pod) *podreq.GangRef { return o.Parser.Of(p).Gang },
			Policy: o.Policy, PolicyFor: o.Pools.For, Tiers: o.Tiers, Candidates: o.HoldCandidates})
		if err != nil {
			return nil, err
		}
		e.room = r
	}
	e.gangs = newGangs(e)
	return e, nil
}

// Room is the planner that holds room for the queue and plans gangs.
func (e *Extender) Room() *room.Planner { return e.room }

// Ready reports whether the cache has rebuilt the ledger.
func (e *Extender) Ready() bool { return e.cache.Ready() }

// GangsWaiting is the number of gangs waiting for members or room.
func (e *Extender) GangsWaiting() int { return e.gangs.waitingCount() }

// Released is the cache's OnRelease hook: GPUs came free, so gangs that
// wait for room are touched to make kube-scheduler retry them now.
func (e *Extender) Released(_ []ledger.Allocation) { e.gangs.retryWaiting() }

// NodeOpened is told that a closed node takes GPU work again (DRA no
// longer manages its GPUs). The pods the filter refused while nodes were
// closed wait in kube-scheduler's unschedulable queue, which nothing about
// the node's object ends (it did not change), for up to five minutes: the
// latest 100 of them that are still unbound are touched now.
func (e *Extender) NodeOpened(ctx context.Context, node string) {
	var refs []podRef
	for _, key := range e.decisions.refusedFor(placement.Closed, e.now(), 100) {
		ns, name, _ := strings.Cut(key, "/")
		if p, ok := e.cache.Pod(ns, name); ok && p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
			refs = append(refs, podRef{Namespace: ns, Name: name, UID: p.UID})
		}
	}
	e.touch(ctx, refs, "node "+node+" takes GPU work again")
}

// Run expires reservations every expire interval and checks the ledger's
// invariants every check interval until ctx ends; then it waits for the
// background requeue touches.
func (e *Extender) Run(ctx context.Context, expireEvery, checkEvery time.Duration) {
	logger := klog.FromContext(ctx)
	expire := time.NewTicker(expireEvery)
	check := time.NewTicker(checkEvery)
	defer expire.Stop()
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			e.bg.Wait()
			return
		case <-expire.C:
			e.Expire(ctx)
		case <-check.C:
			errs := e.ledger.Check()
			e.metrics.SetViolations(len(errs))
			for i, err := range errs {
				if i == 5 {
					logger.Error(nil, "More ledger invariant violations", "count", len(errs)-5)
					break
				}
				logger.Error(err, "Ledger invariant violated")
			}
		}
	}
}

// Expire releases the reservations whose TTL passed, and the gang plans
// whose slots they were.
func (e *Extender) Expire(ctx context.Context) []ledger.Allocation {
	logger := klog.FromContext(ctx)
	now := e.now()
	out := e.ledger.Expire(now)
	for _, a := range out {
		kind := "pod"
		if a.Gang != "" {
			kind = "gang"
		}
		e.metrics.Expired.WithLabelValues(kind).Inc()
		logger.V(2).Info("Reservation expired", "pod", a.Pod, "node", a.Node, "gang", a.Gang)
	}
	e.gangs.expire(ctx, now)
	return out
}

// Wait blocks until background work (requeue touches) is done; for tests.
func (e *Extender) Wait() { e.bg.Wait() }

// Decisions returns the latest decisions kept for a pod, oldest first.
func (e *Extender) Decisions(namespace, name string) []Decision {
	return e.decisions.get(namespace+"/"+name, e.now())
}

// request reads what the pod asks for, with the GPU models it may use: the
// model of the quota account the queue admitted it to (a record Rota
// believes), else the models it names. The parse is the Parser's, once per
// pod version; the declared end is dated now.
func (e *Extender) request(pod *corev1.Pod) (placement.Request, error) {
	p := e.o.Parser.Of(pod)
	r := p.Request
	if p.Err != nil {
		return r, p.Err
	}
	r.Ends = podreq.DeclaredEnd(pod, e.names, e.now())
	if r.GPUFree() {
		return r, nil
	}
	if p.Admission != nil {
		// The team Rota admitted the pod for (a record it believes), not
		// one the pod's owner can write.
		r.Pool = e.pools.PoolOf(p.Admission.Team)
	}
	if p.Admission != nil && p.Admission.Model != "" {
		r.Models = []string{p.Admission.Model}
		return r, nil
	}
	if p.ModelsErr != nil {
		return r, p.ModelsErr
	}
	r.Models = p.Models
	return r, nil
}

// policyFor is the policy that scores r's nodes: its node pool's.
func (e *Extender) policyFor(r placement.Request) placement.Policy { return e.pools.For(r.Pool) }

// podRef names a pod for background writes.
type podRef struct {
	Namespace, Name string
	UID             types.UID
}

// touch writes the requeue annotation on pods, in the background: the
// writes outlive the request that caused them (ctx's values, such as its
// logger, are kept; its end is not), bounded to 30 s.
func (e *Extender) touch(ctx context.Context, pods []podRef, why string) {
	if len(pods) == 0 {
		return
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, p := range pods {
			if err := e.binder.Touch(ctx, p.Namespace, p.Name, p.UID, why, e.now()); err != nil {
				klog.FromContext(ctx).V(2).Info("Requeue touch failed", "pod", klog.KRef(p.Namespace, p.Name), "err", err)
				continue
			}
			e.metrics.Requeues.Inc()
		}
	}()
}

// refuse emits a Warning event on the pod, at most once a minute per pod
// unless the message changes (the recorder aggregates further).
func (e *Extender) refuse(pod *corev1.Pod, msg string) {
	if e.o.Recorder == nil || pod == nil {
		return
	}
	if !e.decisions.shouldEmit(pod.Namespace+"/"+pod.Name, msg, e.now()) {
		return
	}
	e.metrics.Events.Inc()
	e.o.Recorder.Event(pod, corev1.EventTypeWarning, "GPUUnschedulable", msg)
}
