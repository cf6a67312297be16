package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/pkg/contract"
)

const quotaYAML = `
teams:
  vision:
    gpus: 8
    gpuMemoryGiB: 40
    borrow: {gpus: 2}
    maxPriority: 1000
  nlp:
    gpus: 4
sharedPool: {gpus: 4}
`

func quotaConfigMap(yaml string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "rota-system", Name: "rota-quota"},
		Data: map[string]string{"quota.yaml": yaml}}
}

// baseObjects is the cluster of the table test: two nodes of 8 x 80 GiB,
// teams vision (6 GPUs in use: 4 running, 2 pending) and nlp (one member of
// gang gm, 1 GPU), an unlabelled namespace and one of an unknown team.
func baseObjects() []runtime.Object {
	return []runtime.Object{
		at.Node("n1", 8, 81920), at.Node("n2", 8, 81920),
		at.Namespace("vision-ns", "vision"), at.Namespace("nlp-ns", "nlp"),
		at.Namespace("plain", ""), at.Namespace("ghost-ns", "ghost"),
		quotaConfigMap(quotaYAML),
		at.Pod("vision-ns", "run1").GPUs(4).Node("n1").Phase(corev1.PodRunning).Obj(),
		at.Pod("vision-ns", "pend1").GPUs(2).Phase(corev1.PodPending).Obj(),
		at.Pod("vision-ns", "done").GPUs(8).Node("n2").Phase(corev1.PodSucceeded).Obj(),
		at.Pod("nlp-ns", "gm-0").GPUs(1).Gang("gm", "3").Obj(),
		at.Pod("plain", "web").Obj(),
	}
}

func testConfig() config.Config {
	cfg := config.Default()
	cfg.TLSCertFile, cfg.TLSKeyFile = "unused.crt", "unused.key"
	cfg.LeaderElect = false
	return cfg
}

// startApp starts an App against a fake clientset holding objs and waits
// until it is ready.
func startApp(t testing.TB, cfg config.Config, objs ...runtime.Object) (*App, *fake.Clientset) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(objs...)
	app, err := NewForClient(ctx, cfg, client, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("NewForClient() error = %v", err)
	}
	app.start(ctx)
	waitFor(t, "the app to be ready", func() bool { return app.Ready() == nil })
	return app, client
}

func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return ok(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// post sends a body to /validate and decodes the reply.
func post(t testing.TB, h http.Handler, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST /validate = %d %s", rec.Code, rec.Body)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatalf("decoding the reply %s: %v", rec.Body, err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("reply is not an AdmissionReview response: %s", rec.Body)
	}
	return review.Response
}

func message(r *admissionv1.AdmissionResponse) string {
	if r.Result == nil {
		return ""
	}
	return r.Result.Message
}

