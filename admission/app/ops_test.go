package app

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/admission/webhook"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestConfigReload(t *testing.T) {
	app, client := startApp(t, testConfig(), baseObjects()...)
	cms := client.CoreV1().ConfigMaps("rota-system")
	nlpGPUs := func() int64 {
		c, _ := app.View().Config()
		return c.Teams["nlp"].GPUs
	}
	update := func(yaml string) {
		t.Helper()
		if _, err := cms.Update(context.Background(), quotaConfigMap(yaml), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	routes := app.Routes()

	// A bad edit is rejected and counted; the last good configuration stays.
	update("teams:\n  nlp: {gpus: -3}\n")
	waitFor(t, "the rejection to be counted", func() bool {
		_, body := get(t, routes, "/metrics")
		return strings.Contains(body, `rota_admission_config_reloads_total{result="error"} 1`)
	})
	if got := nlpGPUs(); got != 4 {
		t.Fatalf("nlp quota after a bad edit = %d, want the last good 4", got)
	}
	if _, body := get(t, routes, "/metrics"); !strings.Contains(body, "rota_admission_config_error 1") {
		t.Errorf("/metrics does not show the config error:\n%s", body)
	}
	update("teams: {nlp: {gpus: 1}, nlp: {gpus: 2}}\n") // duplicate key
	waitFor(t, "the second rejection", func() bool {
		_, body := get(t, routes, "/metrics")
		return strings.Contains(body, `rota_admission_config_reloads_total{result="error"} 2`)
	})

	// A good edit applies without a restart.
	update(strings.Replace(quotaYAML, "  nlp:\n    gpus: 4", "  nlp:\n    gpus: 10", 1))
	waitFor(t, "the new quota", func() bool { return nlpGPUs() == 10 })
	if got := post(t, routes, at.Review(admissionv1.Create, at.Pod("nlp-ns", "p").GPUs(8).Obj(), nil)); !got.Allowed {
		t.Fatalf("8 GPUs under the new quota of 10: %q", message(got))
	}

	// Deleting the ConfigMap keeps the configuration.
	if err := cms.Delete(context.Background(), "rota-quota", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := nlpGPUs(); got != 10 {
		t.Fatalf("nlp quota after deleting the ConfigMap = %d, want 10", got)
	}

	// Per-team gauges.
	_, body := get(t, routes, "/metrics")
	for _, want := range []string{
		`rota_team_usage{resource="gpus",state="running",team="vision"} 4`,
		`rota_team_usage{resource="gpus",state="pending",team="nlp"} 9`, // gm-0 and the 8 GPUs just admitted
		`rota_team_quota{kind="guarantee",resource="gpus",team="nlp"} 10`,
		`rota_shared_pool{kind="size",resource="gpus"} 4`,
		`rota_admission_requests_total{operation="CREATE",outcome="allowed",reason="within_quota"} 1`,
		`rota_admission_active 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestReadiness(t *testing.T) {
	// No ConfigMap yet: synced but not ready, and GPU pods are refused.
	app, client := startApp2(t, testConfig(), at.Namespace("vision-ns", "vision"))
	routes := app.Routes()
	waitFor(t, "the informers to sync", func() bool { return app.informersSynced() })
	if code, body := get(t, routes, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no valid quota configuration") {
		t.Fatalf("/readyz without config = %d %q", code, body)
	}
	if code, _ := get(t, routes, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	got := post(t, routes, at.Review(admissionv1.Create, at.Pod("vision-ns", "p").GPUs(1).Obj(), nil))
	if got.Allowed || !strings.Contains(message(got), "is not loaded yet") {
		t.Fatalf("GPU pod before the config loaded: allowed=%v %q", got.Allowed, message(got))
	}
	// A bad first ConfigMap leaves it not ready.
	if _, err := client.CoreV1().ConfigMaps("rota-system").Create(context.Background(), quotaConfigMap("teams: ["), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if code, _ := get(t, routes, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with a bad config = %d", code)
	}
	if _, err := client.CoreV1().ConfigMaps("rota-system").Update(context.Background(), quotaConfigMap(quotaYAML), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready", func() bool { code, _ := get(t, routes, "/readyz"); return code == http.StatusOK })
}

// startApp2 starts an App without waiting for it to be ready.
func startApp2(t *testing.T, cfg config.Config, objs ...runtime.Object) (*App, *fake.Clientset) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(objs...)
	app, err := NewForClient(ctx, cfg, client, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	app.start(ctx)
	return app, client
}

func TestQuotaDisabled(t *testing.T) {
	cfg := testConfig()
	cfg.ConfigMap = ""
	app, _ := startApp(t, cfg, at.Namespace("plain", ""), at.Node("n1", 8, 81920))
	routes := app.Routes()
	if got := post(t, routes, at.Review(admissionv1.Create, at.Pod("plain", "p").GPUs(8).Obj(), nil)); !got.Allowed {
		t.Fatalf("with quota disabled: %q", message(got))
	}
	if got := post(t, routes, at.Review(admissionv1.Create, at.Pod("plain", "q").Memory("20Gi").Obj(), nil)); got.Allowed {
		t.Fatalf("requests must still be validated with quota disabled")
	}
}

func TestNamespaceNotYetInInformer(t *testing.T) {
	app, client := startApp(t, testConfig(), baseObjects()...)
	// Create the namespace behind the informer's back: the tracker sends the
	// watch event, but the webhook may see the pod first; either way the
	// pod is charged to the namespace's team.
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), at.Namespace("fresh", "nlp"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := post(t, app.Routes(), at.Review(admissionv1.Create, at.Pod("fresh", "p").GPUs(4).Obj(), nil))
	if got.Allowed || !strings.Contains(message(got), "team nlp: quota 4 GPUs") {
		t.Fatalf("pod in a fresh namespace: allowed=%v %q", got.Allowed, message(got))
	}
}

func TestHTTPErrors(t *testing.T) {
	app, _ := startApp(t, testConfig(), baseObjects()...)
	routes := app.Routes()
	tests := []struct {
		name     string
		giveBody io.Reader
		giveVerb string
		wantCode int
	}{
		{name: "GET", giveVerb: http.MethodGet, giveBody: http.NoBody, wantCode: http.StatusMethodNotAllowed},
		{name: "not JSON", giveVerb: http.MethodPost, giveBody: strings.NewReader("{"), wantCode: http.StatusBadRequest},
		{name: "v1beta1", giveVerb: http.MethodPost, giveBody: strings.NewReader(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"1"}}`), wantCode: http.StatusBadRequest},
		{name: "no request", giveVerb: http.MethodPost, giveBody: strings.NewReader(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), wantCode: http.StatusBadRequest},
		{name: "too large", giveVerb: http.MethodPost, giveBody: bytes.NewReader(make([]byte, webhook.MaxReviewBytes+1)), wantCode: http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			routes.ServeHTTP(rec, httptest.NewRequest(tc.giveVerb, "/validate", tc.giveBody))
			if rec.Code != tc.wantCode {
				t.Errorf("status = %d %q, want %d", rec.Code, rec.Body, tc.wantCode)
			}
		})
	}
	// The object is not a pod: denied with a message, not a 500.
	body := at.Body(&admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create,
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtimeRaw(`{"metadata":{},"spec":7}`)})
	if got := post(t, routes, body); got.Allowed || !strings.Contains(message(got), "decoding the pod") {
		t.Errorf("bad pod object: allowed=%v %q", got.Allowed, message(got))
	}
	// A pod without metadata, which the API server never sends: no patch
	// could write its labels, so it is refused by name.
	body = at.Body(&admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create,
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Object: runtimeRaw(`{"spec":{}}`)})
	if got := post(t, routes, body); got.Allowed || !strings.Contains(message(got), "has no metadata") {
		t.Errorf("pod without metadata: allowed=%v %q", got.Allowed, message(got))
	}
}

