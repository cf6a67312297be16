package scheduling_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/test/fixture"
)

// A pod that asks for no GPU but for CPU: with --filter-best-only it passes
// only the nodes where it strands the fewest GPUs (a node without GPUs
// first, then the policy's best GPU node) and is never refused everywhere
// because the ledger thinks CPU is short; prioritize ranks the same way;
// bind records its CPU on a GPU node before writing the Binding, and
// nothing for a node without GPUs.
func TestGPUFreePods(t *testing.T) {
	e := schedulingtest.New(t, schedulingtest.Options{FilterBestOnly: true},
		gpuNode("busy", 2, 1).Allocatable("64", "").Obj(), gpuNode("idle", 2, 1).Allocatable("64", "").Obj(),
		gpuNode("tiny", 2, 1).Allocatable("2", "").Obj(), fixture.Node("plain").Obj(),
		fixture.Pod(ns, "g").MemoryMiB(40*gib).Running("busy").Share("busy", 0, 40*gib).Obj())
	cpuPod := fixture.Pod(ns, "prep").CPU("4").Obj()
	for _, tc := range []struct {
		nodes, want []string
		why         string
	}{
		{[]string{"busy", "idle", "plain"}, []string{"plain"}, "a node without GPUs strands none"},
		{[]string{"busy", "idle"}, []string{"busy"}, "binpack: the fuller GPU node"},
		{[]string{"tiny", "idle"}, []string{"idle"}, "the node the ledger sees short of CPU loses"},
		{[]string{"tiny"}, []string{"tiny"}, "but is not refused: kube-scheduler counted CPU and passed it"},
	} {
		got := e.Filter(cpuPod, tc.nodes...)
		if got.Error != "" {
			t.Fatalf("filter %v: %q", tc.nodes, got.Error)
		}
		if diff := cmp.Diff(tc.want, passed(got)); diff != "" {
			t.Errorf("filter %v (-want +got), %s:\n%s", tc.nodes, tc.why, diff)
		}
	}

	prio, err := e.Ext.Prioritize(e.Ctx, schedulingtest.Args(cpuPod, "busy", "idle", "tiny", "plain"))
	if err != nil {
		t.Fatal(err)
	}
	want := extenderv1.HostPriorityList{{Host: "busy", Score: 9}, {Host: "idle", Score: 8}, {Host: "tiny", Score: 0}, {Host: "plain", Score: 10}}
	if diff := cmp.Diff(want, prio); diff != "" {
		t.Errorf("prioritize (-want +got):\n%s", diff)
	}
	prio, err = e.Ext.Prioritize(e.Ctx, schedulingtest.Args(fixture.Pod(ns, "nocpu").Obj(), "busy", "plain"))
	if err != nil {
		t.Fatal(err)
	}
	if prio[0].Score != 0 || prio[1].Score != 0 {
		t.Errorf("a pod asking for nothing scored %v, want all 0", prio)
	}

	e.CreatePod(cpuPod)
	if err := e.Bind(cpuPod, "idle"); err != "" {
		t.Fatalf("bind: %s", err)
	}
	a, ok := e.Ledger.Get(string(cpuPod.UID))
	if !ok || a.Node != "idle" || a.CPUMilli != 4000 || len(a.GPUs) != 0 {
		t.Errorf("ledger after bind = %+v, %v; want 4000m CPU on idle, no GPU", a, ok)
	}
	if ni := e.Ledger.Snapshot().Node("idle"); ni.CPUMilli != 4000 {
		t.Errorf("idle uses %dm CPU, want 4000m", ni.CPUMilli)
	}
	other := fixture.Pod(ns, "prep2").CPU("4").Obj()
	e.CreatePod(other)
	if err := e.Bind(other, "plain"); err != "" {
		t.Fatalf("bind: %s", err)
	}
	if _, ok := e.Ledger.Get(string(other.UID)); ok {
		t.Error("a pod bound to a node without GPUs is in the ledger")
	}
	e.CheckLedger()
}
