package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/reserve"
)

// Holder holds room in the ledger for pods about to be admitted
// (*scheduling.Extender).
type Holder interface {
	HoldRoom(pods []*corev1.Pod, model string, expires time.Time) (scheduling.Hold, string)
	ReleaseHold(h scheduling.Hold)
}

// Options configure a Controller.
type Options struct {
	Names  contract.Names
	Client kubernetes.Interface
	// Pods is the extender's (trimmed) pod informer; Namespaces a namespace
	// informer (team and queueing labels).
	Pods       cache.SharedIndexInformer
	Namespaces cache.SharedIndexInformer
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
	reclaimed map[string]time.Time    // workload key -> last reclaim for it
	written   map[types.UID]condWrite // last Queued condition written per pod
	seen      map[types.UID]bool      // pods that got their Queued event
	status    map[string]queuedPod    // pod key -> where it stands, from the last pass
	// parsed holds the last pass's parsed requests (only Pass touches it;
	// passes never run at once).
	parsed map[types.UID]parsedRequest
	// ungated holds the pods this controller ungated, as the API server
	// answered, until the informer shows them ungated: a pass can follow
	// the one that admitted a pod before the informer hears of the update.
	ungated map[types.UID]*corev1.Pod
	teams   map[string]TeamStatus
	// restored is set once the first pass held the recorded reservations.
	restored bool
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
	if o.ReclaimCooldown <= 0 {
		o.ReclaimCooldown = time.Minute
	}
	c := &Controller{o: o, now: o.Now, written: map[types.UID]condWrite{}, seen: map[types.UID]bool{}, reclaimed: map[string]time.Time{},
		status: map[string]queuedPod{}, ungated: map[types.UID]*corev1.Pod{}, teams: map[string]TeamStatus{}}
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
	if !cache.WaitForCacheSync(ctx.Done(), append([]cache.InformerSynced{c.o.Pods.HasSynced, c.o.Namespaces.HasSynced}, c.o.Synced...)...) {
		return
	}
	logger.Info("Queue controller started", "interval", c.o.Interval, "holdTTL", c.o.HoldTTL)
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

// takeUngated hands the pass the pods earlier passes ungated (see
// Controller.ungated); admissions of this pass add to a fresh map.
func (c *Controller) takeUngated() map[types.UID]*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	own := c.ungated
	c.ungated = map[types.UID]*corev1.Pod{}
	return own
}

// keepUngated puts back the written pods the informer still shows gated;
// the others (caught up, or deleted since) are forgotten.
func (c *Controller) keepUngated(still map[types.UID]*corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, w := range still {
		if _, newer := c.ungated[uid]; !newer {
			c.ungated[uid] = w
		}
	}
}

// parsedRequest is a pod's request as its resource version states it.
type parsedRequest struct {
	rv  string
	req placement.Request
	err error
}

// request parses a pod's request, or takes it from the last pass when the
// pod did not change since: a pass reads every GPU pod, and most of them
// are the same as a second ago. It records what it used in next.
func (c *Controller) request(pod *corev1.Pod, next map[types.UID]parsedRequest) (placement.Request, error) {
	if p, ok := c.parsed[pod.UID]; ok && p.rv == pod.ResourceVersion && pod.ResourceVersion != "" {
		next[pod.UID] = p
		return p.req, p.err
	}
	req, err := podreq.FromPod(pod, podreq.Options{Names: c.o.Names, MemoryUnitMiB: c.o.MemoryUnitMiB})
	next[pod.UID] = parsedRequest{rv: pod.ResourceVersion, req: req, err: err}
	return req, err
}

// queuedPod is where a queued pod stands after the last pass; its message
// is formatted when first read.
type queuedPod struct {
	pos Position
	msg *lazyMessage
}

// lazyMessage formats a queued workload's message once, when first asked.
type lazyMessage struct {
	once  sync.Once
	build func() string
	s     string
}

func (l *lazyMessage) String() string {
	l.once.Do(func() { l.s = l.build() })
	return l.s
}

