package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
)

// Jobs and JobSets queued suspended (namespaces labelled
// <domain>/queueing=suspend). What follows says "Job"; a JobSet
// (podreq.JobSet) is queued the same way, as one workload of its pods that
// ask for Rota's resources (podreq.JobSetPods), found by the JobSet
// controller's jobset-uid label on them; the JobSet controller creates its
// Jobs suspended while it is, and deletes their pods when it is suspended.
//
// rota-admission creates such a Job suspended and marked queued, so it
// waits as the Job alone: no pod of it exists, and kube-scheduler and the
// API server carry nothing for it. The queue reads it from the Job
// informer as one workload of JobMembers pods of its template's shape
// (podreq.JobPods: a gang when the Job is one), orders it with every other
// workload and holds room for it as for gated pods.
//
// Admitting it is one patch of the Job, guarded by its resourceVersion:
// spec.suspend false and the Job's admission record, signed for the Job's
// UID and parallelism (podreq.JobRecordSubject). From then on the Job is
// charged for JobMembers pods, by the pods' own records once they have
// them and by the Job's record for the rest. Its pods are created gated,
// as every GPU pod is; the queue admits them at once, without asking
// quota again (the Job's record holds it), with the room held for the Job,
// each with its own signed record: the extender, reclaim and the invariant
// checker read pods' records as they always did. A gated pod is admitted
// through its Job's record only when its request is exactly the Job
// template's and the Job's admitted pods number fewer than JobMembers; any
// other pod that names the Job in its labels waits in the queue as its own.
//
// Taking the admission back (reclaim, or anyone suspending the Job) is
// suspending it: the Job controller deletes its pods, and once none is
// left, terminating ones included, the queue removes the Job's record, so
// it queues again. Only the
// queue unsuspends a queued Job (the records policy refuses anyone else).

// JobTransform trims what the queue's Job informer keeps: a Job that is
// not queued suspended keeps its name and UID only; a queued one drops its
// managed fields and every status field but its conditions and its count
// of succeeded pods.
func JobTransform(names contract.Names) cache.TransformFunc {
	return func(obj any) (any, error) {
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return obj, nil
		}
		if !podreq.QueuedJob(job, names) {
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: job.Name, Namespace: job.Namespace, UID: job.UID,
				ResourceVersion: job.ResourceVersion}}, nil
		}
		out := job.DeepCopy()
		out.ManagedFields = nil
		out.Status = batchv1.JobStatus{Conditions: job.Status.Conditions, Succeeded: job.Status.Succeeded}
		return out, nil
	}
}

// queuedOwner is a workload object queued suspended: a Job (jobOwner) or
// a JobSet (jobSetOwner).
type queuedOwner interface {
	metav1.Object
	// kind names it in events and logs.
	kind() string
	// eventObject is what its events are about.
	eventObject() runtime.Object
	suspended() bool
	finished() bool
	// subject is what its admission record is signed for; key its
	// workload key in the queue.
	subject(names contract.Names) string
	key() string
	// plan is its pods that ask for Rota's resources, as they will be
	// created (none: it asks for nothing the queue can plan).
	plan(names contract.Names) []*corev1.Pod
}

type jobOwner struct{ *batchv1.Job }

func (j jobOwner) kind() string                            { return "Job" }
func (j jobOwner) eventObject() runtime.Object             { return j.Job }
func (j jobOwner) suspended() bool                         { return podreq.Suspended(j.Job) }
func (j jobOwner) finished() bool                          { return podreq.JobFinished(j.Job) }
func (j jobOwner) subject(contract.Names) string           { return podreq.JobRecordSubject(j.Job) }
func (j jobOwner) key() string                             { return podreq.JobWorkloadKey(j.Job) }
func (j jobOwner) plan(names contract.Names) []*corev1.Pod { return podreq.JobPods(j.Job, names) }

type jobSetOwner struct{ *podreq.JobSet }

