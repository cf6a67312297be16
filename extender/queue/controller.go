package queue

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/reserve"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// Holder holds room in the ledger for pods about to be admitted
// (*room.Planner).
type Holder interface {
	HoldRoom(pods []*corev1.Pod, scope room.Scope, expires time.Time) (room.Hold, string)
	ReleaseHold(h room.Hold)
}

// Options configure a Controller.
type Options struct {
	Names contract.Names
	// Records signs the records this part writes and decides which it
	// believes (podreq.Records; the zero value signs and checks nothing).
	Records podreq.Records
	// Parser is the process's one parse of pods' requests (the extender's);
	// nil makes one from Names, MemoryUnitMiB and Records.
	Parser *podreq.Parser
	Client kubernetes.Interface
	// Pods is the extender's (trimmed) pod informer; Namespaces a namespace
	// informer (team and queueing labels).
	Pods       cache.SharedIndexInformer
	Namespaces cache.SharedIndexInformer
	// Jobs is a batch/v1 Job informer: the queue reads the Jobs queued
	// suspended from it (jobs.go). nil reads none (their pods, once some
	// other writer unsuspends them, queue as gated pods).
	Jobs cache.SharedIndexInformer
	// PriorityClasses is a scheduling/v1 PriorityClass informer: the pods
	// of a Job or JobSet queued suspended, which do not exist yet, queue at
	// the priority the API server will give them (priority.go). nil queues
	// them at the priority their template spells out, if any.
	PriorityClasses cache.SharedIndexInformer
	// Dynamic patches the JobSets queued suspended, which Owners reads
	// (Owners.QueueJobSets); nil admits none.
	Dynamic dynamic.Interface
	// Quota returns the current quota configuration: nil when there is
	// none (every team is then admitted without quota, as rota-admission
	// does); ok false while the configuration exists but does not parse
	// (the pass then admits nothing).
	Quota func() (cfg *quota.Config, ok bool)
	// Synced are further informers to wait for before the first pass.
	Synced []cache.InformerSynced
	// Owners gives a queued pod its owning Job's or JobSet's age (nil: the
	// pod's own); its Run and HasSynced are the caller's to wire.
	Owners *Owners
	Holder Holder
	// Snapshot is the ledger's (cluster capacity for fair share).
	Snapshot func() *ledger.Snapshot
	// TierLabels are the topology tier labels, narrowest first (a gang is
	// narrowed to its planned tier with a node selector on one of them).
	TierLabels []string
	Recorder   record.EventRecorder
	Metrics    *Metrics
	// Interval between passes; HoldTTL how long room stays held for an
	// admitted pod that has not bound.
	Interval time.Duration
	HoldTTL  time.Duration
	// Narrow narrows an admitted single pod that a controller owns, without
	// required node affinity of its own, to its hold's candidates (see
	// narrowing); Holder names how many.
	Narrow bool
	// ConditionInterval is the least time between two Queued condition
	// writes on one pod; ConditionQPS bounds them cluster-wide.
	ConditionInterval time.Duration
	ConditionQPS      float64
	// MaxAdmissionsPerPass bounds one pass's admissions.
	MaxAdmissionsPerPass int
	// AdmitConcurrency is how many admitted workloads of one pass have
	// their admitting updates in flight at once (default 1: one after the
	// other, in the queue's order). Each update is an API round trip
	// through the validating webhook: one after the other, a pass of 200
	// admissions took 14 s on a loaded API server (make load,
	// ROTA_LOAD_QUEUEING=1), 6.7 s with 16 at once. Above 1, the pods of
	// one pass reach the API server, and kube-scheduler's queue, in no set
	// order. A gang's members are always updated one after the other.
	AdmitConcurrency int
	// MemoryUnitMiB converts gpu-memory units for quota (0: the default).
	MemoryUnitMiB contract.MiB
	// UrgentPriority: a queued pod at or above this priority is admitted
	// when its quota allows even without room, so that kube-scheduler's
	// priority preemption (and the extender's preempt verb) can make room
	// for it. 0 turns it off.
	UrgentPriority int32
	// Reclaim evicts borrowed work (Eviction API) for a team below its
	// guarantee whose queued work waits for room; MaxPreemptibleGangSize
	// protects larger gangs; ReclaimCooldown is the least time between two
	// reclaims for one workload (evictions take their grace period).
	Reclaim                bool
	MaxPreemptibleGangSize int
	ReclaimCooldown        time.Duration
	// StopCost weighs what a reclaim loses (the default checkpoint
	// interval, the cap on a pod's own minimum runtime; the team's comes
	// from the quota).
	StopCost stopcost.Policy
	// MaxCheckpointGrace caps a pod's checkpoint-grace annotation when the
	// queue evicts it (reclaim, moves); a pod without one gets its own
	// terminationGracePeriodSeconds.
	MaxCheckpointGrace time.Duration
	// Defrag moves movable pods to make room for a waiting pod of a team
	// whose quota sets defrag (off when MaxMovedShare is 0 or Defragger is
	// nil).
	Defrag    Defrag
	Defragger Defragger
	// DeadlineLead: inside its team and priority, a queued workload whose
	// latest start (its deadline less its runtime) is at most this far off
	// goes ahead of the others (pkgqueue.Input.DeadlineLead); 0: none does.
	DeadlineLead time.Duration
	// FairShareHalfLife is fair share's memory of past use
	// (pkgqueue.History); 0 orders teams by current use only. The history
	// is kept in the ConfigMap HistoryConfigMap in HistoryNamespace,
	// written by the leader at most every HistoryWriteInterval (0: 10 s)
	// and read when it starts leading.
	FairShareHalfLife    time.Duration
	HistoryNamespace     string
	HistoryConfigMap     string
	HistoryWriteInterval time.Duration
	// Reserve, when set, holds room for queue heads that wait for room
	// (reservations and backfill, pkg/reserve) through Reserver.
	Reserve  *reserve.Policy
	Reserver Reserver
	// ReserveQuota keeps a protected head's team quota for it while it
	// waits for quota (pkgqueue.Input.Protected).
	ReserveQuota bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Controller admits queued pods. Build it with New; Run it on the leader.
// It is safe for concurrent use: Positions may be called while Run runs.
type Controller struct {
	o       Options
	now     func() time.Time
	limiter *rate.Limiter

	mu        sync.Mutex
	reclaimed map[string]time.Time // workload key -> last reclaim for it
	moves     []time.Time          // defragmentation evictions in the last hour (defrag.go)
	holds     map[string]roomHold  // workload key -> room freed for it by moves or reclaim (holds.go)
	// history is fair share's memory (history.go); only Run's passes touch
	// it and the two fields after it.
	history       pkgqueue.History
	historyLoaded bool
	historySaved  time.Time
	requeued      map[types.UID]time.Time // stranded narrowed pod -> its eviction (narrow.go)
	written       map[types.UID]condWrite // last Queued condition written per pod
	seen          map[types.UID]bool      // pods that got their Queued event
	late          map[types.UID]bool      // pods told they miss their deadline
	status        map[string]queuedPod    // pod key -> where it stands, from the last pass
	// disbelief holds the admission records a pass did not believe, as
	// "team/model/signature" by pod, so each is reported once (only Pass
	// touches it).
	disbelief map[types.UID]string
	// ungated holds the pods this controller ungated, as the API server
	// answered, until the informer shows them ungated: a pass can follow
	// the one that admitted a pod before the informer hears of the update.
	ungated map[types.UID]*corev1.Pod
	teams   map[string]TeamStatus
	groups  []contract.QueueGroup
	// restored is set once the first pass held the recorded reservations.
	restored bool
	// Jobs queued suspended (jobs.go): the Jobs patched and not yet seen
	// so by the informer, each Job's planned pods, the room held for
	// admitted Jobs until their pods come, the admitted Jobs of the last
	// pass (for reclaim).
	jobWrites    map[types.UID]jobWrite
	jobPlans     map[types.UID]*jobPlan
	jobHolds     map[types.UID]room.Hold
	admittedJobs map[types.UID]*jobState
	// jobSetsWaitSince is when passes began to wait for the JobSet cache
	// (zero: they do not); jobSetsWarned that the wait was reported.
	jobSetsWaitSince time.Time
	jobSetsWarned    bool
	// events gathers the current pass's Queued and Admitted events (only
	// Pass replaces it; passes never run at once).
	events *passEvents
}

type condWrite struct {
	at  time.Time
	msg string
}

// Position is where a queued pod stands (served on /debug/queue).
type Position = contract.QueuePosition

// TeamStatus is one team's queue and admitted use.
type TeamStatus = contract.QueueTeam

// New builds a Controller.
func New(o Options) (*Controller, error) {
	if o.Client == nil || o.Pods == nil || o.Namespaces == nil || o.Holder == nil || o.Snapshot == nil || o.Quota == nil {
		return nil, fmt.Errorf("queue: client, pod and namespace informers, holder, snapshot and quota are required")
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.HoldTTL <= 0 {
		o.HoldTTL = 5 * time.Minute
	}
	if o.ConditionInterval <= 0 {
		o.ConditionInterval = 10 * time.Second
	}
	if o.ConditionQPS <= 0 {
		o.ConditionQPS = 20
	}
	if o.MaxAdmissionsPerPass <= 0 {
		o.MaxAdmissionsPerPass = 200
	}
	if o.AdmitConcurrency <= 0 {
		o.AdmitConcurrency = 1
	}
	if o.MemoryUnitMiB <= 0 {
		o.MemoryUnitMiB = contract.DefaultMemoryUnitMiB
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Parser == nil {
		o.Parser = podreq.NewParser(podreq.Options{Names: o.Names, MemoryUnitMiB: o.MemoryUnitMiB}, o.Records, 0)
	}
	if o.ReclaimCooldown <= 0 {
		o.ReclaimCooldown = time.Minute
	}
	c := &Controller{o: o, now: o.Now, written: map[types.UID]condWrite{}, seen: map[types.UID]bool{}, late: map[types.UID]bool{}, reclaimed: map[string]time.Time{}, holds: map[string]roomHold{}, requeued: map[types.UID]time.Time{},
		status: map[string]queuedPod{}, ungated: map[types.UID]*corev1.Pod{}, teams: map[string]TeamStatus{}, events: newPassEvents(),
		jobWrites: map[types.UID]jobWrite{}, jobPlans: map[types.UID]*jobPlan{}, jobHolds: map[types.UID]room.Hold{}}
	if c.now == nil {
		c.now = time.Now
	}
	c.limiter = rate.NewLimiter(rate.Limit(o.ConditionQPS), max(1, int(o.ConditionQPS)))
	return c, nil
}

// Run passes every Interval until ctx ends; a pass that admitted as many
// as MaxAdmissionsPerPass is followed at once by the next (a backlog drains
// at the pace of its admitting updates, not of the interval).
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("queue")
	ctx = klog.NewContext(ctx, logger)
	synced := append([]cache.InformerSynced{c.o.Pods.HasSynced, c.o.Namespaces.HasSynced}, c.o.Synced...)
	if c.o.Jobs != nil {
		synced = append(synced, c.o.Jobs.HasSynced)
	}
	if c.o.PriorityClasses != nil {
		synced = append(synced, c.o.PriorityClasses.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	c.historyLoaded = false // read again: another leader may have kept it since
	logger.Info("Queue controller started", "interval", c.o.Interval, "holdTTL", c.o.HoldTTL, "fairShareHalfLife", c.o.FairShareHalfLife)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.pass(ctx) && ctx.Err() == nil {
		}
	}, c.o.Interval)
}

// Positions returns where every queued pod stood after the last pass, and
// each team's queue (for /debug/queue, kubectl rota queue and /ui).
func (c *Controller) Positions() ([]Position, []TeamStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := make([]Position, 0, len(c.status))
	for _, q := range c.status {
		p := q.pos
		p.Message = q.msg.String()
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Team != ps[j].Team {
			return ps[i].Team < ps[j].Team
		}
		if ps[i].Position != ps[j].Position {
			return ps[i].Position < ps[j].Position
		}
		return ps[i].Pod < ps[j].Pod
	})
	ts := make([]TeamStatus, 0, len(c.teams))
	for _, t := range c.teams {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Team < ts[j].Team })
	return ps, ts
}