// workload is a queued workload with its pods.
type workload struct {
	w    pkgqueue.Workload
	pods []*corev1.Pod
	hold scheduling.Hold
	// acct is the account the hold was made for.
	acct quota.Account
}

// Pass runs one admission pass.
func (c *Controller) Pass(ctx context.Context) { c.pass(ctx) }

// pass runs one admission pass and reports whether it stopped at
// MaxAdmissionsPerPass.
func (c *Controller) pass(ctx context.Context) (full bool) {
	logger := klog.FromContext(ctx)
	now := c.now()
	q, ok := c.o.Quota()
	if !ok {
		logger.V(2).Info("The quota configuration does not parse; nothing is admitted until it does")
		return false
	}
	cfg := quota.Config{UnknownTeams: quota.UnlimitedUnknown}
	if q != nil {
		cfg = *q
	}
	ns := c.namespaces()
	in := pkgqueue.Input{Config: cfg, Admitted: map[quota.Account]quota.Usage{}, TeamUse: map[string]pkgqueue.Use{},
		Capacity: capacity(c.o.Snapshot()), MaxAdmissions: c.o.MaxAdmissionsPerPass}
	queued := map[string]*workload{}
	partial := map[string][]*corev1.Pod{} // gang key -> gated members of a gang already partly admitted
	admittedGangs := map[string]quota.Account{}
	victims := map[string]*pkgqueue.Victim{} // running admitted work, by workload key
	victimPods := map[string][]*corev1.Pod{}
	parsed := make(map[types.UID]parsedRequest, len(c.parsed))
	defer func() { c.parsed = parsed }() // pods gone since the last pass are forgotten
	own, still := c.takeUngated(), map[types.UID]*corev1.Pod{}
	defer c.keepUngated(still)
	for _, obj := range c.o.Pods.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		if w, mine := own[pod.UID]; mine && podreq.Queued(pod, c.o.Names) {
			// Ungated by an earlier pass, and the informer has not heard
			// yet: the pod counts as admitted, as written (never admitted
			// twice, its quota never counted free).
			pod, still[pod.UID] = w, w
		}
		if podreq.Terminal(pod) || pod.DeletionTimestamp != nil || !podreq.Wants(pod, c.o.Names) {
			continue
		}
		req, err := c.request(pod, parsed)
		if err != nil {
			continue // rota-admission refuses these; the extender explains them at filter
		}
		team := podreq.Team(pod, ns[pod.Namespace], c.o.Names, cfg.AllowPodTeamOverride)
		if _, known := cfg.Teams[team]; !known && cfg.Policy() == quota.UnlimitedUnknown {
			cfg = withUnlimited(cfg, team)
			in.Config = cfg
		}
		amt := amountOf(req.GPUs, req.MemoryUnits, c.o.MemoryUnitMiB)
		ref, _ := podreq.GangOf(pod, c.o.Names)
		if !podreq.Queued(pod, c.o.Names) {
			acct := c.account(cfg, pod, team)
			u := in.Admitted[acct]
			if pod.Spec.NodeName != "" {
				u.Running = u.Running.Add(amt)
			} else {
				u.Pending = u.Pending.Add(amt)
			}
			in.Admitted[acct] = u
			if ends := podreq.DeclaredEnd(pod, c.o.Names, now); !ends.IsZero() && c.o.ReserveQuota {
				if in.Releases == nil {
					in.Releases = map[quota.Account][]pkgqueue.Release{}
				}
				in.Releases[acct] = append(in.Releases[acct], pkgqueue.Release{At: ends, Amount: amt})
			}
			tu := in.TeamUse[team]
			tu.GPUs += amt.GPUs
			tu.MemoryMiB += int64(amt.MemoryMiB)
			tu.CPUMilli += req.CPUMilli
			in.TeamUse[team] = tu
			if ref != nil {
				admittedGangs[ref.Key] = acct
			}
			if pod.Spec.NodeName != "" {
				c.addVictim(victims, victimPods, pod, ref, acct, amt)
			}
			continue
		}
		key := pod.Namespace + "/" + pod.Name
		members := 1
		if ref != nil {
			key = ref.Key
			members = max(1, ref.Size)
		}
		wl := queued[key]
		if wl == nil {
			models, _ := podreq.GPUModels(pod, c.o.Names)
			prio := int32(0)
			if pod.Spec.Priority != nil {
				prio = *pod.Spec.Priority
			}
			wl = &workload{w: pkgqueue.Workload{Key: key, Team: team, Accounts: c.accounts(cfg, team, models), Priority: prio,
				Created: c.o.Owners.Created(pod), Members: members, PerMember: amt, CPUMilli: req.CPUMilli,
				Shape: shape(req, amt, pod, c.o.Names), Ends: podreq.DeclaredEnd(pod, c.o.Names, now)}}
			queued[key] = wl
		}
		wl.pods = append(wl.pods, pod)
		wl.w.Present = len(wl.pods)
		if created := c.o.Owners.Created(pod); created.Before(wl.w.Created) {
			wl.w.Created = created
		}
	}
	// A gang with members admitted and members still gated (an admission
	// cut short, by a failed update or a restart) is completed first: its
	// quota was taken when it was admitted, so its gated members count as
	// admitted too.
	for key, acct := range admittedGangs {
		wl, ok := queued[key]
		if !ok {
			continue
		}
		delete(queued, key)
		partial[key] = wl.pods
		u := in.Admitted[acct]
		u.Pending = u.Pending.Add(wl.w.PerMember.Times(int64(len(wl.pods))))
		in.Admitted[acct] = u
		c.complete(ctx, key, acct, wl, now)
	}
	for _, wl := range queued {
		in.Queued = append(in.Queued, wl.w)
	}
	byKey := queued
	if p := c.o.Reserve; p != nil && c.o.ReserveQuota {
		// A large or long-waiting head that waits for quota keeps it:
		// later work of its team backfills only by declared runtime.
		in.Protected = func(w *pkgqueue.Workload) bool { return p.Protects(w, now) }
	}
	c.restoreClaims(ctx, byKey, now)
	res := pkgqueue.Plan(in, pkgqueue.FitterFunc(func(w *pkgqueue.Workload, a quota.Account) (bool, string) {
		wl := byKey[w.Key]
		slices.SortFunc(wl.pods, func(x, y *corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
		h, reason := c.o.Holder.HoldRoom(wl.pods, a.Model, now.Add(c.o.HoldTTL))
		if reason != "" {
			if c.o.UrgentPriority > 0 && w.Priority >= c.o.UrgentPriority {
				// Admitted without room: kube-scheduler preempts for it.
				wl.hold, wl.acct = scheduling.Hold{}, a
				return true, ""
			}
			return false, reason
		}
		wl.hold, wl.acct = h, a
		return true, ""
	}))
	// The admitting updates are independent round trips (the holds are
	// already in the ledger): AdmitConcurrency workloads at a time, in the
	// queue's order when it is 1.
	sem := make(chan struct{}, c.o.AdmitConcurrency)
	var admitting sync.WaitGroup
	for _, adm := range res.Admitted {
		wl := byKey[adm.Workload.Key]
		sem <- struct{}{}
		admitting.Go(func() {
			defer func() { <-sem }()
			c.admit(ctx, wl, now)
		})
	}
	admitting.Wait()
	if c.o.Reclaim {
		c.reclaim(ctx, in, res, byKey, victims, victimPods, now)
	}
	plans := c.reserve(ctx, res, byKey, now)
	c.report(ctx, in, res, byKey, plans, now)
	if len(res.Admitted) > 0 || len(partial) > 0 {
		logger.V(2).Info("Queue pass", "admitted", len(res.Admitted), "completed", len(partial), "waiting", len(res.Waiting))
	}
	return len(res.Admitted) >= c.o.MaxAdmissionsPerPass
}

// admit removes the gate from every pod of an admitted workload, in one
// update per pod. A pod whose update fails gives its hold back and stays
// queued (a gang's admitted members are completed by the next pass).
func (c *Controller) admit(ctx context.Context, wl *workload, now time.Time) {
	logger := klog.FromContext(ctx)
	waited := now.Sub(wl.w.Created)
	ok := 0
	for i, pod := range wl.pods {
		var a ledger.Allocation
		if i < len(wl.hold.Allocations) {
			a = wl.hold.Allocations[i]
		}
		if err := c.ungate(ctx, pod, wl, a, now); err != nil {
			logger.Error(err, "Admitting a queued pod failed; it stays queued", "pod", klog.KObj(pod))
			c.o.Holder.ReleaseHold(scheduling.Hold{Allocations: []ledger.Allocation{a}})
			continue
		}
		ok++
		c.event(pod, corev1.EventTypeNormal, "Admitted", fmt.Sprintf("admitted to team %s after %s in the queue%s",
			wl.acct, waited.Round(time.Second), where(wl.hold)))
	}
	if ok == 0 {
		return
	}
	c.o.Metrics.Admissions.WithLabelValues(wl.w.Team).Add(float64(ok))
	c.o.Metrics.Wait.WithLabelValues(wl.w.Team).Observe(waited.Seconds())
	logger.V(2).Info("Admitted", "workload", wl.w.Key, "team", wl.w.Team, "account", wl.acct.String(), "pods", ok,
		"waited", waited.Round(time.Millisecond), "where", wl.hold.Where)
}

// complete admits the gated members of a gang that is already partly
// admitted: room is held for them (or they go where they fit) and the gate
// removed, without a quota check.
func (c *Controller) complete(ctx context.Context, key string, acct quota.Account, wl *workload, now time.Time) {
	slices.SortFunc(wl.pods, func(x, y *corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	h, reason := c.o.Holder.HoldRoom(wl.pods, acct.Model, now.Add(c.o.HoldTTL))
	if reason != "" {
		klog.FromContext(ctx).V(2).Info("Completing a partly admitted gang without holding room", "gang", key, "reason", reason)
	}
	wl.hold, wl.acct = h, acct
	c.admit(ctx, wl, now)
}

func where(h scheduling.Hold) string {
	switch {
	case len(h.Allocations) == 0:
		return ""
	case h.Level == placement.TierNode:
		return "; room held on node " + h.Where
	default:
		return "; room held in " + h.Where
	}
}

// ungate is the one update that admits a pod: the gate removed, the
// admission record written, a gang narrowed to its tier, the declared
// runtime enforced. The pod's UID is a precondition.
func (c *Controller) ungate(ctx context.Context, pod *corev1.Pod, wl *workload, a ledger.Allocation, now time.Time) error {
	rec := contract.Admission{Version: contract.Version, AdmittedAt: now.UTC().Truncate(time.Second),
		QueuedFor: now.Sub(wl.w.Created).Round(time.Second).String(), Team: wl.acct.Team, Model: wl.acct.Model}
	if a.PodUID == string(pod.UID) && len(a.GPUs) > 0 {
		as := podreq.ToAssignment(a)
		rec.Hold, rec.HoldUntil = &as, a.Expires.UTC()
	}
	data, err := rec.Marshal()
	if err != nil {
		return err
	}
	spec := map[string]any{
		"schedulingGates": []map[string]any{{"name": c.o.Names.QueueGate, "$patch": "delete"}},
	}
	if sel := c.tierSelector(wl.hold); sel != nil {
		spec["nodeSelector"] = sel
	}
	if d, ok, err := podreq.MaxRuntime(pod, c.o.Names); err == nil && ok {
		secs := int64(math.Ceil(d.Seconds()))
		if pod.Spec.ActiveDeadlineSeconds == nil || *pod.Spec.ActiveDeadlineSeconds > secs {
			spec["activeDeadlineSeconds"] = secs
		}
	}
	annotations := map[string]any{c.o.Names.AdmissionAnnotation: string(data)}
	if _, ok := pod.Annotations[c.o.Names.ReservationAnnotation]; ok {
		annotations[c.o.Names.ReservationAnnotation] = nil // the reservation ends with the admission
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID, "annotations": annotations},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	got, err := c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "rota-queue"})
	if err != nil {
		return fmt.Errorf("admit pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.mu.Lock()
	c.ungated[pod.UID] = got
	delete(c.written, pod.UID)
	delete(c.seen, pod.UID)
	c.mu.Unlock()
	return nil
}

// tierSelector narrows a gang to its planned tier: a node selector on the
// tier label (allowed on a gated pod, as a narrowing). A gang planned onto
// one node, or across the cluster, needs none: each member's hold already
// names its node.
func (c *Controller) tierSelector(h scheduling.Hold) map[string]string {
	if len(h.Allocations) < 2 || h.Level < 0 || h.Level >= len(c.o.TierLabels) {
		return nil
	}
	return map[string]string{c.o.TierLabels[h.Level]: h.Where}
}

// report writes where each waiting pod stands and refreshes the positions
// and metrics.
func (c *Controller) report(ctx context.Context, in pkgqueue.Input, res pkgqueue.Result, byKey map[string]*workload,
	plans map[string]*reserve.Plan, now time.Time) {
	status := make(map[string]queuedPod, len(res.Waiting))
	teams := map[string]TeamStatus{}
	for t, u := range in.TeamUse {
		teams[t] = TeamStatus{Team: t, GPUs: u.GPUs, MemoryMiB: u.MemoryMiB}
	}
	for key, st := range res.Waiting {
		wl := byKey[key]
		ts := teams[wl.w.Team]
		ts.Team = wl.w.Team
		ts.Queued += len(wl.pods)
		teams[wl.w.Team] = ts
		var reservation string
		var start *time.Time
		if p := plans[key]; p != nil {
			reservation = p.Summary()
			if !p.Start.IsZero() {
				t := p.Start.UTC()
				start = &t
			}
		}
		// The message is written out only where it is read: a condition
		// due for a write, a first Queued event, /debug/queue. With a deep
		// queue most pods need none of these in a pass.
		msg := &lazyMessage{build: func() string {
			m := fmt.Sprintf("position %d of %d in team %s; %s", st.Position, st.Of, wl.w.Team, st.Message)
			if st.Ahead > 0 {
				m += fmt.Sprintf("; %d ahead need %s", st.Ahead, st.AheadNeed)
			}
			if reservation != "" {
				m += "; room held: " + reservation
			}
			return m
		}}
		for _, pod := range wl.pods {
			k := pod.Namespace + "/" + pod.Name
			status[k] = queuedPod{msg: msg, pos: Position{Pod: k, Workload: key, Team: wl.w.Team, Position: st.Position, Of: st.Of,
				Reason: string(st.Reason), Waiting: now.Sub(wl.w.Created).Seconds(),
				Reservation: reservation, ExpectedStart: start}}
			c.condition(ctx, pod, string(st.Reason), msg, now)
		}
	}
	oldest := map[string]float64{}
	for key := range res.Waiting {
		wl := byKey[key]
		oldest[wl.w.Team] = max(oldest[wl.w.Team], now.Sub(wl.w.Created).Seconds())
	}
	for t, ts := range teams {
		ts.Share = shareOf(in, t)
		teams[t] = ts
		c.o.Metrics.Length.WithLabelValues(t).Set(float64(ts.Queued))
		c.o.Metrics.OldestWait.WithLabelValues(t).Set(oldest[t])
	}
	queuedUIDs := map[types.UID]bool{}
	for _, wl := range byKey {
		for _, p := range wl.pods {
			queuedUIDs[p.UID] = true
		}
	}
	c.mu.Lock()
	c.status, c.teams = status, teams
	// Forget pods that left the queue (admitted, deleted).
	for uid := range c.written {
		if !queuedUIDs[uid] {
			delete(c.written, uid)
		}
	}
	for uid := range c.seen {
		if !queuedUIDs[uid] {
			delete(c.seen, uid)
		}
	}
	c.mu.Unlock()
}

func shareOf(in pkgqueue.Input, team string) float64 {
	u := in.TeamUse[team]
	s := 0.0
	if in.Capacity.GPUs > 0 {
		s = max(s, float64(u.GPUs)/float64(in.Capacity.GPUs))
	}
	if in.Capacity.MemoryMiB > 0 {
		s = max(s, float64(u.MemoryMiB)/float64(in.Capacity.MemoryMiB))
	}
	if in.Capacity.CPUMilli > 0 {
		s = max(s, float64(u.CPUMilli)/float64(in.Capacity.CPUMilli))
	}
	return s
}

// condition writes the Queued condition when its message changed, at most
// once per ConditionInterval per pod and within the cluster-wide rate.
func (c *Controller) condition(ctx context.Context, pod *corev1.Pod, reason string, lazy *lazyMessage, now time.Time) {
	c.mu.Lock()
	last, wrote := c.written[pod.UID]
	first := !c.seen[pod.UID]
	c.seen[pod.UID] = true
	c.mu.Unlock()
	if first {
		c.event(pod, corev1.EventTypeNormal, "Queued", lazy.String())
	}
	if wrote && now.Sub(last.at) < c.o.ConditionInterval {
		return
	}
	if c.limiter.TokensAt(now) < 1 {
		return // the cluster-wide rate is spent: no write, so no message
	}
	msg := lazy.String()
	if wrote && last.msg == msg {
		return
	}
	if !c.limiter.AllowN(now, 1) {
		return
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodConditionType(c.o.Names.QueuedCondition), Status: corev1.ConditionTrue,
		Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(now)}}}})
	if err != nil {
		return
	}
	_, err = c.o.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: "rota-queue"}, "status")
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Writing the Queued condition failed", "pod", klog.KObj(pod), "reason", err.Error())
		return
	}
	c.o.Metrics.ConditionWrites.Inc()
	c.mu.Lock()
	c.written[pod.UID] = condWrite{at: now, msg: msg}
	c.mu.Unlock()
}

