package scheduling_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/binder"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/test/fixture"
)

// TestRestart fills the ledger through binds, starts a second extender
// from the same API objects and compares the ledgers exactly.
func TestRestart(t *testing.T) {
	objs := []runtime.Object{gpuNode("a", 8, 4).Obj(), fixture.GPUNode("b").GPUs(8, 80*gib).NVLink(4).Tier(leafLabel, "leaf-b").Obj()}
	var ps []*corev1.Pod
	for i := range 12 {
		b := fixture.Pod(ns, fmt.Sprintf("p%02d", i)).Priority(int32(i))
		if i%3 == 0 {
			b.GPUs(1 + i%2)
		} else {
			b.MemoryMiB(contract.MiB(5+i) * gib)
		}
		ps = append(ps, b.Obj())
		objs = append(objs, b.Obj())
	}
	e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
	for i, p := range ps {
		e.WaitPods(p)
		if err := e.Bind(p, []string{"a", "b"}[i%2]); err != "" {
			t.Fatalf("bind %s: %s", p.Name, err)
		}
	}
	for _, p := range ps {
		e.WaitPod(ns, p.Name, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	}
	want := e.Ledger.Allocations()
	g := e.Restart(schedulingtest.Options{})
	got := g.Ledger.Allocations()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("restarted ledger differs (-before +after restart):\n%s", diff)
	}
	if len(got) != len(ps) {
		t.Errorf("%d allocations, want %d", len(got), len(ps))
	}
	g.CheckLedger()
}

// TestReleaseAndTopologyChange: finished and deleted pods release at once;
// a GPU turning unhealthy stops new work at once.
func TestReleaseAndTopologyChange(t *testing.T) {
	share := func(name string) *corev1.Pod {
		return fixture.Pod(ns, name).MemoryMiB(40*gib).Running("n").Share("n", 0, 40*gib).Obj()
	}
	n := gpuNode("n", 1, 1)
	e := schedulingtest.New(t, schedulingtest.Options{}, n.Obj(), share("p1"), share("p2"))
	x := fixture.Pod(ns, "x").MemoryMiB(30 * gib).Obj()
	if res := e.Filter(x, "n"); len(passed(res)) != 0 {
		t.Fatalf("full node passed: %v", passed(res))
	}
	done := e.APIPod("p1")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := e.Client.CoreV1().Pods(ns).UpdateStatus(e.Ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Eventually("p1 released", func() bool { _, ok := e.Ledger.Get("uid-p1"); return !ok })
	if err := e.Client.CoreV1().Pods(ns).Delete(e.Ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Eventually("p2 released", func() bool { _, ok := e.Ledger.Get("uid-p2"); return !ok })
	res := e.Filter(x, "n")
	if diff := cmp.Diff([]string{"n"}, passed(res)); diff != "" {
		t.Fatalf("emptied node does not pass (-want +got):\n%s\n%+v", diff, res)
	}
	sick := n.Unhealthy(0, "XID 48").Obj()
	if _, err := e.Client.CoreV1().Nodes().Update(e.Ctx, sick, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Eventually("GPU unhealthy", func() bool { return !e.Ledger.Snapshot().Node("n").Node.GPUs[0].Healthy })
	res = e.Filter(x, "n")
	if got := res.FailedAndUnresolvableNodes["n"]; got != "GPU 0 unhealthy: XID 48" {
		t.Errorf("unhealthy node: %+v", res)
	}
	// An invalid annotation is counted, and the node gets no work.
	bad := n.Obj()
	bad.Annotations[names.TopologyAnnotation] = `{"version":"v9"}`
	if _, err := e.Client.CoreV1().Nodes().Update(e.Ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Eventually("invalid topology counted", func() bool { return e.Cache.Stats().InvalidTopology == 1 })
	if e.Ledger.Snapshot().Node("n") != nil {
		t.Error("node with an invalid topology is still in the ledger")
	}
}

// Until the ledger is rebuilt from the API server, every verb refuses: the
// scheduler calls the extender whatever /readyz says, and a bind on a
// half-built ledger could hand out GPUs another pod holds (found by the
// repeated kill -9 scenario on the real control plane).
func TestVerbsRefuseUntilLedgerRebuilt(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p := fixture.Pod(ns, "p").MemoryMiB(10 * gib).Obj()
	client := fake.NewSimpleClientset(fixture.GPUNode("n0").GPUs(8, 80*gib).NVLink(4).Obj(), p)
	factory := informers.NewSharedInformerFactory(client, 0) // never started: never ready
	led := ledger.New()
	c, err := state.New(ctx, state.Options{Names: names, Tiers: schedulingtest.Tiers, Ledger: led,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	policy, _ := placement.NewPolicy(placement.Binpack, nil)
	e, err := scheduling.New(scheduling.Options{Names: names, SchedulerNames: schedulingtest.SchedulerNames,
		Tiers: len(schedulingtest.Tiers.Tiers), Policy: policy, Cache: c,
		Ledger: led, Binder: binder.New(client, names, time.Second), Recorder: record.NewFakeRecorder(10),
		Metrics: metrics.New(metrics.Source{Snapshot: led.Snapshot}),
		BindTTL: time.Minute, GangTTL: time.Minute, MaxPreemptibleGangSize: 8, DebugPods: 10, DebugTTL: time.Hour,
		Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []string{"n0"}
	if fr := e.Filter(ctx, schedulingtest.Args(p, nodes...)); !strings.Contains(fr.Error, "not rebuilt") || len(passed(fr)) > 0 {
		t.Errorf("filter before ready = %+v; want an error and no nodes", fr)
	}
	if br := e.Bind(ctx, schedulingtest.BindArgs(p, "n0")); !strings.Contains(br.Error, "not rebuilt") {
		t.Errorf("bind before ready = %+v; want an error", br)
	}
	if _, err := e.Prioritize(ctx, schedulingtest.Args(p, nodes...)); err == nil || !strings.Contains(err.Error(), "not rebuilt") {
		t.Errorf("prioritize before ready: err = %v, want not rebuilt", err)
	}
	if _, err := e.Preempt(ctx, &extenderv1.ExtenderPreemptionArgs{Pod: p}); err == nil || !strings.Contains(err.Error(), "not rebuilt") {
		t.Errorf("preempt before ready: err = %v, want not rebuilt", err)
	}
	if len(led.Allocations()) != 0 {
		t.Errorf("the ledger changed before it was ready: %+v", led.Allocations())
	}
}
