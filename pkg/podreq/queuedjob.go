package podreq

import (
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
)

// A Job queued suspended (QueueingSuspend) waits as the Job alone: its pods
// do not exist until the queue admits it. These functions are the one
// reading of such a Job, for rota-admission (which suspends it) and the
// queue controller (which admits it).

// Suspendable reports whether a new Job is queued suspended where its
// namespace asks for it (QueueingSuspend): a top-level Job (no
// controlling owner: a JobSet's Jobs are its to run) whose pods ask for
// Rota's resources, no more than MaxSuspendedPods at once, and that Kueue
// does not queue (no queue-name label).
func Suspendable(job *batchv1.Job, names contract.Names) bool {
	return metav1.GetControllerOfNoCopy(job) == nil && job.Labels[KueueQueueNameLabel] == "" && templateWants(&job.Spec.Template, names) &&
		JobMembers(job) <= MaxSuspendedPods
}

// MaxSuspendedPods bounds the pods a Job or JobSet queued suspended runs at
// once (the queue plans them all before any exists). A larger one keeps
// gated pods, each queued as its own.
const MaxSuspendedPods = contract.MaxGangSize

// KueueQueueNameLabel is Kueue's label naming a workload's LocalQueue.
const KueueQueueNameLabel = "kueue.x-k8s.io/queue-name"

// QueuedJob reports whether the Job is one Rota queued suspended (the
// webhook marked it at creation; the records policy keeps the mark).
func QueuedJob(job *batchv1.Job, names contract.Names) bool {
	return job.Annotations[names.QueuedJobAnnotation] == "true"
}

// Suspended reports whether the Job's spec.suspend is set.
func Suspended(job *batchv1.Job) bool { return job.Spec.Suspend != nil && *job.Spec.Suspend }

// JobFinished reports whether the Job ended (its Complete or Failed
// condition is true).
func JobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// JobMembers is how many pods of the Job run at once: its parallelism
// (1 when unset), never more than its completions.
func JobMembers(job *batchv1.Job) int {
	n := int32(1)
	if p := job.Spec.Parallelism; p != nil {
		n = *p
	}
	if c := job.Spec.Completions; c != nil && *c < n {
		n = *c
	}
	return int(max(0, n))
}

// JobRunsNow is how many pods the Job runs at once from now on:
// JobMembers, fewer in its last wave, when fewer completions are left than
// its parallelism (completions less the pods that succeeded, as the Job
// controller counts them in its status).
func JobRunsNow(job *batchv1.Job) int {
	n := JobMembers(job)
	if c := job.Spec.Completions; c != nil {
		n = min(n, max(0, int(*c)-int(job.Status.Succeeded)))
	}
	return n
}

// JobWorkloadKey is the queue's key of a Job queued suspended. It cannot
// be a pod's or a gang's key (neither a pod name nor a label value holds
// a slash).
func JobWorkloadKey(job *batchv1.Job) string { return job.Namespace + "/Job/" + job.Name }

// JobRecordSubject is what the queue signs a Job's admission record for:
// the Job's UID and the number of pods it admitted. A record copied to
// another Job, or kept after its parallelism changed, does not verify.
func JobRecordSubject(job *batchv1.Job) string {
	return "job/" + string(job.UID) + "/" + strconv.Itoa(JobMembers(job))
}

// AdmissionOfWorkload reads the admission record in a Job's or JobSet's
// annotations, believed or not; nil when there is none.
func AdmissionOfWorkload(annotations map[string]string, names contract.Names) (*contract.Admission, error) {
	return admissionIn(annotations, names)
}

// JobAdmission reads the admission record on a Job queued suspended, split
// by belief as Admission does for pods: a record is believed only when
// Rota signed it for this Job and its parallelism (JobRecordSubject).
// With records unsigned (no key) every record is believed.
func (r Records) JobAdmission(job *batchv1.Job, names contract.Names) (adm, unbelieved *contract.Admission) {
	return r.WorkloadAdmission(job.Annotations, JobRecordSubject(job), names)
}

// JobPods returns the pods the Job's controller creates when it starts, as
// the queue plans room for them: JobRunsNow pods of its template, named
// after the Job and its index, with UIDs made from the Job's, controlled
// by the Job, with no resourceVersion (the API holds no such pod), without
// any of Rota's records the template may carry, and with the gang label and
// size the webhook gives them when the Job is a gang (JobGang). None for a
// Job of more than MaxSuspendedPods at once.
func JobPods(job *batchv1.Job, names contract.Names) []*corev1.Pod {
	n := JobRunsNow(job)
	if n > MaxSuspendedPods {
		return nil
	}
	gang, size, isGang := JobGang(job, names)
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		t := job.Spec.Template.DeepCopy()
		pod := &corev1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
		pod.Namespace, pod.Name = job.Namespace, job.Name+"-"+strconv.Itoa(i)
		pod.UID = types.UID(string(job.UID) + "-" + strconv.Itoa(i))
		pod.CreationTimestamp = job.CreationTimestamp
		pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
		for _, k := range []string{names.AdmissionAnnotation, names.AssignmentAnnotation, names.ReservationAnnotation} {
			delete(pod.Annotations, k) // Rota's records are never the template's to give
		}
		if isGang && pod.Labels[names.GangLabel] == "" {
			if pod.Labels == nil {
				pod.Labels = map[string]string{}
			}
			if pod.Annotations == nil {
				pod.Annotations = map[string]string{}
			}
			pod.Labels[names.GangLabel] = gang
			pod.Annotations[names.GangSizeAnnotation] = strconv.Itoa(size)
		}
		pods = append(pods, pod)
	}
	return pods
}

// JobControllerUID is the UID of the Job that created the pod, as the Job
// controller labels it; "" for any other pod. A user can write the label
// on a pod of their own: readers use it only to find a pod's Job, and
// trust nothing the Job's record grants without checking the pod against
// the Job's template.
func JobControllerUID(pod *corev1.Pod) types.UID {
	return types.UID(pod.Labels[batchv1.ControllerUidLabel])
}
