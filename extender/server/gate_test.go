package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/test/fixture"
)

// A standby refuses all four verbs in each verb's error form, closes the
// connection so the scheduler's next one goes to the leader, and changes
// nothing; once it may serve, the same calls are answered.
func TestStandbyRefusesEveryVerb(t *testing.T) {
	p := fixture.Pod("default", "p").MemoryMiB(10 * gib).Obj()
	f := newFixture(t, fixtureOpts{}, node("n0", 8, 80, 4, "leaf-a"), p)
	f.waitPod("default", "p", func(*corev1.Pod) bool { return true })
	standby := errors.New("rota-extender b_2 is standby; leader is a_1; the scheduler will retry")
	serving := standby
	m := metrics.New(metrics.Source{Snapshot: f.ledger.Snapshot})
	srv := httptest.NewServer(New(f.ext, Options{Metrics: m, Logger: klog.FromContext(f.ctx),
		Serving: func() error { return serving }}).Handler())
	defer srv.Close()
	call := func(path string, body any) (*http.Response, []byte) {
		t.Helper()
		data, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp, b.Bytes()
	}
	nodes := []string{"n0"}
	verbs := []struct {
		path       string
		body       any
		wantStatus int
	}{
		{"/filter", args(p, nodes...), http.StatusOK},
		{"/prioritize", args(p, nodes...), http.StatusServiceUnavailable},
		{"/bind", bindArgs(p, "n0"), http.StatusOK},
		{"/preempt", &extenderv1.ExtenderPreemptionArgs{Pod: p}, http.StatusServiceUnavailable},
	}
	for _, v := range verbs {
		resp, body := call(v.path, v.body)
		if resp.StatusCode != v.wantStatus || !strings.Contains(string(body), standby.Error()) {
			t.Errorf("standby %s: %d %s; want %d with %q", v.path, resp.StatusCode, body, v.wantStatus, standby)
		}
		if !resp.Close {
			t.Errorf("standby %s kept the connection open", v.path)
		}
	}
	mr, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var scraped bytes.Buffer
	_, _ = scraped.ReadFrom(mr.Body)
	mr.Body.Close()
	if want := `rota_extender_decisions_total{outcome="error",reason="Standby",verb="bind"} 1`; !strings.Contains(scraped.String(), want) {
		t.Errorf("metrics lack %s", want)
	}
	if n := len(f.ledger.Allocations()); n != 0 || f.api.Binds != 0 {
		t.Errorf("a standby's calls changed things: %d allocations, %d binds", n, f.api.Binds)
	}

	serving = nil
	resp, body := call("/filter", args(p, nodes...))
	var fr extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &fr); err != nil || fr.Error != "" || resp.Close {
		t.Errorf("leader filter: %s (close %v)", body, resp.Close)
	}
	if diff := cmp.Diff(nodes, deref(fr.NodeNames)); diff != "" {
		t.Errorf("leader filter passes (-want +got):\n%s", diff)
	}
	if _, body := call("/bind", bindArgs(p, "n0")); strings.Contains(string(body), "standby") || f.api.Binds != 1 {
		t.Errorf("leader bind: %s, %d binds", body, f.api.Binds)
	}
}
