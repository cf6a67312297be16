package podreq

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// JobOwner returns the name and UID of the batch/v1 Job that controls the
// pod, or ok false.
func JobOwner(pod *corev1.Pod) (name string, uid string, ok bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return "", "", false
	}
	return ref.Name, string(ref.UID), true
}

// JobGang is the gang a Job's pods form by the Job's own shape, when their
// template names none: an Indexed Job whose completions equal its
// parallelism, more than one, is a gang of that many pods, named after the
// Job (every index must run at once for the Job to make progress). A plain
// parallel Job (NonIndexed, or fewer pods at a time than completions) is a
// batch of independent pods, not a gang. A Job that another workload
// controls (a JobSet's) is left to that workload. The annotation
// NoGangAnnotation "true" on the Job or its pod template opts out.
func JobGang(job *batchv1.Job, names contract.Names) (name string, size int, ok bool) {
	if job == nil || metav1.GetControllerOfNoCopy(job) != nil {
		return "", 0, false
	}
	if job.Annotations[names.NoGangAnnotation] == "true" || job.Spec.Template.Annotations[names.NoGangAnnotation] == "true" {
		return "", 0, false
	}
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion ||
		job.Spec.Completions == nil || job.Spec.Parallelism == nil || *job.Spec.Completions != *job.Spec.Parallelism ||
		*job.Spec.Parallelism < 2 {
		return "", 0, false
	}
	if _, named := job.Spec.Template.Labels[names.GangLabel]; named {
		return "", 0, false // the template's own gang wins
	}
	return job.Name, int(*job.Spec.Parallelism), true
}
