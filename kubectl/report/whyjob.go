package report

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

// WhyJob explains a batch/v1 Job: where a Job queued suspended stands
// (waiting with no pods, admitted, or taken back), with its team's quota;
// for any other Job, that its pods are what to ask about.
func (c *Cluster) WhyJob(namespace, name string) (Why, error) {
	for i := range c.in.Jobs {
		if j := &c.in.Jobs[i]; j.Namespace == namespace && j.Name == name {
			return c.whySuspendable(queuedView{kind: "Job", name: name, key: podreq.JobWorkloadKey(j), meta: &j.ObjectMeta,
				phase: jobPhase(j), marked: podreq.QueuedJob(j, c.o.Names), suspended: podreq.Suspended(j),
				finished: podreq.JobFinished(j), pods: podreq.JobPods(j, c.o.Names), owns: func(p *corev1.Pod) bool {
					return podreq.JobControllerUID(p) == j.UID
				}}), nil
		}
	}
	return Why{}, &ErrNotFound{What: fmt.Sprintf("job %s/%s", namespace, name)}
}

// WhyJobSet explains a JobSet as WhyJob does a Job.
func (c *Cluster) WhyJobSet(namespace, name string) (Why, error) {
	for i := range c.in.JobSets {
		if j := &c.in.JobSets[i]; j.Namespace == namespace && j.Name == name {
			phase := "Running"
			switch {
			case podreq.JobSetFinished(j):
				phase = "Finished"
			case podreq.JobSetSuspended(j):
				phase = "Suspended"
			}
			return c.whySuspendable(queuedView{kind: "JobSet", name: name, key: podreq.JobSetWorkloadKey(j), meta: &j.ObjectMeta,
				phase: phase, marked: j.Annotations[c.o.Names.QueuedJobAnnotation] == "true", suspended: podreq.JobSetSuspended(j),
				finished: podreq.JobSetFinished(j), pods: podreq.JobSetPods(j, c.o.Names), owns: func(p *corev1.Pod) bool {
					return podreq.JobSetControllerUID(p) == j.UID
				}}), nil
		}
	}
	return Why{}, &ErrNotFound{What: fmt.Sprintf("jobset %s/%s", namespace, name)}
}

// queuedView is a Job or JobSet as whySuspendable explains it.
type queuedView struct {
	kind, name, key, phase      string
	meta                        *metav1.ObjectMeta
	marked, suspended, finished bool
	// pods are its planned GPU pods; owns tells its pods.
	pods []*corev1.Pod
	owns func(*corev1.Pod) bool
}

func (c *Cluster) whySuspendable(v queuedView) Why {
	w := Why{Pod: v.key, Kind: v.kind, Phase: v.phase, SubmittedAt: v.meta.CreationTimestamp.UTC(),
		Age: c.age(v.meta.CreationTimestamp.Time)}
	pods := v.pods
	if len(pods) == 0 {
		w.Summary = "runs no GPU pod at once"
		return w
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
	adm, admErr := podreq.AdmissionOfWorkload(v.meta.Annotations, c.o.Names)
	if admErr != nil {
		w.AdmissionError = admErr.Error()
	}
	w.Admitted = adm
	running := 0
	for _, p := range c.pods {
		if v.owns(p) && !podreq.Terminal(p) && p.DeletionTimestamp == nil {
			running++
		}
	}
	describe := strings.ToLower(v.kind)
	switch {
	case !v.marked:
		w.Summary = "not queued suspended: its pods queue one by one as gated pods (kubectl rota why POD, or kubectl rota queue)"
	case v.finished:
		w.Summary = "finished (" + w.Phase + "); it holds no GPUs"
	case adm == nil && v.suspended:
		w.Queued = &QueuedPod{Pod: w.Pod, Team: w.Team, Kind: v.kind, Reason: "Suspended"}
		w.Summary = fmt.Sprintf("queued suspended (team %s): no pod exists until the queue admits all %d at once; its Queued event said where it stood "+
			"(kubectl describe %s %s), kubectl rota queue --extender-url shows its live position", w.Team, len(pods), describe, v.name)
		w.Summary += heldFor(v.meta.Annotations, c.o.Names.ReservationAnnotation)
	case adm == nil:
		w.Summary = "marked queued, but unsuspended without Rota's admission record: its pods queue one by one as gated pods"
	case v.suspended:
		w.Summary = fmt.Sprintf("taken back (suspended after its admission): %d of its pods are still ending; then it waits in the queue again", running)
	default:
		w.Summary = fmt.Sprintf("admitted to team %s %s ago; %d of its %d pods exist and have not ended (kubectl rota why POD for each)",
			adm.Team, c.now.Sub(adm.AdmittedAt).Round(time.Second), running, len(pods))
	}
	return w
}

// heldFor says where room is held for a Job or JobSet queued suspended,
// from the reservation record the queue writes on it ("" when none is
// held).
func heldFor(annotations map[string]string, annotation string) string {
	v, ok := annotations[annotation]
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
