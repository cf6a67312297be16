package server

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func withCPU(n *corev1.Node, cores string) *corev1.Node {
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cores)}
	return n
}

// A pod that asks for no GPU but for CPU: with --filter-best-only it passes
// only the nodes where it strands the fewest GPUs (a node without GPUs
// first, then the policy's best GPU node) and is never refused everywhere
// because the ledger thinks CPU is short; prioritize ranks the same way;
// bind records its CPU on a GPU node before writing the Binding, and
// nothing for a node without GPUs.
func TestGPUFreePods(t *testing.T) {
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain", UID: "node-plain", ResourceVersion: "1"}}
	objs := []runtimeObj{withCPU(node("busy", 2, 80, 1, "leaf-a"), "64"), withCPU(node("idle", 2, 80, 1, "leaf-a"), "64"),
		withCPU(node("tiny", 2, 80, 1, "leaf-a"), "2"), plain,
		bound(pod("g").mem(40).obj(), "busy", 0, 40*1024, false)}
	f := newFixture(t, fixtureOpts{filterBestOnly: true}, objs...)
	cpuPod := pod("prep").res("cpu", 4).obj()
	filter := func(nodes ...string) []string {
		t.Helper()
		var got extenderv1.ExtenderFilterResult
		if code := f.post("/filter", args(cpuPod, nodes...), &got); code != 200 || got.Error != "" {
			t.Fatalf("filter: %d %q", code, got.Error)
		}
		return deref(got.NodeNames)
	}
	for _, tc := range []struct {
		nodes, want []string
		why         string
	}{
		{[]string{"busy", "idle", "plain"}, []string{"plain"}, "a node without GPUs strands none"},
		{[]string{"busy", "idle"}, []string{"busy"}, "binpack: the fuller GPU node"},
		{[]string{"tiny", "idle"}, []string{"idle"}, "the node the ledger sees short of CPU loses"},
		{[]string{"tiny"}, []string{"tiny"}, "but is not refused: kube-scheduler counted CPU and passed it"},
	} {
		if got := filter(tc.nodes...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("filter %v = %v, want %v (%s)", tc.nodes, got, tc.want, tc.why)
		}
	}

	var prio extenderv1.HostPriorityList
	f.post("/prioritize", args(cpuPod, "busy", "idle", "tiny", "plain"), &prio)
	want := extenderv1.HostPriorityList{{Host: "busy", Score: 9}, {Host: "idle", Score: 8}, {Host: "tiny", Score: 0}, {Host: "plain", Score: 10}}
	if !reflect.DeepEqual(prio, want) {
		t.Errorf("prioritize = %v, want %v", prio, want)
	}
	noCPU := pod("nocpu").obj()
	f.post("/prioritize", args(noCPU, "busy", "plain"), &prio)
	if prio[0].Score != 0 || prio[1].Score != 0 {
		t.Errorf("a pod asking for nothing scored %v, want all 0", prio)
	}

	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := f.client.CoreV1().Pods("default").Create(f.ctx, p.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.waitPod("default", p.Name, func(*corev1.Pod) bool { return true })
	}
	create(cpuPod)
	var res extenderv1.ExtenderBindingResult
	f.post("/bind", &extenderv1.ExtenderBindingArgs{PodName: "prep", PodNamespace: "default", PodUID: cpuPod.UID, Node: "idle"}, &res)
	if res.Error != "" {
		t.Fatalf("bind: %s", res.Error)
	}
	a, ok := f.ledger.Get(string(cpuPod.UID))
	if !ok || a.Node != "idle" || a.CPUMilli != 4000 || len(a.GPUs) != 0 {
		t.Errorf("ledger after bind = %+v, %v; want 4000m CPU on idle, no GPU", a, ok)
	}
	if ni := f.ledger.Snapshot().Node("idle"); ni.CPUMilli != 4000 {
		t.Errorf("idle uses %dm CPU, want 4000m", ni.CPUMilli)
	}
	other := pod("prep2").res("cpu", 4).obj()
	create(other)
	f.post("/bind", &extenderv1.ExtenderBindingArgs{PodName: "prep2", PodNamespace: "default", PodUID: other.UID, Node: "plain"}, &res)
	if res.Error != "" {
		t.Fatalf("bind: %s", res.Error)
	}
	if _, ok := f.ledger.Get(string(other.UID)); ok {
		t.Error("a pod bound to a node without GPUs is in the ledger")
	}
	if errs := f.ledger.Check(); len(errs) > 0 {
		t.Errorf("ledger check: %v", errs)
	}
}