func TestValidate(t *testing.T) {
	gpu := contract.Default.GPU
	create := func(p *corev1.Pod) []byte { return at.Review(admissionv1.Create, p, nil) }
	update := func(p, old *corev1.Pod) []byte { return at.Review(admissionv1.Update, p, old) }
	tests := []struct {
		name        string
		giveBody    []byte
		wantAllowed bool
		wantMessage string // substring; "" means no message
	}{
		// Allowed.
		{name: "pod without GPUs", giveBody: create(at.Pod("plain", "web2").Obj()), wantAllowed: true},
		{name: "not a pod", giveBody: at.Body(&admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}), wantAllowed: true},
		{name: "pod subresource", giveBody: at.Body(&admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, SubResource: "binding"}), wantAllowed: true},
		{name: "delete", giveBody: at.Review(admissionv1.Delete, at.Pod("vision-ns", "run1").GPUs(4).Obj(), nil), wantAllowed: true},
		{name: "within the guarantee", giveBody: create(at.Pod("vision-ns", "p").GPUs(2).Obj()), wantAllowed: true},
		{name: "borrowing from the pool", giveBody: create(at.Pod("vision-ns", "p").GPUs(4).Obj()), wantAllowed: true},
		{name: "memory share within quota", giveBody: create(at.Pod("vision-ns", "p").Memory("20").Obj()), wantAllowed: true},
		{name: "priority at the ceiling", giveBody: create(at.Pod("vision-ns", "p").GPUs(1).Priority(1000).Obj()), wantAllowed: true},
		{name: "gang that fits whole", giveBody: create(at.Pod("vision-ns", "t-0").GPUs(2).Gang("train", "2").Obj()), wantAllowed: true},
		{name: "next member of a gang with members", giveBody: create(at.Pod("nlp-ns", "gm-1").GPUs(1).Gang("gm", "3").Obj()), wantAllowed: true},
		{name: "update without relevant change", giveBody: update(
			at.Pod("vision-ns", "run1").GPUs(4).Annotation(contract.Default.AssignmentAnnotation, "{}").Obj(),
			at.Pod("vision-ns", "run1").GPUs(4).Obj()), wantAllowed: true},
		{name: "update of a pod without GPUs", giveBody: update(at.Pod("plain", "web").Label(contract.Default.TeamLabel, "x").Obj(),
			at.Pod("plain", "web").Obj()), wantAllowed: true},

		// Request validation.
		{name: "whole GPUs and memory", giveBody: create(at.Pod("vision-ns", "p").GPUs(1).Memory("4").Obj()),
			wantMessage: "ask for whole GPUs (example.com/gpu) or a memory share on one GPU (example.com/gpu-memory), not both"},
		{name: "memory in bytes", giveBody: create(at.Pod("vision-ns", "p").Memory("20Gi").Obj()),
			wantMessage: `"20Gi" looks like bytes; example.com/gpu-memory counts units of 1 GiB, so write "20"`},
		{name: "limits differ from requests", giveBody: create(at.Pod("vision-ns", "p").Resource(gpu, "2", true, false).Resource(gpu, "1", false, true).Obj()),
			wantMessage: `"1" differs from the request "2"; set both to the same value`},
		{name: "request without limit", giveBody: create(at.Pod("vision-ns", "p").Resource(gpu, "2", true, false).Obj()),
			wantMessage: "is missing; extended resources need limits equal to requests"},
		{name: "memory larger than any GPU", giveBody: create(at.Pod("vision-ns", "p").Memory("100").Obj()),
			wantMessage: "the pod asks for 100 GiB of GPU memory on one GPU but the largest GPU has 80 GiB; ask for at most 80 units"},
		{name: "more GPUs than any node", giveBody: create(at.Pod("vision-ns", "p").GPUs(9).Obj()),
			wantMessage: "the pod asks for 9 GPUs but the largest node has 8"},
		{name: "gang without size", giveBody: create(at.Pod("vision-ns", "p").GPUs(1).Gang("g", "").Obj()),
			wantMessage: "annotation example.com/gang-size: is missing"},
		{name: "gang size not a number", giveBody: create(at.Pod("vision-ns", "p").GPUs(1).Gang("g", "many").Obj()),
			wantMessage: `"many" is not a whole number`},

		// Teams.
		{name: "namespace without team", giveBody: create(at.Pod("plain", "p").GPUs(1).Obj()),
			wantMessage: "namespace plain has no example.com/team label, so Rota cannot charge its GPU use to a team; ask a cluster admin to label it (kubectl label namespace plain example.com/team=<team>)"},
		{name: "pod team label ignored without override", giveBody: create(at.Pod("plain", "p").GPUs(1).Label(contract.Default.TeamLabel, "vision").Obj()),
			wantMessage: "namespace plain has no example.com/team label"},
		{name: "team not in the configuration", giveBody: create(at.Pod("ghost-ns", "p").GPUs(1).Obj()),
			wantMessage: "team ghost has no GPU quota in Rota's quota configuration (ConfigMap rota-system/rota-quota key quota.yaml); ask a cluster admin to add the team"},
		{name: "priority above the ceiling", giveBody: create(at.Pod("vision-ns", "p").GPUs(1).Priority(2000).Obj()),
			wantMessage: "team vision may use pod priority up to 1000; this pod has priority 2000; choose a lower PriorityClass"},

		// Quota.
		{name: "over quota and borrow", giveBody: create(at.Pod("vision-ns", "p").GPUs(5).Obj()),
			wantMessage: "team vision: quota 8 GPUs, 6 in use or queued (4 running, 2 pending); this pod needs 5; borrowable from shared pool: 2 (team borrow limit 2, shared pool free 4)"},
		{name: "team that may not borrow", giveBody: create(at.Pod("nlp-ns", "p").GPUs(4).Obj()),
			wantMessage: "team nlp: quota 4 GPUs, 1 in use or queued (0 running, 1 pending); this pod needs 4; borrowable from shared pool: 0 (the team may not borrow)"},
		{name: "memory over quota", giveBody: create(at.Pod("vision-ns", "p").Memory("50").Obj()),
			wantMessage: "team vision: quota 40 GiB of GPU memory, 0 GiB in use or queued (0 GiB running, 0 GiB pending); this pod needs 50 GiB"},

		// Gangs.
		{name: "gang that does not fit now", giveBody: create(at.Pod("vision-ns", "t-0").GPUs(2).Gang("train", "3").Obj()),
			wantMessage: "team vision: quota 8 GPUs, 6 in use or queued (4 running, 2 pending); gang train (3 pods x 2 GPUs; 3 not yet admitted) needs 6; borrowable from shared pool: 2"},
		{name: "gang that can never fit the team", giveBody: create(at.Pod("nlp-ns", "big-0").GPUs(1).Gang("big", "5").Obj()),
			wantMessage: "gang big needs 5 GPUs in total (5 pods x 1 GPU) but team nlp can never have more than 4 (quota 4 + borrow limit 0, shared pool 4); make the gang smaller or ask for more quota"},
		{name: "gang larger than the cluster", giveBody: create(at.Pod("vision-ns", "huge-0").GPUs(8).Gang("huge", "3").Obj()),
			wantMessage: "gang huge needs 24 GPUs in total (3 pods x 8 GPUs) but the whole cluster has 16; it can never run"},
		{name: "gang member with another size", giveBody: create(at.Pod("nlp-ns", "gm-1").GPUs(1).Gang("gm", "4").Obj()),
			wantMessage: "gang gm: this pod says the gang has 4 pods but its other members say 3; give every member the same gang size"},
		{name: "gang member with another request", giveBody: create(at.Pod("nlp-ns", "gm-1").GPUs(2).Gang("gm", "3").Obj()),
			wantMessage: "gang gm: this pod asks for 2 GPUs but the gang's other members ask for 1 GPU each; every member must ask for the same"},

		// Updates.
		{name: "gang label changed", giveBody: update(at.Pod("nlp-ns", "gm-0").GPUs(1).Gang("other", "3").Obj(), at.Pod("nlp-ns", "gm-0").GPUs(1).Gang("gm", "3").Obj()),
			wantMessage: `label example.com/gang cannot change on an existing GPU pod (was "gm", now "other")`},
		{name: "gang size changed", giveBody: update(at.Pod("nlp-ns", "gm-0").GPUs(1).Gang("gm", "4").Obj(), at.Pod("nlp-ns", "gm-0").GPUs(1).Gang("gm", "3").Obj()),
			wantMessage: `annotation example.com/gang-size cannot change on an existing GPU pod (was "3", now "4")`},
		{name: "team label added", giveBody: update(at.Pod("vision-ns", "run1").GPUs(4).Label(contract.Default.TeamLabel, "nlp").Obj(), at.Pod("vision-ns", "run1").GPUs(4).Obj()),
			wantMessage: `label example.com/team cannot change on an existing GPU pod (was unset, now "nlp"); Rota charges quota and plans gangs by it when the pod is created: delete the pod and create it again`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			app, _ := startApp(t, testConfig(), baseObjects()...)
			got := post(t, app.Routes(), tc.giveBody)
			if got.Allowed != tc.wantAllowed {
				t.Fatalf("allowed = %v, want %v; message %q", got.Allowed, tc.wantAllowed, message(got))
			}
			if !strings.Contains(message(got), tc.wantMessage) || (tc.wantMessage == "") != (message(got) == "") {
				t.Errorf("message = %q\nwant it to contain %q", message(got), tc.wantMessage)
			}
			if !tc.wantAllowed && (got.Result.Code != http.StatusForbidden || got.Result.Reason != metav1.StatusReasonForbidden) {
				t.Errorf("denial status = %d %s, want 403 Forbidden", got.Result.Code, got.Result.Reason)
			}
		})
	}
}