func (j jobSetOwner) kind() string { return "JobSet" }
func (j jobSetOwner) eventObject() runtime.Object {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: j.GroupVersion(), Kind: "JobSet"},
		ObjectMeta: metav1.ObjectMeta{Name: j.Name, Namespace: j.Namespace, UID: j.UID, ResourceVersion: j.ResourceVersion}}
}
func (j jobSetOwner) suspended() bool { return podreq.JobSetSuspended(j.JobSet) }
func (j jobSetOwner) finished() bool  { return podreq.JobSetFinished(j.JobSet) }
func (j jobSetOwner) subject(names contract.Names) string {
	return podreq.JobSetRecordSubject(j.JobSet, names)
}
func (j jobSetOwner) key() string { return podreq.JobSetWorkloadKey(j.JobSet) }
func (j jobSetOwner) plan(names contract.Names) []*corev1.Pod {
	return podreq.JobSetPods(j.JobSet, names)
}

// ownerOf returns the Job or JobSet queued suspended that the pod's
// controller labels name (the JobSet's first: its Jobs are not queued).
func ownerOf(jobs map[types.UID]*jobState, pod *corev1.Pod) *jobState {
	if uid := podreq.JobSetControllerUID(pod); uid != "" {
		if js := jobs[uid]; js != nil {
			return js
		}
	}
	return jobs[podreq.JobControllerUID(pod)]
}

// jobState is one Job queued suspended, as a pass reads it.
type jobState struct {
	job  queuedOwner
	plan *jobPlan
	team string
	// adm is the Job's believed admission record (nil while it is queued)
	// and acct the account it names.
	adm  *contract.Admission
	acct quota.Account
	// active counts the Job's admitted pods that have not ended; gated
	// holds its gated pods that its record admits (the template's shape);
	// present counts every pod of it that has not ended, terminating ones
	// included.
	active  int
	gated   []queuedMember
	present int
}

// queuedMember is a gated pod as collect read it.
type queuedMember struct {
	pod  *corev1.Pod
	p    *podreq.Parsed
	team string
	amt  quota.Amount
}

// jobPlan is what a Job's planned pods are, kept while its
// resourceVersion stays: their one request (p, amt) and their keys (the
// gangs they form; none when they form none).
type jobPlan struct {
	rv   string
	pods []*corev1.Pod
	p    *podreq.Parsed
	amt  quota.Amount
	keys map[string]bool
}

// jobWrite is a Job this controller patched, as the API server answered,
// kept until the informer shows the answer (or a later change).
type jobWrite struct {
	from string // the resourceVersion the patch was made against
	got  queuedOwner
}

// readJobs reads the Jobs and JobSets queued suspended that have not
// ended, by UID (none without a Job informer). ok is false while the
// JobSet cache has not synced.
func (c *Controller) readJobs(logger klog.Logger, cfg quota.Config, ns map[string]map[string]string) (out map[types.UID]*jobState, ok bool) {
	if c.o.Jobs == nil {
		return nil, true
	}
	var owners []queuedOwner
	for _, obj := range c.o.Jobs.GetStore().List() {
		if job, ok := obj.(*batchv1.Job); ok && podreq.QueuedJob(job, c.o.Names) {
			owners = append(owners, jobOwner{job})
		}
	}
	if c.o.Owners != nil {
		sets, synced := c.o.Owners.QueuedJobSets()
		if !synced {
			return nil, false
		}
		for _, js := range sets {
			if js.Annotations[c.o.Names.QueuedJobAnnotation] == "true" {
				owners = append(owners, jobSetOwner{js})
			}
		}
	}
	c.mu.Lock()
	writes := c.jobWrites
	c.jobWrites = map[types.UID]jobWrite{}
	c.mu.Unlock()
	out = map[types.UID]*jobState{}
	plans := make(map[types.UID]*jobPlan, len(c.jobPlans))
	for _, job := range owners {
		if w, ok := writes[job.GetUID()]; ok && job.GetResourceVersion() == w.from && !c.sameQueueState(job, w.got) {
			// Patched by an earlier pass; the informer has not heard yet.
			job = w.got
			c.keepJobWrite(job.GetUID(), w)
		}
		if job.GetDeletionTimestamp() != nil || job.finished() {
			continue
		}
		plan := c.jobPlans[job.GetUID()]
		if plan == nil || plan.rv != job.GetResourceVersion() {
			if plan = c.planOf(logger, job); plan == nil {
				continue
			}
		}
		plans[job.GetUID()] = plan
		js := &jobState{job: job, plan: plan, team: podreq.Team(plan.pods[0], ns[job.GetNamespace()], c.o.Names, cfg.AllowPodTeamOverride)}
		adm, unbelieved := c.o.Records.WorkloadAdmission(job.GetAnnotations(), job.subject(c.o.Names), c.o.Names)
		if adm != nil {
			if acct, believed := accountFrom(cfg, js.team, plan.p.Models, adm); believed {
				js.adm, js.acct = adm, acct
			} else {
				unbelieved = adm
			}
		}
		if unbelieved != nil {
			c.jobDisbelieved(logger, job, unbelieved)
		}
		out[job.GetUID()] = js
	}
	c.jobPlans = plans
	return out, true
}

