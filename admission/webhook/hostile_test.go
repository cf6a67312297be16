package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/pkg/quota"
)

// hostileReviews are malformed AdmissionReview bodies (answered 400, 405 or
// 413) and decodable reviews carrying a malformed GPU pod (answered 200,
// denied).
func hostileReviews() (malformed, badPods map[string][]byte) {
	valid := at.Review(admissionv1.Create, at.Pod("ns", "p").GPUs(2).Obj(), nil)
	malformed = map[string][]byte{
		"empty":                      {},
		"whitespace":                 []byte(" \n"),
		"null":                       []byte(`null`),
		"empty object":               []byte(`{}`),
		"array":                      []byte(`[]`),
		"string":                     []byte(`"review"`),
		"open brace":                 []byte(`{`),
		"bare word":                  []byte(`nope`),
		"NUL bytes":                  {0, 0, 0},
		"non-UTF-8 bytes":            {0xff, 0xfe, 0xfd},
		"UTF-8 BOM + valid":          append([]byte{0xef, 0xbb, 0xbf}, valid...),
		"valid + trailing garbage":   append(bytes.Clone(valid), []byte(`}garbage`)...),
		"two reviews":                append(bytes.Clone(valid), valid...),
		"200000 nested arrays":       bytes.Repeat([]byte(`[`), 200000),
		"200000 nested objects":      bytes.Repeat([]byte(`{"a":`), 200000),
		"20000 closed nested arrays": append(bytes.Repeat([]byte(`[`), 20000), bytes.Repeat([]byte(`]`), 20000)...),
		"over the body limit":        append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), MaxReviewBytes+1024)...),
		"wrong apiVersion":           bytes.Replace(valid, []byte(`admission.k8s.io/v1"`), []byte(`admission.k8s.io/v1beta1"`), 1),
		"wrong kind":                 bytes.Replace(valid, []byte(`"kind":"AdmissionReview"`), []byte(`"kind":"Pod"`), 1),
		"no request":                 []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`),
		"request is null":            []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`),
		"request is a string":        []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":"x"}`),
		"request without uid":        []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{}}}`),
		"uid is a number":            []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7,"kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{}}}`),
		"operation is a number":      []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod","version":"v1"},"operation":1,"object":{}}}`),
		"kind is a string":           []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":"Pod","operation":"CREATE","object":{}}}`),
		"dryRun is a string":         []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","dryRun":"yes","object":{}}}`),
		"object truncated":           []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod","version":"v1"},"operation":"CREATE","object":{"spec":`),
	}
	const cuts = 24
	for i := 1; i < cuts; i++ {
		n := len(valid) * i / cuts
		malformed[fmt.Sprintf("truncated at %d/%d bytes", n, len(valid))] = valid[:n]
	}
	review := func(op, object, old string) []byte {
		b := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"req-x","kind":{"kind":"Pod","version":"v1"},` +
			`"resource":{"version":"v1","resource":"pods"},"namespace":"ns","name":"x","operation":"` + op + `","object":` + object
		if old != "" {
			b += `,"oldObject":` + old
		}
		return []byte(b + `}}`)
	}
	gpuPod := func(q string) string {
		return `{"metadata":{"name":"x","namespace":"ns"},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":` + q + `},"requests":{"example.com/gpu":` + q + `}}}]}}`
	}
	badPods = map[string][]byte{
		"object is null":                review("CREATE", `null`, ""),
		"object is a number":            review("CREATE", `5`, ""),
		"object is a string":            review("CREATE", `"pod"`, ""),
		"object is an array":            review("CREATE", `[]`, ""),
		"spec is a string":              review("CREATE", `{"spec":"x"}`, ""),
		"containers is an object":       review("CREATE", `{"spec":{"containers":{"a":1}}}`, ""),
		"quantity is an object":         review("CREATE", gpuPod(`{"x":1}`), ""),
		"quantity is a word":            review("CREATE", gpuPod(`"two"`), ""),
		"quantity 1e99999":              review("CREATE", gpuPod(`"1e99999"`), ""),
		"quantity -1":                   review("CREATE", gpuPod(`"-1"`), ""),
		"quantity 0.5":                  review("CREATE", gpuPod(`"500m"`), ""),
		"quantity 1e18":                 review("CREATE", gpuPod(`"1e18"`), ""),
		"quantity 2^63":                 review("CREATE", gpuPod(`"9223372036854775808"`), ""),
		"gang size is a word":           review("CREATE", `{"metadata":{"name":"x","labels":{"example.com/gang":"g"},"annotations":{"example.com/gang-size":"many"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}`, ""),
		"gang size -1":                  review("CREATE", `{"metadata":{"name":"x","labels":{"example.com/gang":"g"},"annotations":{"example.com/gang-size":"-1"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}`, ""),
		"priority is a string":          review("CREATE", `{"metadata":{"name":"x"},"spec":{"priority":"high","containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}`, ""),
		"deeply nested labels":          review("CREATE", `{"metadata":{"name":"x","labels":`+strings.Repeat(`{"a":`, 5000)+`1`+strings.Repeat(`}`, 5000)+`},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}`, ""),
		"update, old object garbage":    review("UPDATE", gpuPod(`"1"`), `"old"`),
		"update, object garbage":        review("UPDATE", `7`, gpuPod(`"1"`)),
		"update, old object missing":    review("UPDATE", gpuPod(`"1"`), ""),
		"update, gang label added":      review("UPDATE", `{"metadata":{"name":"x","labels":{"example.com/gang":"g"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}`, gpuPod(`"1"`)),
		"more GPUs than any node":       review("CREATE", gpuPod(`"64"`), ""),
		"more than the team's quota":    review("CREATE", gpuPod(`"8"`), ""),
		"memory not in units":           review("CREATE", `{"metadata":{"name":"x"},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu-memory":"1.5"}}}]}}`, ""),
		"both gpu and gpu-memory":       review("CREATE", `{"metadata":{"name":"x"},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1","example.com/gpu-memory":"4"}}}]}}`, ""),
		"1 MiB pod name, too many gpus": review("CREATE", `{"metadata":{"name":"`+strings.Repeat("p", 1<<20)+`"},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"64"}}}]}}`, ""),
	}
	return malformed, badPods
}

