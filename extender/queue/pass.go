package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
)

// workload is a queued workload with its pods.
type workload struct {
	w    pkgqueue.Workload
	pods []*corev1.Pod
	hold room.Hold
	// acct is the account the hold was made for.
	acct quota.Account
	// job is set for a Job or JobSet queued suspended (jobs.go): pods are
	// then its planned pods, which the API does not hold.
	job queuedOwner
}

// passState is what a pass reads from the informer: the queue's input,
// the queued workloads, and the admitted work by gang and as victims.
type passState struct {
	in            pkgqueue.Input
	queued        map[string]*workload
	admittedGangs map[string]quota.Account    // gang key -> account, for gangs with admitted members
	gangAdmitted  map[string]int              // gang key -> its admitted members that have not ended
	victims       map[string]*pkgqueue.Victim // running admitted work, by workload key
	victimPods    map[string][]*corev1.Pod
	seen          map[types.UID]bool        // the GPU pods (and Jobs queued suspended) this pass read
	still         map[types.UID]*corev1.Pod // ungated here, still gated in the informer
	stranded      []strandedPod             // narrowed, unplaced past their hold (narrow.go)
	// Jobs queued suspended (jobs.go): by UID, the gated pods of admitted
	// ones to admit, and the suspended admitted ones to requeue.
	jobs    map[types.UID]*jobState
	jobPods []jobAdmission
	requeue []*jobState
}

// collect reads every GPU pod once: admitted ones count against their
// teams' quota, gated ones join their workloads. It returns nil while the
// JobSet cache has not synced (an admitted JobSet's charge would be
// missed).
func (c *Controller) collect(logger klog.Logger, cfg quota.Config, now time.Time) *passState {
	ns := c.namespaces()
	st := &passState{
		in: pkgqueue.Input{Config: cfg, Admitted: map[quota.Account]quota.Usage{}, TeamUse: map[string]pkgqueue.Use{},
			Capacity: capacity(c.o.Snapshot()), MaxAdmissions: c.o.MaxAdmissionsPerPass},
		queued: map[string]*workload{}, admittedGangs: map[string]quota.Account{}, gangAdmitted: map[string]int{},
		victims: map[string]*pkgqueue.Victim{}, victimPods: map[string][]*corev1.Pod{},
		seen: map[types.UID]bool{}, still: map[types.UID]*corev1.Pod{},
	}
	own := c.takeUngated()
	var ready bool
	if st.jobs, ready = c.readJobs(logger, cfg, ns); !ready {
		return nil
	}
	for uid := range st.jobs {
		st.seen[uid] = true // a Job's unbelieved record is reported once too
	}
	for _, obj := range c.o.Pods.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		if w, mine := own[pod.UID]; mine && podreq.Queued(pod, c.o.Names) {
			// Ungated by an earlier pass, and the informer has not heard
			// yet: the pod counts as admitted, as written (never admitted
			// twice, its quota never counted free).
			pod, st.still[pod.UID] = w, w
		}
		if js := ownerOf(st.jobs, pod); js != nil && !podreq.Terminal(pod) {
			js.present++ // terminating ones too: a Job taken back requeues once none is left
		}
		if podreq.Terminal(pod) || pod.DeletionTimestamp != nil || !podreq.Wants(pod, c.o.Names) {
			continue
		}
		p := c.o.Parser.Of(pod)
		st.seen[pod.UID] = true
		if p.Err != nil {
			continue // rota-admission refuses these; the extender explains them at filter
		}
		if p.Admission == nil && !podreq.Queued(pod, c.o.Names) && podreq.KueueQueues(ns[pod.Namespace], c.o.Names) {
			// Kueue admitted it (the namespace is Kueue's to queue): its
			// ClusterQueue is charged, no account of Rota's. Rota still
			// places it; the ledger counts its GPUs.
			continue
		}
		req := p.Request
		team := podreq.Team(pod, ns[pod.Namespace], c.o.Names, cfg.AllowPodTeamOverride)
		if _, known := cfg.Teams[team]; !known && cfg.Policy() == quota.UnlimitedUnknown {
			cfg = withUnlimited(cfg, team)
			st.in.Config = cfg
		}
		amt := quota.AmountOf(req.GPUs, req.MemoryUnits, c.o.MemoryUnitMiB)
		ref := p.Gang
		if !podreq.Queued(pod, c.o.Names) {
			c.countAdmitted(logger, st, cfg, pod, p, team, amt, ref, now)
			if js := ownerOf(st.jobs, pod); js != nil && js.adm != nil && amt == js.plan.amt {
				js.active++
			}
			if rec, ok := c.stranded(pod, now); ok {
				st.stranded = append(st.stranded, strandedPod{pod: pod, rec: rec})
			}
			continue
		}
		if js := jobMember(st.jobs, pod, p, amt); js != nil {
			js.gated = append(js.gated, queuedMember{pod: pod, p: p, team: team, amt: amt})
			continue
		}
		c.addQueued(st, cfg, pod, p, team, amt, now)
	}
	c.addJobs(st, st.in.Config, st.jobs, now)
	return st
}

