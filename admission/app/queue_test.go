package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/pkg/contract"
)

// postTo sends a body to one of the app's webhook paths.
func postTo(t *testing.T, h http.Handler, path string, body []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	var review admissionv1.AdmissionReview
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &review) != nil || review.Response == nil {
		t.Fatalf("POST %s = %d %s", path, rec.Code, rec.Body)
	}
	return review.Response
}

// TestQueueRoutes: the app serves both webhooks from one view. A GPU pod
// is gated on /mutate and queued on /validate even though its team is over
// quota; a namespace labelled with queueing off keeps the deny at
// creation; only the default queue controller (the extender's
// ServiceAccount in --namespace) may remove the gate.
func TestQueueRoutes(t *testing.T) {
	app, client := startApp(t, testConfig(), baseObjects()...)
	routes := app.Routes()
	pod := at.Pod("vision-ns", "big").GPUs(6).Obj() // vision: 8 + 2 borrow, 6 in use

	m := postTo(t, routes, "/mutate", at.Review(admissionv1.Create, pod, nil))
	if !m.Allowed || !strings.Contains(string(m.Patch), `"name":"example.com/queue"`) {
		t.Fatalf("/mutate: allowed=%v patch=%s, want the queue gate", m.Allowed, m.Patch)
	}
	gated := at.Pod("vision-ns", "big").GPUs(6).Gated().Obj()
	if got := postTo(t, routes, "/validate", at.Review(admissionv1.Create, gated, nil)); !got.Allowed {
		t.Fatalf("the gated pod over current quota was refused: %q", message(got))
	}
	if got := post(t, routes, at.Review(admissionv1.Create, at.Pod("vision-ns", "big2").GPUs(6).Obj(), nil)); got.Allowed {
		t.Fatal("the same pod without the gate was admitted over quota")
	}

	// Queueing off for the namespace: no gate, today's deny.
	ns, err := client.CoreV1().Namespaces().Get(context.Background(), "vision-ns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels[contract.Default.QueueingLabel] = contract.QueueingOff
	if _, err := client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the label to reach the view", func() bool { off, _ := app.View().QueueingOff("vision-ns"); return off })
	if m := postTo(t, routes, "/mutate", at.Review(admissionv1.Create, pod, nil)); m.Patch != nil {
		t.Fatalf("/mutate gated a pod of a namespace with queueing off: %s", m.Patch)
	}

	// The gate's removal.
	ungated := at.Pod("vision-ns", "big").GPUs(6).Obj()
	for user, want := range map[string]bool{
		"alice": false,
		"system:serviceaccount:rota-system:rota-extender": true,
		"system:serviceaccount:other-ns:rota-extender":    false,
	} {
		got := postTo(t, routes, "/validate", at.ReviewAs(admissionv1.Update, ungated, gated, user))
		if got.Allowed != want {
			t.Errorf("gate removed by %s: allowed=%v %q, want %v", user, got.Allowed, message(got), want)
		}
	}

	_, body := get(t, routes, "/metrics")
	for _, want := range []string{
		`rota_admission_mutations_total{outcome="allowed",reason="gated"} 1`,
		`rota_admission_mutations_total{outcome="allowed",reason="queueing_off"} 1`,
		`rota_admission_requests_total{operation="CREATE",outcome="allowed",reason="queued"} 1`,
		`rota_admission_requests_total{operation="UPDATE",outcome="denied",reason="queue_gate_removed"} 2`,
		`rota_admission_queued_pods{team="vision"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestQueueControllerUsersFlagValue(t *testing.T) {
	cfg := testConfig()
	other := cfg
	other.Namespace = "gpu-system"
	if got := other.QueueControllerUsers(); len(got) != 1 || got[0] != "system:serviceaccount:gpu-system:rota-extender" {
		t.Fatalf("default queue controllers = %q", got)
	}
	cfg.QueueControllers = []string{"system:serviceaccount:q:queue", "bob"}
	app, _ := startApp(t, cfg, at.Namespace("n", "vision"), quotaConfigMap(quotaYAML))
	gated := at.Pod("n", "p").GPUs(1).Gated().Obj()
	for user, want := range map[string]bool{"bob": true, "system:serviceaccount:q:queue": true,
		"system:serviceaccount:rota-system:rota-extender": false} {
		got := postTo(t, app.Routes(), "/validate", at.ReviewAs(admissionv1.Update, at.Pod("n", "p").GPUs(1).Obj(), gated, user))
		if got.Allowed != want {
			t.Errorf("gate removed by %s: allowed=%v, want %v", user, got.Allowed, want)
		}
	}
}