func (c *Controller) event(pod *corev1.Pod, typ, reason, msg string) {
	if c.o.Recorder != nil {
		c.o.Recorder.Event(pod, typ, reason, msg)
	}
}

// withUnlimited returns cfg with an entry for team that never runs out: a
// team the configuration does not list, while unknown teams are unlimited.
// The map is copied; cfg is not changed.
func withUnlimited(cfg quota.Config, team string) quota.Config {
	teams := make(map[string]quota.Team, len(cfg.Teams)+1)
	for k, v := range cfg.Teams {
		teams[k] = v
	}
	teams[team] = quota.Team{GPUs: math.MaxInt32, GPUMemoryGiB: math.MaxInt32}
	cfg.Teams = teams
	return cfg
}

func (c *Controller) accounts(cfg quota.Config, team string, models []string) []quota.Account {
	return accountsOf(cfg, team, models)
}

// accountsOf lists the accounts a team's pod asking for models may be
// charged to: an unknown team's own when unknown teams are unlimited.
func accountsOf(cfg quota.Config, team string, models []string) []quota.Account {
	if _, ok := cfg.Teams[team]; !ok {
		if cfg.Policy() == quota.UnlimitedUnknown {
			return []quota.Account{{Team: team}}
		}
		return nil
	}
	return cfg.Accounts(team, models)
}

