package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

func newHandler() *Handler {
	v := view.New(view.Options{Names: contract.Default})
	v.SetConfig(quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 4, GPUMemoryGiB: 16}}, SharedPool: quota.Limits{GPUs: 2}})
	v.UpsertNamespace(at.Namespace("ns", "a"))
	_ = v.UpsertNode(at.Node("n1", 8, 81920))
	return New(Options{Names: contract.Default, View: v})
}

// FuzzReview feeds arbitrary bodies to the handler: it never panics, and
// every 200 reply is an AdmissionReview answering the request's UID.
func FuzzReview(f *testing.F) {
	pod := at.Pod("ns", "p").GPUs(2).Gang("g", "2").Obj()
	old := at.Pod("ns", "p").GPUs(2).Gang("g", "3").Obj()
	f.Add(at.Review(admissionv1.Create, pod, nil))
	f.Add(at.Review(admissionv1.Update, pod, old))
	f.Add(at.Review(admissionv1.Create, at.Pod("ns", "m").Memory("20Gi").Obj(), nil))
	f.Add(at.Review(admissionv1.Create, at.Pod("other", "m").Memory("2").Priority(5).Obj(), nil))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":null}}`))
	f.Add([]byte(`{}`))
	h := newHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			return
		}
		in, err := DecodeReview(body)
		if err != nil {
			t.Fatalf("200 for a body DecodeReview rejects: %v", err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("reply is not JSON: %v", err)
		}
		if out.Response == nil || out.Response.UID != in.Request.UID {
			t.Fatalf("reply %s does not answer uid %q", rec.Body, in.Request.UID)
		}
		if !out.Response.Allowed && (out.Response.Result == nil || out.Response.Result.Message == "") {
			t.Fatalf("a denial without a message: %s", rec.Body)
		}
	})
}

func TestInactiveReplica(t *testing.T) {
	h := newHandler()
	h.o.Active = func() bool { return false }
	for _, tc := range []struct {
		name        string
		givePod     *corev1.Pod
		wantAllowed bool
	}{
		{name: "GPU pod fails closed", givePod: at.Pod("ns", "p").GPUs(1).Obj()},
		{name: "pod without GPUs", givePod: at.Pod("ns", "w").Obj(), wantAllowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(at.Review(admissionv1.Create, tc.givePod, nil))))
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if out.Response.Allowed != tc.wantAllowed {
				t.Errorf("allowed = %v, want %v (%s)", out.Response.Allowed, tc.wantAllowed, rec.Body)
			}
		})
	}
}
