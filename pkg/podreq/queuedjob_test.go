package podreq

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestJobPods(t *testing.T) {
	n := contract.Default
	job := func(parallelism, completions int32, indexed bool) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train", UID: "u"},
			Spec: batchv1.JobSpec{Parallelism: ptr.To(parallelism), Completions: ptr.To(completions),
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
					n.AdmissionAnnotation: `{"version":"v1","team":"x"}`, n.ReservationAnnotation: "{}", "keep": "me"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
						Limits: corev1.ResourceList{corev1.ResourceName(n.GPU): resource.MustParse("2")}}}}}}}}
		if indexed {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		return j
	}
	for _, tc := range []struct {
		name   string
		job    *batchv1.Job
		pods   int
		gang   bool
		member string
	}{
		{"indexed gang", job(4, 4, true), 4, true, "ml/train"},
		{"parallel batch", job(4, 10, false), 4, false, "ml/train-0"},
		{"fewer completions than parallelism", job(4, 2, false), 2, false, "ml/train-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := JobPods(tc.job, n)
			if len(pods) != tc.pods || JobMembers(tc.job) != tc.pods {
				t.Fatalf("%d pods (JobMembers %d), want %d", len(pods), JobMembers(tc.job), tc.pods)
			}
			p := Parse(pods[0], Options{Names: n}, Records{})
			if p.Err != nil || p.Request.GPUs != 2 || (p.Gang != nil) != tc.gang || p.Key() != tc.member {
				t.Fatalf("first pod: %+v gang %+v key %q; want 2 GPUs, gang %v, key %q", p.Err, p.Gang, p.Key(), tc.gang, tc.member)
			}
			for _, pod := range pods {
				if _, ok := pod.Annotations[n.AdmissionAnnotation]; ok || pod.Annotations[n.ReservationAnnotation] != "" || pod.Annotations["keep"] != "me" {
					t.Errorf("%s annotations %v: want Rota's records dropped, the rest kept", pod.Name, pod.Annotations)
				}
				if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != "u" || pod.ResourceVersion != "" {
					t.Errorf("%s: controller %v, resourceVersion %q; want the Job, none", pod.Name, ref, pod.ResourceVersion)
				}
			}
		})
	}
	if s := JobRecordSubject(job(4, 4, true)); s != "job/u/4" {
		t.Errorf("JobRecordSubject = %q", s)
	}
}

// In its last wave a Job runs only the completions it has left: the queue
// plans and charges that many, while its record stays signed for its
// parallelism.
func TestJobRunsNow(t *testing.T) {
	for _, tc := range []struct {
		parallelism int32
		completions *int32
		succeeded   int32
		want        int
	}{
		{4, ptr.To[int32](10), 0, 4},
		{4, ptr.To[int32](10), 6, 4},
		{4, ptr.To[int32](10), 7, 3},
		{4, ptr.To[int32](10), 10, 0},
		{4, ptr.To[int32](10), 12, 0},
		{4, nil, 3, 4}, // a work queue: it ends when one succeeds and the rest end
	} {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{UID: "u"}, Spec: batchv1.JobSpec{Parallelism: ptr.To(tc.parallelism), Completions: tc.completions},
			Status: batchv1.JobStatus{Succeeded: tc.succeeded}}
		if got := JobRunsNow(j); got != tc.want || len(JobPods(j, contract.Default)) != tc.want {
			t.Errorf("parallelism %d, completions %v, %d succeeded: JobRunsNow %d (%d planned pods), want %d",
				tc.parallelism, ptr.Deref(tc.completions, -1), tc.succeeded, got, len(JobPods(j, contract.Default)), tc.want)
		}
		if s := JobRecordSubject(j); s != "job/u/4" {
			t.Errorf("JobRecordSubject = %q, want it signed for the parallelism", s)
		}
	}
}

// Decode reads field names as the API server does, case-sensitively: a
// key that only resembles a field is not read as it.
func TestDecodeIsCaseSensitive(t *testing.T) {
	var job batchv1.Job
	if err := Decode([]byte(`{"metadata":{"name":"j","nAme":"x"},"speC":{"parallelism":4},"spec":{"completions":2}}`), &job); err != nil {
		t.Fatal(err)
	}
	if job.Name != "j" || job.Spec.Parallelism != nil || job.Spec.Completions == nil || *job.Spec.Completions != 2 {
		t.Errorf("read name %q, parallelism %v, completions %v; want j, none, 2", job.Name, job.Spec.Parallelism, job.Spec.Completions)
	}
}