// countAdmitted charges an admitted pod (ungated, pending or running) to
// its team's account, and records it as work reclaim may take back.
func (c *Controller) countAdmitted(logger klog.Logger, st *passState, cfg quota.Config, pod *corev1.Pod, p *podreq.Parsed,
	team string, amt quota.Amount, ref *podreq.GangRef, now time.Time) {
	in := &st.in
	req, adm := p.Request, p.Admission
	acct, believed := accountFrom(cfg, team, p.Models, adm)
	switch {
	case p.Unsigned != nil:
		c.disbelieved(logger, pod, p.Unsigned, acct, "does not carry Rota's signature for this pod")
	case !believed:
		c.disbelieved(logger, pod, adm, acct, fmt.Sprintf("names team %q (account %q), but the pod's team is %q "+
			"(if the namespace's team label changed since, the record is merely stale)", adm.Team, adm.Model, team))
	}
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
		st.admittedGangs[ref.Key] = acct
		st.gangAdmitted[ref.Key]++
	}
	if pod.Spec.NodeName != "" {
		c.addVictim(st.victims, st.victimPods, pod, adm, ref, acct, amt)
	}
}

// addQueued adds a gated pod to its workload (the pod alone, or its gang).
func (c *Controller) addQueued(st *passState, cfg quota.Config, pod *corev1.Pod, p *podreq.Parsed, team string,
	amt quota.Amount, now time.Time) {
	req, ref, key := p.Request, p.Gang, p.Key()
	members := 1
	if ref != nil {
		members = max(1, ref.Size)
	}
	wl := st.queued[key]
	if wl == nil {
		models := p.Models
		prio := int32(0)
		if pod.Spec.Priority != nil {
			prio = *pod.Spec.Priority
		}
		wl = &workload{w: pkgqueue.Workload{Key: key, Team: team, Accounts: c.accounts(cfg, team, models), Priority: prio,
			Created: c.o.Owners.Created(pod), Members: members, PerMember: amt, CPUMilli: req.CPUMilli,
			Shape: shape(req, amt, pod, c.o.Names), Ends: podreq.DeclaredEnd(pod, c.o.Names, now),
			LatestStart: podreq.LatestStart(pod, c.o.Names)}}
		st.queued[key] = wl
	}
	wl.pods = append(wl.pods, pod)
	wl.w.Present = len(wl.pods)
	if created := c.o.Owners.Created(pod); created.Before(wl.w.Created) {
		wl.w.Created = created
	}
}

// jobSetsUnsynced notes a pass skipped while the JobSet cache has not
// synced (an admitted JobSet's charge would be missed): said once when it
// lasts a minute (rota-extender cannot list or watch JobSets?).
func (c *Controller) jobSetsUnsynced(logger klog.Logger, now time.Time) {
	logger.V(2).Info("The JobSet cache has not synced; nothing is admitted until it has")
	switch {
	case c.jobSetsWaitSince.IsZero():
		c.jobSetsWaitSince = now
	case now.Sub(c.jobSetsWaitSince) >= time.Minute && !c.jobSetsWarned:
		c.jobSetsWarned = true
		logger.Error(nil, "The JobSet cache has not synced for a minute: the queue admits nothing until it has; does rota-extender's ClusterRole let it list and watch jobsets?",
			"since", c.jobSetsWaitSince)
	}
}