// planOf plans a Job's (or JobSet's) pods: nil when it plans none, or its
// pods ask for what no pod may or for more than one request.
func (c *Controller) planOf(logger klog.Logger, job queuedOwner) *jobPlan {
	pods := job.plan(c.o.Names)
	if len(pods) == 0 {
		return nil
	}
	if err := c.setPlannedPriority(pods); err != nil {
		logger.V(2).Info("A workload queued suspended names a priority its pods cannot have; it stays queued", "kind", job.kind(), "name", klog.KObj(job), "err", err)
		return nil
	}
	p := c.o.Parser.Of(pods[0])
	if p.Err != nil {
		logger.V(2).Info("A workload queued suspended asks for what no pod may; it stays queued", "kind", job.kind(), "name", klog.KObj(job), "err", p.Err)
		return nil
	}
	plan := &jobPlan{rv: job.GetResourceVersion(), pods: pods, p: p,
		amt: quota.AmountOf(p.Request.GPUs, p.Request.MemoryUnits, c.o.MemoryUnitMiB)}
	for _, pod := range podreq.OnePerTemplate(pods) {
		q := c.o.Parser.Of(pod)
		amt := quota.AmountOf(q.Request.GPUs, q.Request.MemoryUnits, c.o.MemoryUnitMiB)
		if q.Err != nil || amt != plan.amt || q.Request.CPUMilli != p.Request.CPUMilli || (q.Gang == nil) != (p.Gang == nil) {
			// rota-admission queues only JobSets of one shape
			// (podreq.JobSetOneShape); one changed since stays queued.
			logger.V(2).Info("A workload queued suspended asks for more than one request per pod; it stays queued", "kind", job.kind(),
				"name", klog.KObj(job))
			return nil
		}
		if q.Gang != nil {
			if plan.keys == nil {
				plan.keys = map[string]bool{}
			}
			plan.keys[q.Key()] = true
		}
	}
	return plan
}

// sameQueueState reports whether two versions of a Job say the same to the
// queue: the same admission record and suspension.
func (c *Controller) sameQueueState(a, b queuedOwner) bool {
	return a.GetAnnotations()[c.o.Names.AdmissionAnnotation] == b.GetAnnotations()[c.o.Names.AdmissionAnnotation] &&
		a.suspended() == b.suspended()
}

func (c *Controller) keepJobWrite(uid types.UID, w jobWrite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobWrites[uid] = w
}

// jobDisbelieved reports a Job's admission record that Rota did not sign
// for this Job and parallelism (or that names another team): the Job is
// queued as if it had none. Reported once per record.
func (c *Controller) jobDisbelieved(logger klog.Logger, job queuedOwner, adm *contract.Admission) {
	if !c.firstDisbelief(job.GetUID(), adm) {
		return
	}
	logger.Info("Admission record of a workload queued suspended not believed", "kind", job.kind(), "name", klog.KObj(job),
		"recordTeam", adm.Team, "recordModel", adm.Model)
	if c.o.Recorder != nil {
		c.o.Recorder.Eventf(job.eventObject(), corev1.EventTypeWarning, contract.ReasonForgedRecord,
			"Annotation %s was not signed by Rota for this %s and its size (or names another team): it is not believed, and the %s queues as if it had none",
			c.o.Names.AdmissionAnnotation, job.kind(), job.kind())
	}
}