// account is the account an admitted pod is charged to: its admission
// record's, else the first its team and models allow.
func (c *Controller) account(cfg quota.Config, pod *corev1.Pod, team string) quota.Account {
	return accountOf(cfg, c.o.Names, pod, team)
}

func accountOf(cfg quota.Config, names contract.Names, pod *corev1.Pod, team string) quota.Account {
	if adm, err := podreq.AdmissionOf(pod, names); err == nil && adm != nil {
		return quota.Account{Team: adm.Team, Model: adm.Model}
	}
	models, _ := podreq.GPUModels(pod, names)
	if as := accountsOf(cfg, team, models); len(as) > 0 {
		return as[0]
	}
	return quota.Account{Team: team}
}

// amountOf is what a pod's request counts in quota.
func amountOf(gpus int, memoryUnits int64, unit contract.MiB) quota.Amount {
	return quota.Amount{GPUs: int64(gpus), MemoryMiB: contract.MiB(memoryUnits) * unit}
}

func (c *Controller) namespaces() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, obj := range c.o.Namespaces.GetStore().List() {
		if n, ok := obj.(metav1.Object); ok {
			out[n.GetName()] = n.GetLabels()
		}
	}
	return out
}

func capacity(s *ledger.Snapshot) pkgqueue.Capacity {
	var c pkgqueue.Capacity
	if s == nil {
		return c
	}
	for _, name := range s.Names() {
		ni := s.Node(name)
		if ni == nil || ni.Node == nil {
			continue
		}
		c.GPUs += int64(len(ni.Node.GPUs))
		for _, g := range ni.Node.GPUs {
			c.MemoryMiB += int64(g.MemoryMiB)
		}
		c.CPUMilli += ni.Node.CPUMilli
	}
	return c
}

