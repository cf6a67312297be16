package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/pkg/ledger"
)

// A standby refuses all four verbs in each verb's error form, closes the
// connection so the scheduler's next one goes to the leader, and changes
// nothing; once it may serve, the same calls are answered.
func TestStandbyRefusesEveryVerb(t *testing.T) {
	p := pod("p").mem(10).obj()
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
	if n := len(f.ledger.Allocations()); n != 0 || f.api.binds != 0 {
		t.Errorf("a standby's calls changed things: %d allocations, %d binds", n, f.api.binds)
	}

	serving = nil
	resp, body := call("/filter", args(p, nodes...))
	var fr extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &fr); err != nil || fr.Error != "" || !reflect.DeepEqual(*fr.NodeNames, nodes) || resp.Close {
		t.Errorf("leader filter: %s (close %v)", body, resp.Close)
	}
	if _, body := call("/bind", bindArgs(p, "n0")); strings.Contains(string(body), "standby") || f.api.binds != 1 {
		t.Errorf("leader bind: %s, %d binds", body, f.api.binds)
	}
}

// A new leader holds none of the old leader's gang plans or reservations
// (Forget): a gang the old leader planned and half bound is planned again
// from the pods' state, next to its bound members rather than on the
// tightest free node, and one unbound member of each gang is requeued.
func TestTakeoverReplansGangNearBoundMembers(t *testing.T) {
	ms := make([]*corev1.Pod, 4)
	objs := []runtimeObj{node("n0", 8, 80, 4, "leaf-b"), node("n1", 8, 80, 4, "leaf-a"), node("n2", 8, 80, 4, "leaf-a")}
	for i := range ms {
		ms[i] = pod("m"+itoa(i)).gpus(4).gang("train", 4).obj()
		objs = append(objs, ms[i].DeepCopy())
	}
	f := newFixture(t, fixtureOpts{}, objs...)
	for _, m := range ms {
		f.waitPod("default", m.Name, func(*corev1.Pod) bool { return true })
	}
	nodes := []string{"n0", "n1", "n2"}

	// The old leader: the gang fits leaf-a only (n1, n2); m0 and m1 bind
	// on n1, m2 and m3 hold their slots on n2.
	var res extenderv1.ExtenderFilterResult
	f.post("/filter", args(ms[0], nodes...), &res)
	if !reflect.DeepEqual(*res.NodeNames, []string{"n1"}) {
		t.Fatalf("first plan: m0 passes %v, want [n1]", *res.NodeNames)
	}
	for _, m := range ms[:2] {
		if err := f.bind(m, "n1"); err != "" {
			t.Fatal(err)
		}
		f.waitPod("default", m.Name, func(p *corev1.Pod) bool { return p.Spec.NodeName == "n1" })
	}
	f.ext.Wait()

	// The takeover.
	plans, reservations := f.ext.Forget()
	if plans != 1 || reservations != 2 {
		t.Errorf("Forget dropped %d plans and %d reservations, want the gang's plan and its 2 unbound slots", plans, reservations)
	}
	for _, a := range f.ledger.Allocations() {
		if a.State != ledger.Committed {
			t.Errorf("after Forget the ledger still holds %+v", a)
		}
	}
	if got := len(f.ledger.Allocations()); got != 2 {
		t.Errorf("after Forget the ledger holds %d allocations, want the 2 bound members'", got)
	}
	if n := f.ext.RequeueGangs(t.Context(), "rota-extender leader b_2 took over"); n != 1 {
		t.Errorf("RequeueGangs requeued %d gangs, want 1", n)
	}
	f.ext.Wait()
	touched := 0
	for _, m := range ms[2:] {
		if strings.Contains(f.apiPod(m.Name).Annotations[names.RequeueAnnotation()], "b_2 took over") {
			touched++
		}
	}
	if touched != 1 {
		t.Errorf("%d of the unbound members were requeued, want 1", touched)
	}

	// Planned again: n0 (leaf-b) is as tight a fit as n2 and first by
	// name, but the bound members are on leaf-a.
	f.post("/filter", args(ms[2], nodes...), &res)
	if !reflect.DeepEqual(*res.NodeNames, []string{"n2"}) {
		t.Fatalf("re-planned m2 passes %v, want [n2] next to its bound mates; %+v", *res.NodeNames, res)
	}
	for _, m := range ms[2:] {
		if a, ok := f.ledger.Get(string(m.UID)); !ok || a.State != ledger.Reserved || a.Node != "n2" {
			t.Errorf("%s holds %+v, want a slot on n2", m.Name, a)
		}
	}
}