type admissionView struct {
	Pods, Gangs int
	Usage       map[string]quota.Usage
}

func viewAdmission(h *Handler) admissionView {
	var v admissionView
	v.Pods, v.Gangs = h.o.View.Reservations()
	v.Usage, _, _ = h.o.View.Usage()
	return v
}

// TestHostileReviews posts malformed, truncated, oversized, deeply nested
// and wrong-typed AdmissionReviews to /validate over HTTP: each is refused
// (400, 405 or 413; or 200 with allowed=false and a message for a
// decodable review of a malformed GPU pod) and no quota is reserved.
func TestHostileReviews(t *testing.T) {
	h := newHandler()
	mux := http.NewServeMux()
	mux.Handle("/validate", h)
	mux.Handle("/mutate", NewMutating(h.o))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Timeout: 20 * time.Second}
	before := viewAdmission(h)
	check := func(name string) {
		t.Helper()
		if after := viewAdmission(h); !reflect.DeepEqual(before, after) {
			t.Fatalf("%s changed the reservations: before %+v, after %+v", name, before, after)
		}
	}
	malformed, badPods := hostileReviews()
	for _, path := range []string{"/validate", "/mutate"} {
		for name, body := range malformed {
			resp, err := client.Post(srv.URL+path, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatalf("%s %s: %v", path, name, err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("%s %s: %d %.200q, want 400 or 413", path, name, resp.StatusCode, raw)
			}
			check(name)
		}
	}
	methods := []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPatch}
	for _, m := range methods {
		req, _ := http.NewRequest(m, srv.URL+"/validate", bytes.NewReader(at.Review(admissionv1.Create, at.Pod("ns", "p").GPUs(1).Obj(), nil)))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s /validate: %d, want 405", m, resp.StatusCode)
		}
		check(m)
	}
	for name, body := range badPods {
		resp, err := client.Post(srv.URL+"/validate", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out admissionv1.AdmissionReview
		switch {
		case resp.StatusCode != http.StatusOK:
			t.Errorf("%s: %d %.200q, want 200", name, resp.StatusCode, raw)
		case json.Unmarshal(raw, &out) != nil || out.Response == nil:
			t.Errorf("%s: reply %.200q is not an AdmissionReview", name, raw)
		case out.Response.Allowed || out.Response.Result == nil || out.Response.Result.Message == "":
			t.Errorf("%s: allowed=%v %.300q, want a denial with a message", name, out.Response.Allowed, raw)
		}
		if len(raw) > 64<<10+len(body) {
			t.Errorf("%s: %d-byte answer", name, len(raw))
		}
		check(name)
	}
	total := 2*len(malformed) + len(methods) + len(badPods)
	t.Logf("hostile inputs: surface=admission-validate+mutate sent=%d crashes=0 reservation-changes=0; malformed reviews %d (400/413), wrong methods %d (405), malformed GPU pods %d (200, denied)",
		total, 2*len(malformed), len(methods), len(badPods))
}
