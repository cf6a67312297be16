package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"

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
	v.UpsertNamespace(suspendNamespace())
	job := func(namespace string, edit func(*batchv1.Job)) *batchv1.Job {
		j := suspendable(namespace)
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
			var review admissionv1.AdmissionReview
			if err := json.Unmarshal(jobReview(tc.job), &review); err != nil {
				t.Fatal(err)
			}
			checkSuspendPatch(t, review.Request, resp)
		})
	}
}

// A Job whose pods the webhook would refuse is refused at creation, not
// left to wait suspended for ever.
func TestMutatingRefusesInvalidJob(t *testing.T) {
	_, m, v := queueHandlers(t)
	v.UpsertNamespace(suspendNamespace())
	bad := suspendable("susp")
	bad.Spec.Template.Annotations = map[string]string{contract.Default.MaxRuntimeAnnotation: "soon"}
	resp := answer(t, m, jobReview(bad))
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "the Job's pod template") ||
		!strings.Contains(resp.Result.Message, contract.Default.MaxRuntimeAnnotation) {
		t.Fatalf("allowed %v, result %+v; want a refusal naming the template's %s", resp.Allowed, resp.Result, contract.Default.MaxRuntimeAnnotation)
	}
	huge := suspendable("susp")
	huge.Spec.Template.Spec = at.Pod("x", "t").GPUs(64).Obj().Spec
	if resp := answer(t, m, jobReview(huge)); resp.Allowed {
		t.Fatal("a Job whose pods ask for 64 GPUs (nodes have 8) was queued")
	}
}

// A Job whose gang can never run whole is refused at creation, as its
// gated pods would be, rather than left to wait suspended for ever; the
// queued-pod cap, which counts pods, does not apply to a Job whose pods do
// not exist yet.
func TestMutatingRefusesJobThatNeverRuns(t *testing.T) {
	_, m, v := queueHandlers(t) // 10 GPUs; team a: 4, borrowing 2; at most 3 pods queued
	v.UpsertNamespace(suspendNamespace())
	gang := func(pods int32, gpus int) *batchv1.Job {
		j := suspendable("susp")
		j.Spec.Parallelism, j.Spec.Completions = ptr.To(pods), ptr.To(pods)
		j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		j.Spec.Template.Spec = at.Pod("x", "t").GPUs(gpus).Obj().Spec
		return j
	}
	for _, tc := range []struct {
		name    string
		job     *batchv1.Job
		refused string
	}{
		{"larger than the cluster", gang(6, 2), "the whole cluster has 10"},
		{"larger than the team can hold", gang(4, 2), "team a may hold at most 6"},
		{"more pods than the queued-pod cap", gang(5, 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := answer(t, m, jobReview(tc.job))
			if tc.refused == "" {
				if !resp.Allowed || resp.Patch == nil {
					t.Fatalf("allowed %v, patch %s, result %+v; want it queued suspended", resp.Allowed, resp.Patch, resp.Result)
				}
				return
			}
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.refused) ||
				!strings.HasPrefix(resp.Result.Message, "the Job: ") {
				t.Fatalf("allowed %v, result %+v; want a refusal saying %q", resp.Allowed, resp.Result, tc.refused)
			}
		})
	}
}

// suspendNamespace is namespace susp of team a, labelled to queue Jobs
// suspended.
func suspendNamespace() *corev1.Namespace {
	ns := at.Namespace("susp", "a")
	ns.Labels[contract.Default.QueueingLabel] = contract.QueueingSuspend
	return ns
}

// suspendable is a top-level Job of two 1-GPU pods.
func suspendable(namespace string) *batchv1.Job {
	gpu := at.Pod("x", "t").GPUs(1).Obj()
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: namespace},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: gpu.Spec}}}
}

// checkSuspendPatch checks a patch of a Job review: applied, the Job is
// suspended and marked queued, and nothing else of it changed; the Job
// was one to suspend, in a namespace that suspends Jobs.
func checkSuspendPatch(t *testing.T, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) {
	t.Helper()
	if req.Operation != admissionv1.Create || req.Namespace != "susp" && !strings.Contains(string(req.Object.Raw), `"namespace":"susp"`) {
		t.Fatalf("patched %s of a Job in namespace %q", req.Operation, req.Namespace)
	}
	var job batchv1.Job
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &job); err != nil { // as the API server reads it
		t.Fatalf("patched a Job that does not decode: %v", err)
	}
	if !podreq.Suspendable(&job, contract.Default) {
		t.Fatalf("patched a Job that is not to be suspended: %s", req.Object.Raw)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	out, err := patch.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", resp.Patch, err)
	}
	var got batchv1.Job
	if err := kjson.UnmarshalCaseSensitivePreserveInts(out, &got); err != nil {
		t.Fatal(err)
	}
	if !podreq.Suspended(&got) || !podreq.QueuedJob(&got, contract.Default) {
		t.Fatalf("after the patch: suspend %v, annotations %v; want suspended and marked", got.Spec.Suspend, got.Annotations)
	}
	got.Spec.Suspend = job.Spec.Suspend
	delete(got.Annotations, contract.Default.QueuedJobAnnotation)
	if len(got.Annotations) == 0 && len(job.Annotations) == 0 {
		got.Annotations, job.Annotations = nil, nil
	}
	if !equality.Semantic.DeepEqual(&got, &job) {
		t.Fatalf("the patch changed more than suspend and the mark: %s", resp.Patch)
	}
}