// jobMember returns the admitted Job (or JobSet) queued suspended whose
// record admits the gated pod: the pod's Job or JobSet (by its
// controller's label) with a believed record and the pod's request
// exactly the planned pods' (in one of their gangs, when they form any).
func jobMember(jobs map[types.UID]*jobState, pod *corev1.Pod, p *podreq.Parsed, amt quota.Amount) *jobState {
	js := ownerOf(jobs, pod)
	if js == nil || js.adm == nil || pod.Namespace != js.job.GetNamespace() || amt != js.plan.amt ||
		p.Request.CPUMilli != js.plan.p.Request.CPUMilli || (p.Gang != nil) != (js.plan.keys != nil) ||
		p.Gang != nil && !js.plan.keys[p.Key()] {
		return nil
	}
	return js
}

// jobAdmission is the gated pods of an admitted Job that a pass admits.
type jobAdmission struct {
	js   *jobState
	pods []queuedMember
}

// addJobs adds the pass's Jobs queued suspended: an admitted one is
// charged for the pods it runs at once (podreq.JobRunsNow) that it has not
// yet admitted, and its gated pods are admitted up to that many; a suspended one without a record is queued
// work; one suspended with a record whose pods are gone is requeued.
func (c *Controller) addJobs(st *passState, cfg quota.Config, jobs map[types.UID]*jobState, now time.Time) {
	for _, js := range jobs {
		job, plan := js.job, js.plan
		members := len(plan.pods) // podreq.JobRunsNow: fewer in the last wave
		switch {
		case js.adm != nil && !job.suspended():
			missing := max(0, members-js.active)
			amt := plan.amt.Times(int64(missing))
			u := st.in.Admitted[js.acct]
			u.Pending = u.Pending.Add(amt)
			st.in.Admitted[js.acct] = u
			tu := st.in.TeamUse[js.team]
			tu.GPUs += amt.GPUs
			tu.MemoryMiB += int64(amt.MemoryMiB)
			tu.CPUMilli += plan.p.Request.CPUMilli * int64(missing)
			st.in.TeamUse[js.team] = tu
			take := min(len(js.gated), missing)
			if take > 0 {
				st.jobPods = append(st.jobPods, jobAdmission{js: js, pods: js.gated[:take]})
			}
			for _, m := range js.gated[take:] {
				c.addQueued(st, cfg, m.pod, m.p, m.team, m.amt, now)
			}
		case js.adm != nil:
			// Suspended after its admission (reclaim, or its owner): its
			// pods are charged by their own records while they end.
			if js.present == 0 {
				st.requeue = append(st.requeue, js)
			}
		case job.suspended():
			c.addQueuedJob(st, cfg, js, now)
		}
	}
}

// addQueuedJob adds a suspended Job without a record as one workload.
func (c *Controller) addQueuedJob(st *passState, cfg quota.Config, js *jobState, now time.Time) {
	job, plan := js.job, js.plan
	if _, known := cfg.Teams[js.team]; !known && cfg.Policy() == quota.UnlimitedUnknown {
		cfg = withUnlimited(cfg, js.team)
		st.in.Config = cfg
	}
	first := plan.pods[0]
	prio := int32(0)
	if first.Spec.Priority != nil {
		prio = *first.Spec.Priority
	}
	key := job.key()
	st.queued[key] = &workload{job: job, pods: plan.pods, w: pkgqueue.Workload{Key: key, Team: js.team,
		Accounts: c.accounts(cfg, js.team, plan.p.Models), Priority: prio, Created: job.GetCreationTimestamp().Time,
		Members: len(plan.pods), Present: len(plan.pods), PerMember: plan.amt, CPUMilli: plan.p.Request.CPUMilli,
		Shape: shape(plan.p.Request, plan.amt, first, c.o.Names), Ends: podreq.DeclaredEnd(first, c.o.Names, now),
		LatestStart: podreq.LatestStart(first, c.o.Names)}}
}