// TestLeaderElection runs two replicas against one API server: exactly one
// admits GPU pods and is ready; the standby fails closed for GPU pods but
// answers other pods; when the leader stops, the standby takes over.
func TestLeaderElection(t *testing.T) {
	client := fake.NewClientset(baseObjects()...)
	start := func(id string) (*App, context.CancelFunc) {
		cfg := testConfig()
		cfg.LeaderElect, cfg.Identity = true, id
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 2*time.Second, time.Second, 100*time.Millisecond
		logger, _ := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.LoggerWithName(logger, id)))
		app, err := NewForClient(ctx, cfg, client, prometheus.NewRegistry())
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		app.start(ctx)
		return app, cancel
	}
	a, cancelA := start("a")
	defer cancelA()
	waitFor(t, "a to lead", func() bool { return a.Ready() == nil })
	b, cancelB := start("b")
	defer cancelB()
	waitFor(t, "b to sync", func() bool { return b.informersSynced() })
	time.Sleep(300 * time.Millisecond) // b has tried for the lease a few times
	if err := b.Ready(); err == nil || !strings.Contains(err.Error(), "standby") {
		t.Fatalf("b.Ready() = %v, want standby", err)
	}
	gpuPod := at.Review(admissionv1.Create, at.Pod("vision-ns", "p").GPUs(1).Obj(), nil)
	got := post(t, b.Routes(), gpuPod)
	if got.Allowed || got.Result.Code != http.StatusInternalServerError || !strings.Contains(message(got), "not the active one") {
		t.Fatalf("standby on a GPU pod: allowed=%v %+v", got.Allowed, got.Result)
	}
	if got := post(t, b.Routes(), at.Review(admissionv1.Create, at.Pod("plain", "web").Obj(), nil)); !got.Allowed {
		t.Fatalf("standby refused a pod without GPUs: %q", message(got))
	}
	cancelA() // releases the lease
	waitFor(t, "b to take over", func() bool { return b.Ready() == nil })
	if got := post(t, b.Routes(), gpuPod); !got.Allowed {
		t.Fatalf("new leader refused: %q", message(got))
	}
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
