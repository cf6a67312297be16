package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
)

// Jobs queued suspended (namespaces labelled <domain>/queueing=suspend).
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

// jobState is one Job queued suspended, as a pass reads it.
type jobState struct {
	job  *batchv1.Job
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
// resourceVersion stays.
type jobPlan struct {
	rv   string
	pods []*corev1.Pod
	p    *podreq.Parsed
	amt  quota.Amount
}

// jobWrite is a Job this controller patched, as the API server answered,
// kept until the informer shows the answer (or a later change).
type jobWrite struct {
	from string // the resourceVersion the patch was made against
	got  *batchv1.Job
}

// readJobs reads the Jobs queued suspended that have not ended, by UID
// (none without a Job informer).
func (c *Controller) readJobs(logger klog.Logger, cfg quota.Config, ns map[string]map[string]string) map[types.UID]*jobState {
	if c.o.Jobs == nil {
		return nil
	}
	c.mu.Lock()
	writes := c.jobWrites
	c.jobWrites = map[types.UID]jobWrite{}
	c.mu.Unlock()
	out := map[types.UID]*jobState{}
	plans := make(map[types.UID]*jobPlan, len(c.jobPlans))
	for _, obj := range c.o.Jobs.GetStore().List() {
		job, ok := obj.(*batchv1.Job)
		if !ok || !podreq.QueuedJob(job, c.o.Names) {
			continue
		}
		if w, ok := writes[job.UID]; ok && job.ResourceVersion == w.from && !c.sameQueueState(job, w.got) {
			// Patched by an earlier pass; the informer has not heard yet.
			job = w.got
			c.keepJobWrite(job.UID, w)
		}
		if job.DeletionTimestamp != nil || podreq.JobFinished(job) {
			continue
		}
		plan := c.jobPlans[job.UID]
		if plan == nil || plan.rv != job.ResourceVersion {
			pods := podreq.JobPods(job, c.o.Names)
			if len(pods) == 0 {
				continue
			}
			p := c.o.Parser.Of(pods[0])
			if p.Err != nil {
				logger.V(2).Info("A Job queued suspended asks for what no pod may; it stays queued", "job", klog.KObj(job), "err", p.Err)
				continue
			}
			plan = &jobPlan{rv: job.ResourceVersion, pods: pods, p: p,
				amt: quota.AmountOf(p.Request.GPUs, p.Request.MemoryUnits, c.o.MemoryUnitMiB)}
		}
		plans[job.UID] = plan
		js := &jobState{job: job, plan: plan, team: podreq.Team(plan.pods[0], ns[job.Namespace], c.o.Names, cfg.AllowPodTeamOverride)}
		adm, unbelieved := c.o.Records.JobAdmission(job, c.o.Names)
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
		out[job.UID] = js
	}
	c.jobPlans = plans
	return out
}

// sameQueueState reports whether two versions of a Job say the same to the
// queue: the same admission record and suspension.
func (c *Controller) sameQueueState(a, b *batchv1.Job) bool {
	return a.Annotations[c.o.Names.AdmissionAnnotation] == b.Annotations[c.o.Names.AdmissionAnnotation] &&
		podreq.Suspended(a) == podreq.Suspended(b)
}

func (c *Controller) keepJobWrite(uid types.UID, w jobWrite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobWrites[uid] = w
}

// jobDisbelieved reports a Job's admission record that Rota did not sign
// for this Job and parallelism (or that names another team): the Job is
// queued as if it had none. Reported once per record.
func (c *Controller) jobDisbelieved(logger klog.Logger, job *batchv1.Job, adm *contract.Admission) {
	if !c.firstDisbelief(job.UID, adm) {
		return
	}
	logger.Info("Job admission record not believed", "job", klog.KObj(job), "recordTeam", adm.Team, "recordModel", adm.Model)
	if c.o.Recorder != nil {
		c.o.Recorder.Eventf(job, corev1.EventTypeWarning, contract.ReasonForgedRecord,
			"Annotation %s was not signed by Rota for this Job and its parallelism (or names another team): it is not believed, and the Job queues as if it had none",
			c.o.Names.AdmissionAnnotation)
	}
}

// jobMember returns the admitted Job queued suspended whose record admits
// the gated pod: the pod's Job (by the Job controller's label) with a
// believed record and the pod's request exactly the Job template's.
func jobMember(jobs map[types.UID]*jobState, pod *corev1.Pod, p *podreq.Parsed, amt quota.Amount) *jobState {
	js := jobs[podreq.JobControllerUID(pod)]
	if js == nil || js.adm == nil || pod.Namespace != js.job.Namespace || amt != js.plan.amt ||
		p.Request.CPUMilli != js.plan.p.Request.CPUMilli || (p.Gang != nil) != (js.plan.p.Gang != nil) ||
		p.Gang != nil && p.Key() != js.plan.p.Key() {
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
		case js.adm != nil && !podreq.Suspended(job):
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
		case podreq.Suspended(job):
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
	key := podreq.JobWorkloadKey(job)
	st.queued[key] = &workload{job: job, pods: plan.pods, w: pkgqueue.Workload{Key: key, Team: js.team,
		Accounts: c.accounts(cfg, js.team, plan.p.Models), Priority: prio, Created: job.CreationTimestamp.Time,
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
		signed, err := c.o.Records.Key.SignAdmission(podreq.JobRecordSubject(job), rec)
		if err != nil {
			return nil, err
		}
		data, err := signed.Marshal()
		if err != nil {
			return nil, err
		}
		annotations := map[string]any{c.o.Names.AdmissionAnnotation: string(data)}
		if _, ok := job.Annotations[c.o.Names.ReservationAnnotation]; ok {
			annotations[c.o.Names.ReservationAnnotation] = nil // the reservation ends with the admission
		}
		return map[string]any{
			"metadata": map[string]any{"resourceVersion": job.ResourceVersion, "annotations": annotations},
			"spec":     map[string]any{"suspend": false},
		}, nil
	})
	if err != nil {
		logger.Error(err, "Admitting a Job queued suspended failed; it stays queued", "job", klog.KObj(job))
		c.o.Holder.ReleaseHold(wl.hold)
		return
	}
	c.mu.Lock()
	c.jobWrites[job.UID] = jobWrite{from: job.ResourceVersion, got: got}
	c.jobHolds[job.UID] = wl.hold
	c.mu.Unlock()
	c.event(wl.pods[0], corev1.EventTypeNormal, "Admitted", fmt.Sprintf("admitted %d pods to team %s after %s in the queue%s; the Job is unsuspended",
		len(wl.pods), wl.acct, waited.Round(time.Second), where(wl.hold)))
	logger.V(2).Info("Admitted a Job queued suspended", "job", klog.KObj(job), "team", wl.w.Team, "account", wl.acct.String(),
		"pods", len(wl.pods), "waited", waited.Round(time.Millisecond), "where", wl.hold.Where)
}

// admitJobPods admits gated pods of an admitted Job: the Job's hold is
// given back and room held again for the pods themselves, each admitted
// with its own record, charged to the Job's account.
func (c *Controller) admitJobPods(ctx context.Context, ja jobAdmission, now time.Time) {
	js := ja.js
	c.mu.Lock()
	h, held := c.jobHolds[js.job.UID]
	delete(c.jobHolds, js.job.UID)
	c.mu.Unlock()
	if held {
		c.o.Holder.ReleaseHold(h)
	}
	wl := &workload{w: pkgqueue.Workload{Key: js.plan.p.Key(), Team: js.team, Created: js.job.CreationTimestamp.Time}}
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
		return map[string]any{"metadata": map[string]any{"resourceVersion": job.ResourceVersion,
			"annotations": map[string]any{c.o.Names.AdmissionAnnotation: nil}}}, nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Requeueing a suspended Job failed", "job", klog.KObj(job))
		return
	}
	c.mu.Lock()
	c.jobWrites[job.UID] = jobWrite{from: job.ResourceVersion, got: got}
	c.mu.Unlock()
	if c.o.Recorder != nil {
		c.o.Recorder.Event(job, corev1.EventTypeNormal, "Requeued",
			"the Job was suspended after its admission and its pods are gone: it waits in its team's queue again")
	}
	klog.FromContext(ctx).V(2).Info("Requeued a suspended Job", "job", klog.KObj(job))
}

// writeJobRecord writes (value nil: removes) the reservation record on a
// Job queued suspended. A failed write is retried by the next pass.
func (c *Controller) writeJobRecord(ctx context.Context, job *batchv1.Job, value any) {
	_, err := c.patchJob(ctx, job, func() (map[string]any, error) {
		return map[string]any{"metadata": map[string]any{"uid": job.UID,
			"annotations": map[string]any{c.o.Names.ReservationAnnotation: value}}}, nil
	})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Writing the reservation record failed; the next pass retries", "job", klog.KObj(job),
			"reason", err.Error())
	}
}