// admitJob admits a Job queued suspended in one patch, guarded by the
// resourceVersion the pass read: spec.suspend false and its signed
// admission record. If the patch fails the hold is released and the Job
// stays queued; if it succeeds the hold stays for the Job's pods until
// they are admitted (admitJobPods) or it lapses.
func (c *Controller) admitJob(ctx context.Context, wl *workload, now time.Time) {
	logger := klog.FromContext(ctx)
	job := wl.job
	waited := now.Sub(wl.w.Created)
	rec := contract.Admission{Version: contract.Version, AdmittedAt: now.UTC().Truncate(time.Second),
		QueuedFor: waited.Round(time.Second).String(), Team: wl.acct.Team, Model: wl.acct.Model}
	got, err := c.patchJob(ctx, job, func() (map[string]any, error) {
		signed, err := c.o.Records.Key.SignAdmission(job.subject(c.o.Names), rec)
		if err != nil {
			return nil, err
		}
		data, err := signed.Marshal()
		if err != nil {
			return nil, err
		}
		annotations := map[string]any{c.o.Names.AdmissionAnnotation: string(data)}
		if _, ok := job.GetAnnotations()[c.o.Names.ReservationAnnotation]; ok {
			annotations[c.o.Names.ReservationAnnotation] = nil // the reservation ends with the admission
		}
		return map[string]any{
			"metadata": map[string]any{"resourceVersion": job.GetResourceVersion(), "annotations": annotations},
			"spec":     map[string]any{"suspend": false},
		}, nil
	})
	if err != nil {
		logger.Error(err, "Admitting a workload queued suspended failed; it stays queued", "kind", job.kind(), "name", klog.KObj(job))
		c.o.Holder.ReleaseHold(wl.hold)
		return
	}
	c.mu.Lock()
	c.jobWrites[job.GetUID()] = jobWrite{from: job.GetResourceVersion(), got: got}
	c.jobHolds[job.GetUID()] = wl.hold
	c.mu.Unlock()
	c.event(wl.pods[0], corev1.EventTypeNormal, "Admitted", fmt.Sprintf("admitted %d pods to team %s after %s in the queue%s; the %s is unsuspended",
		len(wl.pods), wl.acct, waited.Round(time.Second), where(wl.hold), job.kind()))
	logger.V(2).Info("Admitted a workload queued suspended", "kind", job.kind(), "name", klog.KObj(job), "team", wl.w.Team, "account", wl.acct.String(),
		"pods", len(wl.pods), "waited", waited.Round(time.Millisecond), "where", wl.hold.Where)
}

// admitJobPods admits gated pods of an admitted Job: the Job's hold is
// given back and room held again for the pods themselves, each admitted
// with its own record, charged to the Job's account.
func (c *Controller) admitJobPods(ctx context.Context, ja jobAdmission, now time.Time) {
	js := ja.js
	c.mu.Lock()
	h, held := c.jobHolds[js.job.GetUID()]
	delete(c.jobHolds, js.job.GetUID())
	c.mu.Unlock()
	if held {
		c.o.Holder.ReleaseHold(h)
	}
	wl := &workload{w: pkgqueue.Workload{Key: js.plan.p.Key(), Team: js.team, Created: js.job.GetCreationTimestamp().Time}}
	for _, m := range ja.pods {
		wl.pods = append(wl.pods, m.pod)
	}
	c.complete(ctx, wl.w.Key, js.acct, wl, now)
}

