package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/test/fixture"
)

// Each verb decodes its extender/v1 body, calls the decision layer and
// encodes the answer; the decisions themselves are extender/scheduling's
// tests.
func TestVerbsRoundTrip(t *testing.T) {
	f := newFixture(t, fixtureOpts{}, append(halfUsed(), node("empty", 2, 80, 1, "leaf-a"))...)
	share := fixture.Pod("default", "a").MemoryMiB(40 * gib).Obj()
	var fr extenderv1.ExtenderFilterResult
	if code := f.post("/filter", args(share, "half", "empty"), &fr); code != http.StatusOK {
		t.Fatalf("filter status %d", code)
	}
	if diff := cmp.Diff(f.ext.Filter(f.ctx, args(share, "half", "empty")), &fr); diff != "" {
		t.Errorf("filter over HTTP (-direct +wire):\n%s", diff)
	}
	var pl extenderv1.HostPriorityList
	if code := f.post("/prioritize", args(share, "half", "empty"), &pl); code != http.StatusOK {
		t.Fatalf("prioritize status %d", code)
	}
	want, err := f.ext.Prioritize(f.ctx, args(share, "half", "empty"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, pl); diff != "" {
		t.Errorf("prioritize over HTTP (-direct +wire):\n%s", diff)
	}
	f.env.CreatePod(share)
	if err := f.bind(share, "empty"); err != "" {
		t.Fatalf("bind: %s", err)
	}
	if got := f.apiPod("a"); got.Spec.NodeName != "empty" {
		t.Errorf("bound to %q, want empty", got.Spec.NodeName)
	}
	var pr extenderv1.ExtenderPreemptionResult
	if code := f.post("/preempt", &extenderv1.ExtenderPreemptionArgs{Pod: fixture.Pod("default", "hi").MemoryMiB(40 * gib).Priority(10).Obj(),
		NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"half": {}}}, &pr); code != http.StatusOK {
		t.Fatalf("preempt status %d", code)
	}
}