// suspendJob takes an admitted Job's admission back: spec.suspend true
// (the Job controller deletes its pods; the Job queues again once they are
// gone). ok is false when the pod is not of an admitted Job queued
// suspended.
func (c *Controller) suspendJob(ctx context.Context, pod *corev1.Pod) (ok bool, err error) {
	c.mu.Lock()
	job := c.admittedJobs[podreq.JobControllerUID(pod)]
	c.mu.Unlock()
	if job == nil || job.Namespace != pod.Namespace {
		return false, nil
	}
	_, err = c.patchJob(ctx, job, func() (map[string]any, error) {
		return map[string]any{"spec": map[string]any{"suspend": true}}, nil
	})
	return true, err
}

// patchJob applies a JSON merge patch to a Job.
func (c *Controller) patchJob(ctx context.Context, job *batchv1.Job, body func() (map[string]any, error)) (*batchv1.Job, error) {
	m, err := body()
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	got, err := c.o.Client.BatchV1().Jobs(job.Namespace).Patch(ctx, job.Name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: "rota-queue"})
	if err != nil {
		return nil, fmt.Errorf("patch Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return got, nil
}

// noteAdmittedJobs keeps the admitted Jobs of the pass, for reclaim.
func (c *Controller) noteAdmittedJobs(jobs map[types.UID]*jobState) {
	m := map[types.UID]*batchv1.Job{}
	for uid, js := range jobs {
		if js.adm != nil {
			m[uid] = js.job
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
