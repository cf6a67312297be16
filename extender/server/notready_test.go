package server

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/binder"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// Until the ledger is rebuilt from the API server, every verb refuses: the
// scheduler calls the extender whatever /readyz says, and a bind on a
// half-built ledger could hand out GPUs another pod holds (found by the
// repeated kill -9 scenario on the real control plane).
func TestVerbsRefuseUntilLedgerRebuilt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n := node("n0", 8, 80, 4, "")
	p := pod("p").mem(10).obj()
	client := fake.NewSimpleClientset(n, p)
	factory := informers.NewSharedInformerFactory(client, 0) // never started: never ready
	led := ledger.New()
	c, err := state.New(ctx, state.Options{Names: names, Tiers: tiers, Ledger: led,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Source{Snapshot: led.Snapshot})
	policy, _ := placement.NewPolicy(placement.Binpack, nil)
	e, err := scheduling.New(scheduling.Options{Names: names, SchedulerNames: servedSchedulers, Tiers: len(tiers.Tiers), Policy: policy, Cache: c,
		Ledger: led, Binder: binder.New(client, names, time.Second), Recorder: record.NewFakeRecorder(10), Metrics: m,
		ReservationTTL: time.Minute, GangTTL: time.Minute, MaxPreemptibleGangSize: 8, DebugPods: 10, DebugTTL: time.Hour,
		Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(e, Options{MaxBodyBytes: 1 << 20, Metrics: m}).Handler())
	defer srv.Close()
	f := &fixture{t: t, srv: srv}
	names := []string{"n0"}

	var fr extenderv1.ExtenderFilterResult
	f.post("/filter", extenderv1.ExtenderArgs{Pod: p, NodeNames: &names}, &fr)
	if !strings.Contains(fr.Error, "not rebuilt") || fr.NodeNames != nil && len(*fr.NodeNames) > 0 {
		t.Errorf("filter before ready = %+v; want an error and no nodes", fr)
	}
	var br extenderv1.ExtenderBindingResult
	f.post("/bind", extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: p.Namespace, PodUID: p.UID, Node: "n0"}, &br)
	if !strings.Contains(br.Error, "not rebuilt") {
		t.Errorf("bind before ready = %+v; want an error", br)
	}
	if code := f.post("/prioritize", extenderv1.ExtenderArgs{Pod: p, NodeNames: &names}, nil); code == 200 {
		t.Errorf("prioritize before ready answered 200")
	}
	if len(led.Allocations()) != 0 {
		t.Errorf("the ledger changed before it was ready: %+v", led.Allocations())
	}
}