// shape groups workloads whose room is decided alike (pkg/queue skips a
// shape that failed in the pass): the same request, and the same declared
// runtime, since a reservation's held room admits a pod by its end.
func shape(r placement.Request, amt quota.Amount, pod *corev1.Pod, names contract.Names) string {
	d, _, _ := podreq.MaxRuntime(pod, names)
	return fmt.Sprintf("%d/%d/%d/%d/%s/%s", amt.GPUs, amt.MemoryMiB, r.CPUMilli, r.HostMemoryMiB, strings.Join(r.Models, ","), d)
}

// addVictim records a running admitted pod as reclaimable work: a pod
// alone, or its whole gang (evicting one member would break it).
func (c *Controller) addVictim(victims map[string]*pkgqueue.Victim, pods map[string][]*corev1.Pod, pod *corev1.Pod,
	ref *podreq.GangRef, acct quota.Account, amt quota.Amount) {
	key := pod.Namespace + "/" + pod.Name
	if ref != nil {
		key = ref.Key
	}
	v := victims[key]
	if v == nil {
		v = &pkgqueue.Victim{Key: key, Team: acct.Team, Account: acct, Preemptible: podreq.Preemptible(pod, c.o.Names),
			Protected: ref != nil && c.o.MaxPreemptibleGangSize > 0 && ref.Size > c.o.MaxPreemptibleGangSize}
		victims[key] = v
	}
	v.Amount = v.Amount.Add(amt)
	v.Preemptible = v.Preemptible && podreq.Preemptible(pod, c.o.Names)
	if adm, err := podreq.AdmissionOf(pod, c.o.Names); err == nil && adm != nil {
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
	for _, v := range victims {
		vs = append(vs, *v)
	}
	keys := make([]string, 0, len(res.Waiting))
	for k, st := range res.Waiting {
		if st.Reason == pkgqueue.WaitRoom {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return pkgqueue.Less(&byKey[a].w, &byKey[b].w) })
	for _, k := range keys {
		wl := byKey[k]
		c.mu.Lock()
		last, recent := c.reclaimed[k]
		c.mu.Unlock()
		if recent && now.Sub(last) < c.o.ReclaimCooldown {
			continue
		}
		for _, a := range wl.w.Accounts {
			chosen := pkgqueue.Reclaim(in.Config, in.Admitted, &wl.w, a, vs)
			if len(chosen) == 0 {
				continue
			}
			c.mu.Lock()
			c.reclaimed[k] = now
			c.mu.Unlock()
			for _, v := range chosen {
				for _, p := range victimPods[v.Key] {
					msg := fmt.Sprintf("evicted to return team %s's guarantee (team %s borrows above its own)", a.Team, v.Team)
					if err := c.evict(ctx, p); err != nil {
						logger.Error(err, "Reclaim eviction failed", "pod", klog.KObj(p))
						continue
					}
					c.event(p, corev1.EventTypeWarning, "Reclaimed", msg)
				}
			}
			for _, p := range wl.pods {
				c.event(p, corev1.EventTypeNormal, "Reclaiming", fmt.Sprintf("evicting %d workloads that other teams borrowed to return team %s's guarantee", len(chosen), a.Team))
			}
			c.o.Metrics.Reclaims.WithLabelValues(a.Team).Inc()
			logger.Info("Reclaimed borrowed capacity", "workload", k, "account", a.String(), "victims", len(chosen))
			return
		}
	}
}

// evict asks the API server to evict a pod (policy/v1), with the pod's own
// grace period.
func (c *Controller) evict(ctx context.Context, pod *corev1.Pod) error {
	return c.o.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}},
	})
}
