package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

const controller = "system:serviceaccount:rota-system:rota-extender"

// queueHandlers returns the validating and mutating handlers over one view:
// team a (4 GPUs, 16 GiB, 2 borrowable from the pool; maxQueuedPods 3) on
// namespace ns, the same team on namespace off labelled with queueing off
// and on namespace kq labelled as Kueue's, and one node of 8 "H100" and one of 2 "T4" GPUs.
func queueHandlers(t testing.TB) (validate, mutate *Handler, v *view.View) {
	t.Helper()
	v = view.New(view.Options{Names: contract.Default})
	v.SetConfig(quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 4, GPUMemoryGiB: 16, Borrow: quota.Limits{GPUs: 2}, MaxQueuedPods: 3}},
		SharedPool: quota.Limits{GPUs: 2}})
	v.UpsertNamespace(at.Namespace("ns", "a"))
	v.UpsertNamespace(at.QueueingOff(at.Namespace("off", "a")))
	v.UpsertNamespace(at.QueueingKueue(at.Namespace("kq", "a")))
	if err := v.UpsertNode(at.Node("n1", 8, 81920)); err != nil {
		t.Fatal(err)
	}
	if err := v.UpsertNode(at.ModelNode("t1", "T4", 2, 15360)); err != nil {
		t.Fatal(err)
	}
	o := Options{Names: contract.Default, View: v, QueueControllers: []string{controller}}
	return New(o), NewMutating(o), v
}

func answer(t *testing.T, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("reply %s: %v", rec.Body, err)
	}
	return out.Response
}

// applyGatePatch checks that a patch is the one "add /spec/schedulingGates"
// operation the webhook writes and applies it to pod.
func applyGatePatch(t *testing.T, resp *admissionv1.AdmissionResponse, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
	}
	var ops []struct {
		Op    string                     `json:"op"`
		Path  string                     `json:"path"`
		Value []corev1.PodSchedulingGate `json:"value"`
	}
	if err := json.Unmarshal(resp.Patch, &ops); err != nil || len(ops) != 1 || ops[0].Op != "add" || ops[0].Path != "/spec/schedulingGates" {
		t.Fatalf("patch %s (%v), want one add of /spec/schedulingGates", resp.Patch, err)
	}
	out := pod.DeepCopy()
	out.Spec.SchedulingGates = ops[0].Value
	return out
}

func gateNames(p *corev1.Pod) []string {
	var out []string
	for _, g := range p.Spec.SchedulingGates {
		out = append(out, g.Name)
	}
	return out
}

func TestMutateGatesGPUPods(t *testing.T) {
	gate := contract.Default.QueueGate
	tests := []struct {
		name      string
		give      *corev1.Pod
		op        admissionv1.Operation
		wantGates []string // nil: no patch
	}{
		{name: "whole GPUs", give: at.Pod("ns", "p").GPUs(2).Obj(), wantGates: []string{gate}},
		{name: "memory share", give: at.Pod("ns", "p").Memory("20").Obj(), wantGates: []string{gate}},
		{name: "GPU in an init container only", give: at.Pod("ns", "p").InitGPUs(1).Obj(), wantGates: []string{gate}},
		{name: "limits only", give: at.Pod("ns", "p").Resource(contract.Default.GPU, "1", false, true).Obj(), wantGates: []string{gate}},
		{name: "other gates kept", give: at.Pod("ns", "p").GPUs(1).SchedulingGate("other.io/wait").Obj(),
			wantGates: []string{"other.io/wait", gate}},
		{name: "a malformed GPU request is still gated (the validating webhook refuses it)",
			give: at.Pod("ns", "p").GPUs(1).Memory("4").Obj(), wantGates: []string{gate}},
		{name: "unknown namespace is gated", give: at.Pod("new-ns", "p").GPUs(1).Obj(), wantGates: []string{gate}},
		{name: "CPU-only pod", give: at.Pod("ns", "web").Resource("cpu", "2", true, true).Obj()},
		{name: "already gated", give: at.Pod("ns", "p").GPUs(1).Gated().Obj()},
		{name: "namespace with queueing off", give: at.Pod("off", "p").GPUs(1).Obj()},
		{name: "namespace Kueue queues", give: at.Pod("kq", "p").GPUs(1).Obj()},
		{name: "bound at creation", give: at.Pod("ns", "p").GPUs(1).Node("n1").Obj()},
		{name: "update", give: at.Pod("ns", "p").GPUs(1).Obj(), op: admissionv1.Update},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, m, _ := queueHandlers(t)
			op, old := tc.op, (*corev1.Pod)(nil)
			if op == "" {
				op = admissionv1.Create
			}
			if op == admissionv1.Update {
				old = tc.give
			}
			resp := answer(t, m, at.Review(op, tc.give, old))
			if !resp.Allowed {
				t.Fatalf("mutating webhook refused: %+v", resp.Result)
			}
			if tc.wantGates == nil {
				if resp.Patch != nil {
					t.Fatalf("patch %s, want none", resp.Patch)
				}
				return
			}
			got := applyGatePatch(t, resp, tc.give)
			if !slices.Equal(gateNames(got), tc.wantGates) {
				t.Fatalf("gates after the patch %q, want %q", gateNames(got), tc.wantGates)
			}
			// Idempotent: the gated pod is left alone.
			if again := answer(t, m, at.Review(admissionv1.Create, got, nil)); again.Patch != nil {
				t.Fatalf("second pass patched again: %s", again.Patch)
			}
		})
	}
}

