package report

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

// WhyJob explains a batch/v1 Job: where a Job queued suspended stands
// (waiting with no pods, admitted, or taken back), with its team's quota;
// for any other Job, that its pods are what to ask about.
func (c *Cluster) WhyJob(namespace, name string) (Why, error) {
	var job *batchv1.Job
	for i := range c.in.Jobs {
		if j := &c.in.Jobs[i]; j.Namespace == namespace && j.Name == name {
			job = j
		}
	}
	if job == nil {
		return Why{}, &ErrNotFound{What: fmt.Sprintf("job %s/%s", namespace, name)}
	}
	w := Why{Pod: podreq.JobWorkloadKey(job), Kind: "Job", Phase: jobPhase(job), SubmittedAt: job.CreationTimestamp.UTC(),
		Age: c.age(job.CreationTimestamp.Time)}
	pods := podreq.JobPods(job, c.o.Names)
	if len(pods) == 0 {
		w.Summary = "runs no pod at once (parallelism 0)"
		return w, nil
	}
	w.Team, w.TeamSource = c.teamOf(pods[0]), c.teamSource(pods[0])
	w.Quota = c.teamQuota(w.Team)
	r, err := podreq.FromPod(pods[0], podreq.Options{Names: c.o.Names, MemoryUnitMiB: c.o.MemoryUnitMiB})
	switch {
	case !podreq.Wants(pods[0], c.o.Names):
		w.Request = "no Rota resource"
	case err != nil:
		w.Request, w.RequestError = "invalid", err.Error()
	default:
		w.Request = fmt.Sprintf("%d pods at once, each %s", len(pods), r.Describe(c.o.MemoryUnitMiB))
	}
	if g, err := podreq.GangOf(pods[0], c.o.Names); err == nil && g != nil {
		w.Gang = &GangProgress{Name: g.Key, Size: g.Size}
	}
	adm, admErr := podreq.AdmissionOfJob(job, c.o.Names)
	if admErr != nil {
		w.AdmissionError = admErr.Error()
	}
	w.Admitted = adm
	running := 0
	for _, p := range c.pods {
		if podreq.JobControllerUID(p) == job.UID && !podreq.Terminal(p) && p.DeletionTimestamp == nil {
			running++
		}
	}
	switch {
	case !podreq.QueuedJob(job, c.o.Names):
		w.Summary = "not queued suspended: its pods queue one by one as gated pods (kubectl rota why POD, or kubectl rota queue)"
	case podreq.JobFinished(job):
		w.Summary = "finished (" + w.Phase + "); it holds no GPUs"
	case adm == nil && podreq.Suspended(job):
		w.Queued = &QueuedPod{Pod: w.Pod, Team: w.Team, Kind: "Job", Reason: "Suspended"}
		w.Summary = fmt.Sprintf("queued suspended (team %s): no pod exists until the queue admits all %d at once; its Queued event said where it stood "+
			"(kubectl describe job %s), kubectl rota queue --extender-url shows its live position", w.Team, len(pods), name)
		w.Summary += heldFor(job, c.o.Names.ReservationAnnotation)
	case adm == nil:
		w.Summary = "marked queued, but unsuspended without Rota's admission record: its pods queue one by one as gated pods"
	case podreq.Suspended(job):
		w.Summary = fmt.Sprintf("taken back (suspended after its admission): %d of its pods are still ending; then it waits in the queue again", running)
	default:
		w.Summary = fmt.Sprintf("admitted to team %s %s ago; %d of its %d pods exist and have not ended (kubectl rota why POD for each)",
			adm.Team, c.now.Sub(adm.AdmittedAt).Round(time.Second), running, len(pods))
	}
	return w, nil
}

// heldFor says where room is held for a Job queued suspended, from the
// reservation record the queue writes on it ("" when none is held).
func heldFor(job *batchv1.Job, annotation string) string {
	v, ok := job.Annotations[annotation]
	if !ok {
		return ""
	}
	r, err := contract.ParseReservation([]byte(v))
	if err != nil || r.Since.IsZero() {
		return ""
	}
	s := fmt.Sprintf("; room held for it in %s since %s, until %s", r.Domain, r.Since.UTC().Format(time.RFC3339), r.HoldUntil.UTC().Format(time.RFC3339))
	if !r.ExpectedStart.IsZero() {
		s += ", expected start " + r.ExpectedStart.UTC().Format(time.RFC3339)
	}
	return s
}

// jobPhase names a Job's state as a phase.
func jobPhase(job *batchv1.Job) string {
	for _, cond := range job.Status.Conditions {
		if cond.Status != "True" {
			continue
		}
		switch cond.Type {
		case batchv1.JobComplete:
			return "Complete"
		case batchv1.JobFailed:
			return "Failed"
		}
	}
	if podreq.Suspended(job) {
		return "Suspended"
	}
	return "Running"
}