// /debug/pods serves a pod's decision record as JSON; an unknown pod is 404.
func TestDebugPods(t *testing.T) {
	f := newFixture(t, fixtureOpts{}, halfUsed()...)
	var got extenderv1.ExtenderFilterResult
	f.post("/filter", args(fixture.Pod("default", "big").MemoryMiB(40*gib).Obj(), "half"), &got)
	f.post("/filter", args(fixture.Pod("default", "big").MemoryMiB(40*gib).Obj(), "half"), &got)
	resp, err := http.Get(f.srv.URL + "/debug/pods/default/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var dbg struct {
		Pod       string `json:"pod"`
		Decisions []struct {
			Verb, Outcome string
			Nodes, Fits   int
			Reasons       []struct {
				Code    string
				Nodes   int
				Example string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&dbg); err != nil {
		t.Fatal(err)
	}
	if len(dbg.Decisions) != 2 || dbg.Decisions[0].Outcome != "nofit" || len(dbg.Decisions[0].Reasons) != 1 ||
		dbg.Decisions[0].Reasons[0].Code != "InsufficientMemory" || dbg.Decisions[0].Reasons[0].Nodes != 1 {
		t.Errorf("debug = %+v", dbg)
	}
	if resp, err := http.Get(f.srv.URL + "/debug/pods/default/nobody"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown pod: %v %v", resp.StatusCode, err)
	}
}

// Filter and prioritize answer for the informer's copy of the pod when the
// request's pod is the same version of it (UID and resourceVersion), and
// decode the request's pod otherwise. To tell the two apart, the request
// carries a pod that asks for more than any GPU holds under the cached
// pod's UID and resourceVersion.
func TestVerbsUseTheInformersPod(t *testing.T) {
	f := newFixture(t, fixtureOpts{}, node("empty", 2, 80, 1, "leaf-a"))
	cached := fixture.Pod("default", "a").MemoryMiB(40 * gib).Obj()
	cached.ResourceVersion = "7"
	f.env.CreatePod(cached)
	got, ok := f.cache.Pod("default", "a")
	if !ok || got.ResourceVersion == "" {
		t.Fatalf("informer holds %+v (ok %v), want the pod with a resourceVersion", got, ok)
	}
	tests := []struct {
		name     string
		uid, rv  string
		wantFits bool
	}{
		{"same version: the informer's pod", string(got.UID), got.ResourceVersion, true},
		{"another version: the request's pod", string(got.UID), got.ResourceVersion + "0", false},
		{"another pod of that name: the request's pod", "other-uid", got.ResourceVersion, false},
		{"no resourceVersion: the request's pod", string(got.UID), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := fixture.Pod("default", "a").MemoryMiB(81 * gib).Obj()
			sent.UID, sent.ResourceVersion = types.UID(tc.uid), tc.rv
			var fr extenderv1.ExtenderFilterResult
			if code := f.post("/filter", args(sent, "empty"), &fr); code != http.StatusOK {
				t.Fatalf("filter status %d", code)
			}
			if fits := len(deref(fr.NodeNames)) == 1; fits != tc.wantFits {
				t.Errorf("filter passed %v (error %q), want the node passed: %v", deref(fr.NodeNames), fr.Error, tc.wantFits)
			}
			var pl extenderv1.HostPriorityList
			if code := f.post("/prioritize", args(sent, "empty"), &pl); code != http.StatusOK {
				t.Fatalf("prioritize status %d", code)
			}
			if scored := len(pl) == 1 && pl[0].Score > 0; scored != tc.wantFits {
				t.Errorf("prioritize = %+v, want the node scored above 0: %v", pl, tc.wantFits)
			}
		})
	}
}

func TestFilterBadBodies(t *testing.T) {
	f := newFixture(t, fixtureOpts{})
	tests := []struct {
		name      string
		path      string
		giveBody  []byte
		wantCode  int
		wantError string
	}{
		{"filter malformed", "/filter", []byte(`{"Pod": [`), http.StatusOK, "filter: request body is not valid extender/v1 JSON"},
		{"filter no pod", "/filter", []byte(`{}`), http.StatusOK, "filter: the request names no pod"},
		{"filter null pod", "/filter", []byte(`{"pod": null, "nodenames": ["a"]}`), http.StatusOK, "filter: the request names no pod"},
		{"filter pod not an object", "/filter", []byte(`{"pod": 5}`), http.StatusOK, "filter: request body is not valid extender/v1 JSON"},
		{"filter pod metadata wrong type", "/filter", []byte(`{"pod": {"metadata": {"name": 5}}}`), http.StatusOK, "filter: request body is not valid extender/v1 JSON"},
		{"filter too large", "/filter", append([]byte(`{"NodeNames":["`), bytes.Repeat([]byte("a"), 17<<20)...), http.StatusOK, "larger than 16777216 bytes"},
		{"bind malformed", "/bind", []byte(`nope`), http.StatusOK, "bind: request body is not valid extender/v1 JSON"},
		{"bind empty", "/bind", []byte(`{}`), http.StatusOK, "bind: podName, podNamespace, podUID and node are required"},
		{"prioritize malformed", "/prioritize", []byte(`[`), http.StatusBadRequest, ""},
		{"preempt malformed", "/preempt", []byte(`[`), http.StatusBadRequest, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct{ Error string }
			code := f.post(tc.path, tc.giveBody, &got)
			if code != tc.wantCode {
				t.Fatalf("status %d, want %d", code, tc.wantCode)
			}
			if !strings.Contains(got.Error, tc.wantError) {
				t.Errorf("Error = %q, want it to contain %q", got.Error, tc.wantError)
			}
		})
	}
}

func TestProbes(t *testing.T) {
	f := newFixture(t, fixtureOpts{}, halfUsed()...)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200} {
		resp, err := http.Get(f.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	f.post("/filter", args(fixture.Pod("default", "m").MemoryMiB(10*gib).Obj(), "half"), nil)
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(bytes.Buffer)
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`rota_extender_request_duration_seconds_count{verb="filter"} 1`,
		`rota_extender_decisions_total{outcome="fit",reason="",verb="filter"} 1`,
		`rota_extender_gpu_memory_allocated_bytes 1.52471339008e+11`,
		`rota_extender_gpus_whole_used 1`,
		`rota_extender_gpus_total{health="healthy"} 2`,
		`rota_extender_allocations{state="committed"} 2`,
		`rota_extender_ledger_invariant_violations 0`,
	} {
		if !strings.Contains(body.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