func TestMutateQueueingOffInConfig(t *testing.T) {
	_, m, v := queueHandlers(t)
	cfg, _ := v.Config()
	cfg.Queueing = quota.QueueingOff
	v.SetConfig(cfg)
	if resp := answer(t, m, at.Review(admissionv1.Create, at.Pod("ns", "p").GPUs(1).Obj(), nil)); !resp.Allowed || resp.Patch != nil {
		t.Fatalf("queueing: off: allowed=%v patch=%s, want no patch", resp.Allowed, resp.Patch)
	}
}

// A namespace the informer has not shown yet is read before deciding.
type namespaces map[string]*corev1.Namespace

func (n namespaces) Namespace(_ context.Context, name string) (*corev1.Namespace, error) {
	return n[name], nil
}

func TestMutateReadsUnseenNamespace(t *testing.T) {
	_, _, v := queueHandlers(t)
	m := NewMutating(Options{Names: contract.Default, View: v,
		Namespaces: namespaces{"fresh": at.QueueingOff(at.Namespace("fresh", "a"))}})
	if resp := answer(t, m, at.Review(admissionv1.Create, at.Pod("fresh", "p").GPUs(1).Obj(), nil)); resp.Patch != nil {
		t.Fatalf("pod of a fresh namespace with queueing off was gated: %s", resp.Patch)
	}
}