func jobSetReview(namespace, raw string) []byte {
	return at.Body(&admissionv1.AdmissionRequest{UID: "req-jobset",
		Kind:      metav1.GroupVersionKind{Group: podreq.JobSetGroup, Version: "v1alpha2", Kind: "JobSet"},
		Resource:  metav1.GroupVersionResource{Group: podreq.JobSetGroup, Version: "v1alpha2", Resource: "jobsets"},
		Namespace: namespace, Name: "llm", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(raw)}})
}

// jobSetOf is a JobSet of a CPU launcher and 2 Jobs of 2 GPU workers each
// asking for workerGPUs (none: ""), with driver (if not "") a replicated job of one
// pod asking for that many GPUs.
func jobSetOf(namespace, workerGPUs, driver, meta string) string {
	gpu := func(n string) string {
		if n == "" {
			return `{"spec":{"containers":[{"name":"c"}]}}`
		}
		return `{"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"` + n + `"}}}]}}`
	}
	rjobs := `{"name":"launcher","template":{"spec":{"template":{"spec":{"containers":[{"name":"c"}]}}}}},
 {"name":"workers","replicas":2,"template":{"spec":{"parallelism":2,"completions":2,"completionMode":"Indexed","template":` + gpu(workerGPUs) + `}}}`
	if driver != "" {
		rjobs += `,{"name":"driver","template":{"spec":{"template":` + gpu(driver) + `}}}`
	}
	return `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"llm","namespace":"` + namespace + `"` + meta + `},
"spec":{"replicatedJobs":[` + rjobs + `]}}`
}

// TestMutatingSuspendsJobSets: a top-level JobSet whose GPU pods share one
// shape is created suspended and marked queued where the namespace queues
// Jobs suspended; one of several shapes, owned by a training job, of
// Kueue's or without GPUs is left alone (its pods are gated), and one whose
// pods the webhook would refuse is refused.
func TestMutatingSuspendsJobSets(t *testing.T) {
	_, m, v := queueHandlers(t)
	v.UpsertNamespace(suspendNamespace())
	for _, tc := range []struct {
		name, raw, refused string
		suspend            bool
	}{
		{"suspend namespace", jobSetOf("susp", "1", "", ""), "", true},
		{"one shape in two replicated jobs", jobSetOf("susp", "1", "1", ""), "", true},
		{"pods queued namespace", jobSetOf("ns", "1", "", ""), "", false},
		{"several shapes", jobSetOf("susp", "1", "2", ""), "", false},
		{"owned by a training job", jobSetOf("susp", "1", "", `,"ownerReferences":[{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","name":"t","uid":"u","controller":true}]`), "", false},
		{"Kueue's", jobSetOf("susp", "1", "", `,"labels":{"kueue.x-k8s.io/queue-name":"q"}`), "", false},
		{"no GPUs", jobSetOf("susp", "", "", ""), "", false},
		{"pods the webhook refuses", jobSetOf("susp", "64", "", ""), `replicated job "workers"`, false},
		// 2 Jobs x 2 pods x 4 GPUs, one gang: 16 GPUs, the cluster has 10.
		{"gang larger than the cluster", jobSetOf("susp", "4", "", ""), "the whole cluster has 10", false},
		// 8 GPUs: the cluster has them, team a can never hold more than 6.
		{"gang larger than the team can hold", jobSetOf("susp", "2", "", ""), "team a may hold at most 6", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := answer(t, m, jobSetReview("susp", tc.raw))
			if tc.refused != "" {
				if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.refused) {
					t.Fatalf("allowed %v, result %+v; want a refusal naming %s", resp.Allowed, resp.Result, tc.refused)
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("refused: %v", resp.Result)
			}
			if !tc.suspend {
				if resp.Patch != nil {
					t.Fatalf("patched %s, want no change", resp.Patch)
				}
				return
			}
			checkJobSetPatch(t, []byte(tc.raw), resp)
		})
	}
}

// checkJobSetPatch checks a patch of a JobSet review: the JobSet was one
// to suspend, and applied, the patch suspends and marks it and changes
// nothing else.
func checkJobSetPatch(t *testing.T, raw []byte, resp *admissionv1.AdmissionResponse) {
	t.Helper()
	in, err := podreq.ReadJobSet(raw)
	if err != nil || !podreq.JobSetSuspendable(in, contract.Default) {
		t.Fatalf("patched a JobSet that is not to be suspended (%v): %s", err, raw)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	out, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", resp.Patch, err)
	}
	got, err := podreq.ReadJobSet(out)
	if err != nil {
		t.Fatal(err)
	}
	if !podreq.JobSetSuspended(got) || got.Annotations[contract.Default.QueuedJobAnnotation] != "true" {
		t.Fatalf("after the patch: %s", out)
	}
	var before, after map[string]any
	if err := json.Unmarshal(raw, &before); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatal(err)
	}
	for _, m := range []map[string]any{before, after} {
		if spec, ok := m["spec"].(map[string]any); ok {
			delete(spec, "suspend")
		}
		if meta, ok := m["metadata"].(map[string]any); ok {
			if ann, ok := meta["annotations"].(map[string]any); ok {
				delete(ann, contract.Default.QueuedJobAnnotation)
				if len(ann) == 0 {
					delete(meta, "annotations")
				}
			}
		}
	}
	if !equality.Semantic.DeepEqual(before, after) {
		t.Fatalf("the patch changed more than suspend and the mark: %s", resp.Patch)
	}
}
