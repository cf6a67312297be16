package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/test/fixture"
)

// fuzzFixture is one extender with a used node, a free node and a bound
// low-priority pod, shared by a fuzz target's runs.
func fuzzFixture(f *testing.F) *served {
	versioned := pending() // versioned: informerPodSeed's requests name it
	versioned.ResourceVersion = "5"
	objs := append(halfUsed(), node("empty", 8, 80, 4, "leaf-a"), versioned,
		member("g0", 2), member("g1", 2))
	return newFixture(f, fixtureOpts{}, objs...)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// fuzzPost hands body to the server's handler, as its listener would, and
// checks the invariants every answer must keep. In process, not over a
// socket: a loopback round trip per input cost more than the verb, and the
// HTTP server's own goroutines (connection readers, keep-alive timers) ran
// beside the next input, so the engine saw coverage change under the same
// input and kept minimizing instead of fuzzing. The listeners' own
// behaviour (body limits, TLS) is TestHostileBodies' and tls_test.go's.
func fuzzPost(t *testing.T, fx *served, path string, body []byte, hasErrorField bool) {
	rec := httptest.NewRecorder()
	fx.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
	raw := rec.Body.Bytes()
	switch {
	case rec.Code == http.StatusOK:
		if !json.Valid(raw) {
			t.Fatalf("%s answered invalid JSON %q", path, raw)
		}
	case hasErrorField:
		t.Fatalf("%s answered %d; verbs with an Error field always answer 200", path, rec.Code)
	case rec.Code != http.StatusBadRequest:
		t.Fatalf("%s answered %d", path, rec.Code)
	}
	if errs := fx.ledger.Check(); len(errs) > 0 {
		t.Fatalf("ledger.Check() after %s %q: %v", path, body, errs)
	}
}

func seeds(f *testing.F, extra ...[]byte) {
	for _, s := range append(extra, []byte(``), []byte(`{`), []byte(`null`), []byte(`[]`), []byte(`{"Pod":null}`),
		[]byte(`{"Pod":{"spec":{"containers":[{"resources":{"limits":{"example.com/gpu-memory":"1e9"}}}]}},"NodeNames":["half"]}`)) {
		f.Add(s)
	}
}

func FuzzFilter(f *testing.F) {
	seeds(f, mustJSON(args(fixture.Pod("default", "a").MemoryMiB(40*gib).Obj(), "half", "empty", "nowhere")),
		mustJSON(args(member("g0", 2), "half", "empty")),
		mustJSON(&extenderv1.ExtenderArgs{Pod: fixture.Pod("default", "x").GPUs(2).Obj()}))
	fx := fuzzFixture(f)
	informerPodSeed(f, fx)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, fx, "/filter", body, true) })
}

func FuzzPrioritize(f *testing.F) {
	seeds(f, mustJSON(args(fixture.Pod("default", "a").MemoryMiB(4*gib).Obj(), "half", "empty")), mustJSON(args(fixture.Pod("default", "b").GPUs(1).Obj(), "empty")))
	fx := fuzzFixture(f)
	informerPodSeed(f, fx)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, fx, "/prioritize", body, false) })
}

// informerPodSeed adds a request whose pod has the identity (UID and
// resourceVersion) of the informer's copy of the fixture's pending pod, so
// that the engine starts from the path that reads the informer's pod.
func informerPodSeed(f *testing.F, fx *served) {
	p, ok := fx.cache.Pod("default", "pending")
	if !ok || p.ResourceVersion == "" {
		f.Fatalf("the informer holds no versioned default/pending (%v): the seed would not take the informer's path", ok)
	}
	sent := pending()
	sent.UID, sent.ResourceVersion = p.UID, p.ResourceVersion
	f.Add(mustJSON(args(sent, "half", "empty")))
}

func FuzzBind(f *testing.F) {
	seeds(f, mustJSON(bindArgs(pending(), "empty")), mustJSON(bindArgs(pending(), "half")),
		mustJSON(bindArgs(fixture.Pod("default", "ghost").Obj(), "empty")), mustJSON(bindArgs(member("g0", 2), "empty")))
	fx := fuzzFixture(f)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, fx, "/bind", body, true) })
}

func FuzzPreempt(f *testing.F) {
	seeds(f, mustJSON(&extenderv1.ExtenderPreemptionArgs{Pod: fixture.Pod("default", "hi").MemoryMiB(40 * gib).Priority(10).Obj(),
		NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"half": {Pods: []*extenderv1.MetaPod{{UID: "uid-p1"}}}, "x": nil}}))
	fx := fuzzFixture(f)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzPost(t, fx, "/preempt", body, false) })
}