func TestValidateQueuedPods(t *testing.T) {
	tests := []struct {
		name        string
		give        *corev1.Pod
		wantAllowed bool
		wantMessage string
	}{
		{name: "over current quota, queued", give: at.Pod("ns", "p").GPUs(6).Gated().Obj(), wantAllowed: true},
		{name: "beyond quota + borrow", give: at.Pod("ns", "p").GPUs(7).Gated().Obj(),
			wantMessage: "team a may hold at most 6 GPUs (4 quota + 2 borrow); this pod needs 7 GPUs, so it can never run"},
		{name: "gang beyond quota + borrow", give: at.Pod("ns", "g-0").GPUs(4).Gang("g", "2").Gated().Obj(),
			wantMessage: "team a may hold at most 6 GPUs (4 quota + 2 borrow); this gang needs 8 GPUs (gang g: 2 pods x 4 GPUs)"},
		{name: "larger than any GPU of its model", give: at.Pod("ns", "p").Memory("20").Gated().Annotation(contract.Default.GPUModelsAnnotation, "T4").Obj(),
			wantMessage: `the pod asks for 20 GiB of GPU memory on one GPU but the largest GPU of GPU model "T4" has 15 GiB, so it can never run`},
		{name: "more GPUs than a node of its models", give: at.Pod("ns", "p").GPUs(3).Gated().Annotation(contract.Default.GPUModelsAnnotation, "T4, H200").Obj(),
			wantMessage: `the pod asks for 3 GPUs but the largest node with the GPU models it accepts ("T4", "H200") has 2`},
		{name: "fits a node of one of its models", give: at.Pod("ns", "p").GPUs(3).Gated().Annotation(contract.Default.GPUModelsAnnotation, "T4,H100").Obj(),
			wantAllowed: true},
		{name: "models no node has yet: the cluster's largest node applies", give: at.Pod("ns", "p").GPUs(6).Gated().Annotation(contract.Default.GPUModelsAnnotation, "H200").Obj(),
			wantAllowed: true},
		{name: "malformed models annotation", give: at.Pod("ns", "p").GPUs(1).Gated().Annotation(contract.Default.GPUModelsAnnotation, "H100,,T4").Obj(),
			wantMessage: `metadata.annotations[example.com/gpu-models]: "H100,,T4" has an empty model name at position 2`},
		{name: "malformed max-runtime", give: at.Pod("ns", "p").GPUs(1).Gated().Annotation(contract.Default.MaxRuntimeAnnotation, "2d").Obj(),
			wantMessage: `metadata.annotations[example.com/max-runtime]: "2d" is not a duration`},
		{name: "malformed request", give: at.Pod("ns", "p").GPUs(1).Memory("4").Gated().Obj(), wantMessage: "not both"},
		{name: "gate where queueing is off", give: at.Pod("off", "p").GPUs(1).Gated().Obj(),
			wantMessage: "namespace off is labelled example.com/queueing=off"},
		// Not gated: today's deny at creation.
		{name: "ungated over quota is refused now", give: at.Pod("off", "p").GPUs(7).Obj(),
			wantMessage: "team a: quota 4 GPUs, 0 in use or queued (0 running, 0 pending); this pod needs 7"},
		{name: "ungated within quota", give: at.Pod("off", "p").GPUs(4).Obj(), wantAllowed: true},
		// Kueue's namespace: Kueue's ClusterQueue is the quota; Rota checks the request.
		{name: "Kueue's namespace: over Rota's quota, allowed", give: at.Pod("kq", "p").GPUs(7).Obj(), wantAllowed: true},
		{name: "Kueue's namespace: a gang over Rota's quota, allowed", give: at.Pod("kq", "g-0").GPUs(4).Gang("g", "4").Obj(), wantAllowed: true},
		{name: "Kueue's namespace: malformed request refused", give: at.Pod("kq", "p").GPUs(1).Memory("4").Obj(), wantMessage: "not both"},
		{name: "Kueue's namespace: larger than any node, refused", give: at.Pod("kq", "p").GPUs(9).Obj(), wantMessage: "the largest node has 8"},
		{name: "Kueue's namespace: Rota's gate refused", give: at.Pod("kq", "p").GPUs(1).Gated().Obj(),
			wantMessage: "namespace kq is labelled example.com/queueing=kueue (Kueue queues its workloads)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			val, _, _ := queueHandlers(t)
			resp := answer(t, val, at.Review(admissionv1.Create, tc.give, nil))
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			if resp.Allowed != tc.wantAllowed || !strings.Contains(msg, tc.wantMessage) {
				t.Fatalf("allowed=%v %q\nwant allowed=%v and a message containing %q", resp.Allowed, msg, tc.wantAllowed, tc.wantMessage)
			}
		})
	}
}

func TestValidateQueueCap(t *testing.T) {
	val, _, v := queueHandlers(t) // maxQueuedPods 3
	for i, name := range []string{"q-0", "q-1", "q-2", "q-3"} {
		resp := answer(t, val, at.Review(admissionv1.Create, at.Pod("ns", name).GPUs(1).Gated().Obj(), nil))
		if want := i < 3; resp.Allowed != want {
			t.Fatalf("%s: allowed=%v %+v, want %v", name, resp.Allowed, resp.Result, want)
		}
		if i == 3 && !strings.Contains(resp.Result.Message, "team a has 3 pods queued (maxQueuedPods 3); this pod would be one more") {
			t.Fatalf("cap message %q", resp.Result.Message)
		}
	}
	// Queued pods hold no quota: an ungated pod of the team still fits.
	for _, name := range []string{"q-0", "q-1", "q-2"} {
		v.UpsertPod(at.Pod("ns", name).GPUs(1).Gated().Obj())
	}
	if resp := answer(t, val, at.Review(admissionv1.Create, at.Pod("off", "now").GPUs(6).Obj(), nil)); !resp.Allowed {
		t.Fatalf("an ungated pod after three queued: %+v", resp.Result)
	}
}