// requeueJob removes the admission record of a Job that was suspended
// after its admission and has no pods left: it queues again.
func (c *Controller) requeueJob(ctx context.Context, js *jobState) {
	job := js.job
	got, err := c.patchJob(ctx, job, func() (map[string]any, error) {
		return map[string]any{"metadata": map[string]any{"resourceVersion": job.GetResourceVersion(),
			"annotations": map[string]any{c.o.Names.AdmissionAnnotation: nil}}}, nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Requeueing a suspended workload failed", "kind", job.kind(), "name", klog.KObj(job))
		return
	}
	c.mu.Lock()
	c.jobWrites[job.GetUID()] = jobWrite{from: job.GetResourceVersion(), got: got}
	c.mu.Unlock()
	if c.o.Recorder != nil {
		c.o.Recorder.Eventf(job.eventObject(), corev1.EventTypeNormal, "Requeued",
			"the %s was suspended after its admission and its pods are gone: it waits in its team's queue again", job.kind())
	}
	klog.FromContext(ctx).V(2).Info("Requeued a suspended workload", "kind", job.kind(), "name", klog.KObj(job))
}

// writeJobRecord writes (value nil: removes) the reservation record on a
// Job queued suspended. A failed write is retried by the next pass.
func (c *Controller) writeJobRecord(ctx context.Context, job queuedOwner, value any) {
	_, err := c.patchJob(ctx, job, func() (map[string]any, error) {
		return map[string]any{"metadata": map[string]any{"uid": job.GetUID(),
			"annotations": map[string]any{c.o.Names.ReservationAnnotation: value}}}, nil
	})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Writing the reservation record failed; the next pass retries", "kind", job.kind(), "name", klog.KObj(job),
			"reason", err.Error())
	}
}

// suspendJob takes an admitted Job's (or JobSet's) admission back:
// spec.suspend true (its controller deletes its pods; it queues again once
// they are gone). ok is false when the pod is not of an admitted Job or
// JobSet queued suspended.
func (c *Controller) suspendJob(ctx context.Context, pod *corev1.Pod) (ok bool, err error) {
	c.mu.Lock()
	js := ownerOf(c.admittedJobs, pod)
	c.mu.Unlock()
	if js == nil || js.job.GetNamespace() != pod.Namespace {
		return false, nil
	}
	_, err = c.patchJob(ctx, js.job, func() (map[string]any, error) {
		return map[string]any{"spec": map[string]any{"suspend": true}}, nil
	})
	return true, err
}

// patchJob applies a JSON merge patch to a Job or JobSet.
func (c *Controller) patchJob(ctx context.Context, job queuedOwner, body func() (map[string]any, error)) (queuedOwner, error) {
	m, err := body()
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: "rota-queue"}
	switch job.(type) {
	case jobOwner:
		got, err := c.o.Client.BatchV1().Jobs(job.GetNamespace()).Patch(ctx, job.GetName(), types.MergePatchType, data, opts)
		if err != nil {
			return nil, fmt.Errorf("patch Job %s/%s: %w", job.GetNamespace(), job.GetName(), err)
		}
		return jobOwner{got}, nil
	default:
		if c.o.Dynamic == nil || c.o.Owners == nil {
			return nil, fmt.Errorf("patch JobSet %s/%s: the queue reads no JobSets", job.GetNamespace(), job.GetName())
		}
		u, err := c.o.Dynamic.Resource(c.o.Owners.JobSetResource()).Namespace(job.GetNamespace()).Patch(ctx, job.GetName(), types.MergePatchType, data, opts)
		if err != nil {
			return nil, fmt.Errorf("patch JobSet %s/%s: %w", job.GetNamespace(), job.GetName(), err)
		}
		got, err := jobSetFrom(u)
		if err != nil {
			return nil, err
		}
		return jobSetOwner{got}, nil
	}
}

// noteAdmittedJobs keeps the admitted Jobs of the pass, for reclaim.
func (c *Controller) noteAdmittedJobs(jobs map[types.UID]*jobState) {
	m := map[types.UID]*jobState{}
	for uid, js := range jobs {
		if js.adm != nil {
			m[uid] = js
		}
	}
	c.mu.Lock()
	c.admittedJobs = m
	c.mu.Unlock()
}

// forgetJobHolds gives back the holds of Jobs no longer admitted (ended,
// deleted, requeued): only an admitted Job's pods use its hold.
func (c *Controller) forgetJobHolds(jobs map[types.UID]*jobState) {
	var gone []room.Hold
	c.mu.Lock()
	for uid, h := range c.jobHolds {
		if js := jobs[uid]; js == nil || js.adm == nil {
			gone = append(gone, h)
			delete(c.jobHolds, uid)
		}
	}
	c.mu.Unlock()
	for _, h := range gone {
		c.o.Holder.ReleaseHold(h)
	}
}