// Pass runs one admission pass.
func (c *Controller) Pass(ctx context.Context) { c.pass(ctx) }

// pass runs one admission pass and reports whether it stopped at
// MaxAdmissionsPerPass.
func (c *Controller) pass(ctx context.Context) (full bool) {
	logger := klog.FromContext(ctx)
	c.events = newPassEvents()
	defer c.emitEvents(c.events)
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
	st := c.collect(logger, cfg, now)
	if st == nil {
		c.jobSetsUnsynced(logger, now)
		return false
	}
	c.jobSetsWaitSince = time.Time{}
	defer func() { c.forgetDisbelief(st.seen) }() // pods gone since the last pass are forgotten
	defer c.keepUngated(st.still)
	in, queued, admittedGangs, victims, victimPods := st.in, st.queued, st.admittedGangs, st.victims, st.victimPods
	partial := map[string][]*corev1.Pod{} // gang key -> gated members of a gang already partly admitted
	// A gang with members admitted and members still gated (an admission
	// cut short, by a failed update or a restart) is completed first: its
	// quota was taken when it was admitted, so its gated members count as
	// admitted too, up to the gang's size. A gated pod past that (its
	// owner's, naming an admitted gang) is not the gang's to admit: it
	// waits in the queue as a gang of its own, for quota.
	for key, acct := range admittedGangs {
		wl, ok := queued[key]
		if !ok {
			continue
		}
		room := wl.w.Members - st.gangAdmitted[key]
		if room <= 0 {
			continue
		}
		if len(wl.pods) > room {
			slices.SortFunc(wl.pods, func(x, y *corev1.Pod) int {
				return cmp.Or(x.CreationTimestamp.Compare(y.CreationTimestamp.Time), strings.Compare(x.Name, y.Name))
			})
			rest := *wl
			rest.pods = wl.pods[room:]
			rest.w.Present = len(rest.pods)
			queued[key] = &rest
			wl.pods = wl.pods[:room:room]
		} else {
			delete(queued, key)
		}
		partial[key] = wl.pods
		u := in.Admitted[acct]
		u.Pending = u.Pending.Add(wl.w.PerMember.Times(int64(len(wl.pods))))
		in.Admitted[acct] = u
		c.complete(ctx, key, acct, wl, now)
	}
	for _, ja := range st.jobPods {
		c.admitJobPods(ctx, ja, now)
	}
	for _, js := range st.requeue {
		c.requeueJob(ctx, js)
	}
	c.noteAdmittedJobs(st.jobs)
	c.forgetJobHolds(st.jobs)
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
	in.Past = c.pastUse(ctx)
	in.Now, in.DeadlineLead = now, c.o.DeadlineLead
	res := pkgqueue.Plan(in, pkgqueue.FitterFunc(func(w *pkgqueue.Workload, a quota.Account) (bool, string) {
		wl := byKey[w.Key]
		slices.SortFunc(wl.pods, func(x, y *corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
		h, reason := c.o.Holder.HoldRoom(wl.pods, c.scope(a), now.Add(c.o.HoldTTL))
		if reason != "" {
			if c.o.UrgentPriority > 0 && w.Priority >= c.o.UrgentPriority {
				// Admitted without room: kube-scheduler preempts for it.
				wl.hold, wl.acct = room.Hold{}, a
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
			if wl.job != nil {
				c.admitJob(ctx, wl, now)
				return
			}
			c.admit(ctx, wl, now)
		})
	}
	admitting.Wait()
	c.observeHistory(ctx, in, res, now)
	c.requeue(ctx, st.stranded, now)
	c.keepHolds(byKey, now)
	if c.o.Reclaim {
		c.reclaim(ctx, in, res, byKey, victims, victimPods, now)
	}
	c.defrag(ctx, cfg, res, byKey, victims, victimPods, now)
	c.tellHolds(res)
	plans := c.reserve(ctx, res, byKey, now)
	c.report(ctx, in, res, byKey, plans, now)
	if len(res.Admitted) > 0 || len(partial) > 0 {
		logger.V(2).Info("Queue pass", "admitted", len(res.Admitted), "completed", len(partial), "waiting", len(res.Waiting))
	}
	return len(res.Admitted) >= c.o.MaxAdmissionsPerPass
}