func TestGateRemoval(t *testing.T) {
	gated := at.Pod("ns", "p").GPUs(1).Gated().Obj()
	ungated := at.Pod("ns", "p").GPUs(1).Obj()
	twoGates := at.Pod("ns", "p").GPUs(1).SchedulingGate("other.io/wait").Gated().Obj()
	otherOnly := at.Pod("ns", "p").GPUs(1).SchedulingGate("other.io/wait").Obj()
	annotated := at.Pod("ns", "p").GPUs(1).Gated().Annotation("note", "x").Obj()
	tests := []struct {
		name        string
		pod, old    *corev1.Pod
		user        string
		wantAllowed bool
	}{
		{name: "by hand", pod: ungated, old: gated, user: "alice"},
		{name: "by an admin", pod: ungated, old: gated, user: "kubernetes-admin"},
		{name: "by another service account", pod: ungated, old: gated, user: "system:serviceaccount:rota-system:rota-admission"},
		{name: "by hand, keeping another gate", pod: otherOnly, old: twoGates, user: "alice"},
		{name: "by the queue controller", pod: ungated, old: gated, user: controller, wantAllowed: true},
		{name: "an update that keeps the gate", pod: annotated, old: gated, user: "alice", wantAllowed: true},
		{name: "removing another gate", pod: gated, old: twoGates, user: "alice", wantAllowed: true},
		{name: "a pod that never had the gate", pod: at.Pod("ns", "p").GPUs(1).Annotation("note", "x").Obj(), old: ungated, user: "alice", wantAllowed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			val, _, _ := queueHandlers(t)
			resp := answer(t, val, at.ReviewAs(admissionv1.Update, tc.pod, tc.old, tc.user))
			if resp.Allowed != tc.wantAllowed {
				t.Fatalf("allowed=%v %+v, want %v", resp.Allowed, resp.Result, tc.wantAllowed)
			}
			want := "only Rota's queue controller may remove scheduling gate example.com/queue; the pod is queued: kubectl rota why p -n ns"
			if !tc.wantAllowed && !strings.Contains(resp.Result.Message, want) {
				t.Errorf("message %q, want %q", resp.Result.Message, want)
			}
		})
	}
}

