package webhook

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

func jobReview(job *batchv1.Job) []byte {
	data, err := json.Marshal(job)
	if err != nil {
		panic(err)
	}
	return at.Body(&admissionv1.AdmissionRequest{UID: types.UID("req-" + job.Name),
		Kind:      metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
		Resource:  metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
		Namespace: job.Namespace, Name: job.Name, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: data}})
}

// TestMutatingSuspendsJobs: in a namespace labelled queueing=suspend a
// top-level Job asking for GPUs is created suspended and marked queued;
// anywhere else, or for a Job a JobSet controls, Kueue queues or that asks
// for no GPUs, it is left alone.
func TestMutatingSuspendsJobs(t *testing.T) {
	_, m, v := queueHandlers(t)
	ns := at.Namespace("susp", "a")
	ns.Labels[contract.Default.QueueingLabel] = contract.QueueingSuspend
	v.UpsertNamespace(ns)
	gpu := at.Pod("x", "t").GPUs(1).Obj()
	job := func(namespace string, edit func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: namespace},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: gpu.Spec}}}
		if edit != nil {
			edit(j)
		}
		return j
	}
	for _, tc := range []struct {
		name    string
		job     *batchv1.Job
		suspend bool
	}{
		{"suspend namespace", job("susp", nil), true},
		{"pods queued namespace", job("ns", nil), false},
		{"owned by a JobSet", job("susp", func(j *batchv1.Job) {
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "js", UID: "u",
				Controller: ptr.To(true)}}
		}), false},
		{"Kueue's", job("susp", func(j *batchv1.Job) { j.Labels = map[string]string{podreq.KueueQueueNameLabel: "q"} }), false},
		{"no GPUs", job("susp", func(j *batchv1.Job) {
			j.Spec.Template.Spec = corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := answer(t, m, jobReview(tc.job))
			if !resp.Allowed {
				t.Fatalf("refused: %v", resp.Result)
			}
			if !tc.suspend {
				if resp.Patch != nil {
					t.Fatalf("patched %s, want no change", resp.Patch)
				}
				return
			}
			var ops []patchOp
			if err := json.Unmarshal(resp.Patch, &ops); err != nil || len(ops) != 2 {
				t.Fatalf("patch %s (%v), want suspend and the mark", resp.Patch, err)
			}
			if ops[0].Path != "/spec/suspend" || ops[0].Value != true || ops[1].Path != "/metadata/annotations" {
				t.Errorf("patch %s, want spec.suspend true and annotation %s", resp.Patch, contract.Default.QueuedJobAnnotation)
			}
		})
	}
}
