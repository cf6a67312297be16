package podreq

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestJobGang(t *testing.T) {
	n := names
	job := func(mode batchv1.CompletionMode, completions, parallelism int32, mut ...func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
			Spec: batchv1.JobSpec{CompletionMode: &mode, Completions: &completions, Parallelism: &parallelism}}
		for _, m := range mut {
			m(j)
		}
		return j
	}
	yes := true
	tests := []struct {
		name     string
		job      *batchv1.Job
		wantSize int
	}{
		{"Indexed, completions = parallelism", job(batchv1.IndexedCompletion, 4, 4), 4},
		{"Indexed, one pod", job(batchv1.IndexedCompletion, 1, 1), 0},
		{"Indexed, fewer at a time than completions", job(batchv1.IndexedCompletion, 8, 4), 0},
		{"NonIndexed batch", job(batchv1.NonIndexedCompletion, 4, 4), 0},
		{"no completion mode", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) { j.Spec.CompletionMode = nil }), 0},
		{"no completions", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) { j.Spec.Completions = nil }), 0},
		{"opted out on the Job", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.Annotations = map[string]string{n.NoGangAnnotation: "true"}
		}), 0},
		{"opted out on the template", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.Spec.Template.Annotations = map[string]string{n.NoGangAnnotation: "true"}
		}), 0},
		{"the template names its own gang", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.Spec.Template.Labels = map[string]string{n.GangLabel: "other"}
		}), 0},
		{"controlled by a JobSet", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "s", UID: "u", Controller: &yes}}
		}), 0},
		{"nil", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, size, ok := JobGang(tc.job, n)
			if ok != (tc.wantSize > 0) || size != tc.wantSize || (ok && name != "train") {
				t.Fatalf("JobGang = %q, %d, %v; want size %d", name, size, ok, tc.wantSize)
			}
		})
	}
}