// FuzzMutate: the mutating webhook never panics; it patches only CREATEs
// of pods that ask for Rota's resources and lack the gate, and a patch,
// applied, gives the pod the gate once while keeping its other gates.
func FuzzMutate(f *testing.F) {
	f.Add(at.Review(admissionv1.Create, at.Pod("ns", "p").GPUs(2).Obj(), nil))
	f.Add(at.Review(admissionv1.Create, at.Pod("ns", "p").GPUs(2).SchedulingGate("a/b").Obj(), nil))
	f.Add(at.Review(admissionv1.Create, at.Pod("ns", "p").Gated().Obj(), nil))
	f.Add(at.Review(admissionv1.Create, at.Pod("off", "p").InitGPUs(1).Obj(), nil))
	f.Add(at.Review(admissionv1.Update, at.Pod("ns", "p").GPUs(1).Obj(), at.Pod("ns", "p").GPUs(1).Gated().Obj()))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{"spec":{"schedulingGates":null}}}}`))
	f.Add(jobReview(suspendable("susp")))
	f.Add(jobReview(suspendable("ns")))
	f.Add(jobSetReview("susp", jobSetOf("susp", "1", "", "")))
	f.Add(jobSetReview("susp", jobSetOf("susp", "1", "2", "")))
	_, m, v := queueHandlers(f)
	v.UpsertNamespace(suspendNamespace())
	gate := contract.Default.QueueGate
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			return
		}
		in, err := DecodeReview(body)
		if err != nil {
			t.Fatalf("200 for a body DecodeReview rejects: %v", err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != in.Request.UID {
			t.Fatalf("reply %s does not answer uid %q (%v)", rec.Body, in.Request.UID, err)
		}
		if out.Response.Patch == nil {
			return
		}
		switch in.Request.Kind.Kind {
		case "Job":
			checkSuspendPatch(t, in.Request, out.Response)
			return
		case "JobSet":
			if in.Request.Operation != admissionv1.Create {
				t.Fatalf("patched a JobSet on %s", in.Request.Operation)
			}
			checkJobSetPatch(t, in.Request.Object.Raw, out.Response)
			return
		}
		var pod corev1.Pod
		if err := kjson.UnmarshalCaseSensitivePreserveInts(in.Request.Object.Raw, &pod); err != nil { // as the API server reads it
			t.Fatalf("patched a pod that does not decode: %v", err)
		}
		if in.Request.Operation != admissionv1.Create || view.Gated(&pod, contract.Default) {
			t.Fatalf("patched %s of a pod with gates %v", in.Request.Operation, pod.Spec.SchedulingGates)
		}
		got := applyGatePatch(t, out.Response, &pod)
		want := append(gateNames(&pod), gate)
		if !slices.Equal(gateNames(got), want) {
			t.Fatalf("gates after the patch %q, want %q", gateNames(got), want)
		}
	})
}

// A Rota gang in Kueue's namespace that also asks for Kueue's
// topology-aware scheduling is admitted with a warning; without the
// annotation, or when it is no gang, without one.
func TestKueueTopologyWarning(t *testing.T) {
	val, _, _ := queueHandlers(t)
	tas := "kueue.x-k8s.io/podset-required-topology"
	for _, tc := range []struct {
		name string
		give *corev1.Pod
		warn bool
	}{
		{"gang with Kueue's topology annotation", at.Pod("kq", "g-0").GPUs(4).Gang("g", "2").Annotation(tas, "example.com/leaf").Obj(), true},
		{"gang behind Kueue's topology gate", at.Pod("kq", "g-0").GPUs(4).Gang("g", "2").SchedulingGate("kueue.x-k8s.io/topology").Obj(), true},
		{"gang alone", at.Pod("kq", "g-0").GPUs(4).Gang("g", "2").Obj(), false},
		{"Kueue's topology, no gang", at.Pod("kq", "p").GPUs(4).Annotation(tas, "example.com/leaf").Obj(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := answer(t, val, at.Review(admissionv1.Create, tc.give, nil))
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if got := len(resp.Warnings) > 0; got != tc.warn || (got && !strings.Contains(resp.Warnings[0], "both narrow its nodes")) {
				t.Fatalf("warnings %q, want a warning: %v", resp.Warnings, tc.warn)
			}
		})
	}
}

// jobSets is a JobSetGetter over fixed JobSets.
type jobSets map[string]podreq.JobSetShape

func (j jobSets) JobSet(_ context.Context, namespace, name, _ string) (podreq.JobSetShape, error) {
	if js, ok := j[namespace+"/"+name]; ok {
		return js, nil
	}
	return podreq.JobSetShape{}, apierrors.NewNotFound(schema.GroupResource{Group: podreq.JobSetGroup, Resource: "jobsets"}, name)
}

// lwss is an LWSGetter over fixed LeaderWorkerSets.
type lwss map[string]podreq.LWSShape

func (l lwss) LeaderWorkerSet(_ context.Context, namespace, name string) (podreq.LWSShape, error) {
	if s, ok := l[namespace+"/"+name]; ok {
		return s, nil
	}
	return podreq.LWSShape{}, apierrors.NewNotFound(schema.GroupResource{Group: podreq.LWSGroup, Resource: "leaderworkersets"}, name)
}

// podGroups is a PodGroupGetter over fixed PodGroups' gang minCount (0:
// not a gang).
type podGroups map[string]int32

func (p podGroups) PodGroupGang(_ context.Context, namespace, name string) (*int32, error) {
	n, ok := p[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "podgroups"}, name)
	}
	if n == 0 {
		return nil, nil
	}
	return &n, nil
}

// trainingJobs is a TrainingJobGetter over fixed jobs, by kind/name.
type trainingJobs map[string]podreq.TrainingJobShape

func (j trainingJobs) TrainingJob(_ context.Context, _ string, ref metav1.OwnerReference) (podreq.TrainingJobShape, error) {
	if s, ok := j[ref.Kind+"/"+ref.Name]; ok {
		return s, nil
	}
	return podreq.TrainingJobShape{}, apierrors.NewNotFound(schema.GroupResource{Group: podreq.KubeflowGroup, Resource: "pytorchjobs"}, ref.Name)
}

// jobs is a JobGetter over fixed Jobs.
type jobs map[string]*batchv1.Job

func (j jobs) Job(_ context.Context, namespace, name, uid string) (*batchv1.Job, error) {
	if job, ok := j[namespace+"/"+name]; ok && string(job.UID) == uid {
		return job, nil
	}
	return nil, apierrors.NewNotFound(batchv1.Resource("jobs"), name)
}

// The pods of an Indexed Job with completions equal to parallelism are
// named a gang of that size by the mutating webhook, gated or not; other
// Jobs' pods, pods naming their own gang, and pods of a Job of the same
// name but another UID are left as they are.
func TestMutateGangFromJob(t *testing.T) {
	n := contract.Default
	indexed, nonIndexed := batchv1.IndexedCompletion, batchv1.NonIndexedCompletion
	four, eight := int32(4), int32(8)
	job := func(name string, mode *batchv1.CompletionMode, completions *int32) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
			Spec: batchv1.JobSpec{CompletionMode: mode, Completions: completions, Parallelism: &four,
				Template: corev1.PodTemplateSpec{Spec: at.Pod("ns", "t").GPUs(8).Obj().Spec}}}
	}
	js := jobs{"ns/train": job("train", &indexed, &four), "ns/batch": job("batch", &nonIndexed, &four),
		"ns/sweep": job("sweep", &indexed, &eight), "kq/train": job("train", &indexed, &four),
		"ns/llm-workers-0": job("llm-workers-0", &indexed, &four), "ns/llm-workers-1": job("llm-workers-1", &indexed, &four)}
	js["kq/train"].Namespace = "kq"
	yes := true
	for _, w := range []string{"ns/llm-workers-0", "ns/llm-workers-1"} {
		js[w].OwnerReferences = []metav1.OwnerReference{{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "llm", UID: "uid-llm", Controller: &yes}}
		js[w].Labels = map[string]string{podreq.ReplicatedJobLabel: "workers"}
	}
	sets := jobSets{"ns/llm": {Name: "llm", ReplicatedJobs: []podreq.ReplicatedJobShape{
		{Name: "workers", Replicas: 2, Template: batchv1.JobTemplateSpec{Spec: js["ns/llm-workers-0"].Spec}}}}}
	owned := func(ns, job, uid string) *at.PodBuilder {
		return at.Pod(ns, job+"-0").GPUs(8).ControlledBy("batch/v1", "Job", job, uid)
	}
	tests := []struct {
		name     string
		give     *corev1.Pod
		wantGang string // "" : no gang added
		wantGate bool
	}{
		{"Indexed, completions = parallelism", owned("ns", "train", "uid-train").Obj(), "train", true},
		{"in Kueue's namespace: the gang, no gate", owned("kq", "train", "uid-train").Obj(), "train", false},
		{"NonIndexed", owned("ns", "batch", "uid-batch").Obj(), "", true},
		{"more completions than parallelism", owned("ns", "sweep", "uid-sweep").Obj(), "", true},
		{"another Job of that name", owned("ns", "train", "uid-old").Obj(), "", true},
		{"no such Job", owned("ns", "gone", "uid-gone").Obj(), "", true},
		{"names its own gang", owned("ns", "train", "uid-train").Gang("mine", "4").Obj(), "", true},
		{"a JobSet's Job: the JobSet's gang", owned("ns", "llm-workers-1", "uid-llm-workers-1").Obj(), "llm", true},
		{"a LeaderWorkerSet group's pod", at.Pod("ns", "serve-1-2").GPUs(8).Label(podreq.LWSNameLabel, "serve").
			Label(podreq.LWSGroupIndexLabel, "1").Obj(), "serve-1", true},
		{"a PyTorchJob's pod", at.Pod("ns", "bert-worker-0").GPUs(8).ControlledBy("kubeflow.org/v1", "PyTorchJob", "bert", "uid-bert").Obj(), "bert", true},
		{"a PodGroup's pod (Kubernetes' gang API)", inGroup(at.Pod("ns", "w-0").GPUs(8).Obj(), "workers"), "workers", true},
		{"a PodGroup of the basic policy", inGroup(at.Pod("ns", "w-0").GPUs(8).Obj(), "basic"), "", true},
		{"a Deployment's pod (no gang read from it)", at.Pod("ns", "web-1").GPUs(8).ControlledBy("apps/v1", "ReplicaSet", "web", "uid-web").Obj(), "", true},
		{"a LeaderWorkerSet that starts workers once the leader is ready", at.Pod("ns", "lazy-0").GPUs(8).Label(podreq.LWSNameLabel, "lazy").
			Label(podreq.LWSGroupIndexLabel, "0").Obj(), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, v := queueHandlers(t)
			m := NewMutating(Options{Names: n, View: v, Jobs: js, JobSets: sets,
				LeaderWorkerSets: lwss{"ns/serve": {Name: "serve", Size: 4}, "ns/lazy": {Name: "lazy", Size: 4, LeaderReady: true}},
				PodGroups:        podGroups{"ns/workers": 4, "ns/basic": 0},
				TrainingJobs: trainingJobs{"PyTorchJob/bert": {Name: "bert", Replicas: []podreq.TrainingReplica{
					{Type: "Master", Replicas: 1, Wants: true}, {Type: "Worker", Replicas: 3, Wants: true}}}}})
			resp := answer(t, m, at.Review(admissionv1.Create, tc.give, nil))
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			got := applyPatch(t, resp, tc.give)
			gang := got.Labels[n.GangLabel]
			wantSize := "4"
			if tc.wantGang == "llm" {
				wantSize = "8" // 2 Jobs x 4
			}
			if tc.wantGang != "" && (gang != tc.wantGang || got.Annotations[n.GangSizeAnnotation] != wantSize) {
				t.Errorf("gang %q size %q, want %q of %s", gang, got.Annotations[n.GangSizeAnnotation], tc.wantGang, wantSize)
			}
			if tc.wantGang == "" && gang != tc.give.Labels[n.GangLabel] {
				t.Errorf("gang label set to %q, want it left as %q", gang, tc.give.Labels[n.GangLabel])
			}
			if g := slices.Contains(gateNames(got), n.QueueGate); g != tc.wantGate {
				t.Errorf("gated %v, want %v", g, tc.wantGate)
			}
		})
	}
}

// applyPatch applies the webhook's JSON patch (add operations on
// labels, annotations and the gates) to a copy of pod.
func applyPatch(t *testing.T, resp *admissionv1.AdmissionResponse, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	out := pod.DeepCopy()
	if resp.Patch == nil {
		return out
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(resp.Patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("patch op %q, want add", op.Op)
		}
		var err error
		switch {
		case op.Path == "/spec/schedulingGates":
			err = json.Unmarshal(op.Value, &out.Spec.SchedulingGates)
		case op.Path == "/metadata/labels":
			err = json.Unmarshal(op.Value, &out.Labels)
		case op.Path == "/metadata/annotations":
			err = json.Unmarshal(op.Value, &out.Annotations)
		case strings.HasPrefix(op.Path, "/metadata/labels/"):
			var v string
			err = json.Unmarshal(op.Value, &v)
			out.Labels[unescape.Replace(strings.TrimPrefix(op.Path, "/metadata/labels/"))] = v
		case strings.HasPrefix(op.Path, "/metadata/annotations/"):
			var v string
			err = json.Unmarshal(op.Value, &v)
			out.Annotations[unescape.Replace(strings.TrimPrefix(op.Path, "/metadata/annotations/"))] = v
		default:
			t.Fatalf("patch path %q", op.Path)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// inGroup makes pod a member of PodGroup group (spec.schedulingGroup).
func inGroup(pod *corev1.Pod, group string) *corev1.Pod {
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	return pod
}
