package server

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

func bindArgs(p *corev1.Pod, node string) *extenderv1.ExtenderBindingArgs {
	return &extenderv1.ExtenderBindingArgs{PodName: p.Name, PodNamespace: p.Namespace, PodUID: p.UID, Node: node}
}

func (f *fixture) bind(p *corev1.Pod, node string) string {
	f.t.Helper()
	var res extenderv1.ExtenderBindingResult
	if code := f.post("/bind", bindArgs(p, node), &res); code != http.StatusOK {
		f.t.Fatalf("bind status %d", code)
	}
	return res.Error
}

func (f *fixture) apiPod(name string) *corev1.Pod {
	f.t.Helper()
	p, err := f.client.CoreV1().Pods("default").Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func TestBind(t *testing.T) {
	tests := []struct {
		name      string
		givePod   *corev1.Pod
		giveNode  string
		setup     func(*fakeAPI)
		wantError string
		// wantGPUs are the assigned GPU indexes (nil: no assignment).
		wantGPUs  []int
		wantBound bool
	}{
		{name: "share on the tightest GPU", givePod: pod("a").mem(10).obj(), giveNode: "half",
			wantGPUs: []int{0}, wantBound: true},
		{name: "whole GPUs", givePod: pod("b").gpus(1).obj(), giveNode: "empty", wantGPUs: []int{0}, wantBound: true},
		{name: "node no longer fits", givePod: pod("d").mem(40).obj(), giveNode: "half",
			wantError: "bind: node half no longer fits the pod's GPU request: GPU 0 has 18 GiB free, pod needs 40 GiB"},
		{name: "unknown node", givePod: pod("e").mem(1).obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere is unknown to the extender (no such node, or deleted)"},
		{name: "node without GPU topology", givePod: pod("e").mem(1).obj(), giveNode: "plain",
			wantError: "bind: node plain no longer fits the pod's GPU request: node has not published its GPU topology yet"},
		{name: "binding fails: released, error returned", givePod: pod("f").mem(10).obj(), giveNode: "half",
			setup: func(a *fakeAPI) { a.failBind = 1 }, wantError: "injected binding failure"},
		{name: "pod replaced under the bind: conflict, released", givePod: pod("g").mem(10).obj(), giveNode: "half",
			setup: func(a *fakeAPI) { a.bindConflicts = 1 }, wantError: "injected binding conflict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(halfUsed(), node("empty", 2, 80, 1, "leaf-a"), tc.givePod.DeepCopy(),
				&corev1.Node{ObjectMeta: metaName("plain")})
			f := newFixture(t, fixtureOpts{}, objs...)
			f.waitPod("default", tc.givePod.Name, func(*corev1.Pod) bool { return true })
			before := f.ledger.Allocations()
			if tc.setup != nil {
				f.api.set(tc.setup)
			}
			gotErr := f.bind(tc.givePod, tc.giveNode)
			if !strings.Contains(gotErr, tc.wantError) || (tc.wantError == "" && gotErr != "") {
				t.Fatalf("Error = %q, want %q", gotErr, tc.wantError)
			}
			got := f.apiPod(tc.givePod.Name)
			if (got.Spec.NodeName != "") != tc.wantBound {
				t.Errorf("NodeName = %q, want bound %v", got.Spec.NodeName, tc.wantBound)
			}
			raw, has := got.Annotations[names.AssignmentAnnotation]
			if has != (tc.wantGPUs != nil) {
				t.Fatalf("assignment annotation present = %v, want %v", has, tc.wantGPUs != nil)
			}
			if has {
				as, err := contract.ParseAssignment([]byte(raw))
				if err != nil {
					t.Fatal(err)
				}
				var idx []int
				for _, g := range as.GPUs {
					idx = append(idx, g.Index)
				}
				if !reflect.DeepEqual(idx, tc.wantGPUs) || as.Node != tc.giveNode {
					t.Errorf("assignment = %+v, want GPUs %v on %s", as, tc.wantGPUs, tc.giveNode)
				}
			}
			a, held := f.ledger.Get(string(tc.givePod.UID))
			if held != tc.wantBound || (held && a.State != ledger.Committed) {
				t.Errorf("ledger holds %+v (%v), want committed %v", a, held, tc.wantBound)
			}
			if !tc.wantBound && !reflect.DeepEqual(before, f.ledger.Allocations()) {
				t.Errorf("a failed bind changed the ledger:\nbefore %+v\nafter  %+v", before, f.ledger.Allocations())
			}
			if errs := f.ledger.Check(); len(errs) > 0 {
				t.Errorf("ledger.Check() = %v", errs)
			}
			// One API write per bind: the Binding carries the assignment.
			if f.api.patches != 0 {
				t.Errorf("bind patched the pod %d times; the assignment belongs on the Binding", f.api.patches)
			}
		})
	}
}

func TestBindRetryIsIdempotent(t *testing.T) {
	p := pod("r").mem(10).obj()
	f := newFixture(t, fixtureOpts{}, node("n", 1, 80, 1, "leaf-a"), p.DeepCopy())
	f.waitPod("default", "r", func(*corev1.Pod) bool { return true })
	f.api.set(func(a *fakeAPI) { a.failBind = 1 })
	if err := f.bind(p, "n"); err == "" {
		t.Fatal("first bind should fail")
	}
	if got := f.apiPod("r"); got.Annotations[names.AssignmentAnnotation] != "" || got.Spec.NodeName != "" {
		t.Errorf("a failed bind left the pod changed: annotations %v, node %q", got.Annotations, got.Spec.NodeName)
	}
	if err := f.bind(p, "n"); err != "" {
		t.Fatalf("retry: %s", err)
	}
	if got := f.apiPod("r"); got.Annotations[names.AssignmentAnnotation] == "" || got.Spec.NodeName != "n" {
		t.Errorf("retry did not bind with an assignment: node %q, annotations %v", got.Spec.NodeName, got.Annotations)
	}
	if f.api.patches != 0 || f.api.binds != 1 {
		t.Errorf("writes: %d patches, %d bindings; want 0 and 1", f.api.patches, f.api.binds)
	}
	// A bind of a pod already bound there is a no-op success.
	f.waitPod("default", "r", func(p *corev1.Pod) bool { return p.Spec.NodeName == "n" })
	if err := f.bind(p, "n"); err != "" {
		t.Errorf("bind of a bound pod: %s", err)
	}
	if err := f.bind(p, "other"); !strings.Contains(err, "already bound to n") {
		t.Errorf("bind elsewhere: %q", err)
	}
}

// TestBindConcurrent: 32 binds race for one node's memory; exactly as many
// as fit succeed, and no GPU is ever over capacity.
func TestBindConcurrent(t *testing.T) {
	const pods = 32
	// 4 GPUs x 80 GiB; 30 GiB pods: 2 per GPU, 8 in all.
	objs := []runtime.Object{node("n", 4, 80, 1, "leaf-a")}
	var ps []*corev1.Pod
	for i := range pods {
		p := pod(fmt.Sprintf("p%02d", i)).mem(30).obj()
		ps = append(ps, p)
		objs = append(objs, p.DeepCopy())
	}
	f := newFixture(t, fixtureOpts{}, objs...)
	for _, p := range ps {
		f.waitPod("default", p.Name, func(*corev1.Pod) bool { return true })
	}
	var wg sync.WaitGroup
	errs := make([]string, pods)
	for i, p := range ps {
		wg.Go(func() { errs[i] = f.bind(p, "n") })
	}
	wg.Wait()
	ok := 0
	for _, e := range errs {
		if e == "" {
			ok++
		} else if !strings.Contains(e, "no longer fits") {
			t.Errorf("unexpected error %q", e)
		}
	}
	if ok != 8 {
		t.Errorf("%d binds succeeded, want 8", ok)
	}
	if errs := f.ledger.Check(); len(errs) > 0 {
		t.Errorf("ledger.Check() = %v", errs)
	}
	ni := f.ledger.Snapshot().Node("n")
	for s, u := range ni.Use {
		if u.UsedMiB > ni.Node.GPUs[s].MemoryMiB {
			t.Errorf("GPU %d: %s used of %s", s, u.UsedMiB, ni.Node.GPUs[s].MemoryMiB)
		}
	}
	if f.api.binds != 8 {
		t.Errorf("%d Bindings created, want 8", f.api.binds)
	}
}

// TestRestart fills the ledger through binds, starts a second extender
// from the same API objects and compares the ledgers exactly.
func TestRestart(t *testing.T) {
	objs := []runtime.Object{node("a", 8, 80, 4, "leaf-a"), node("b", 8, 80, 4, "leaf-b")}
	var ps []*corev1.Pod
	for i := range 12 {
		b := pod(fmt.Sprintf("p%02d", i)).prio(int32(i))
		if i%3 == 0 {
			b.gpus(int64(1 + i%2))
		} else {
			b.mem(int64(5 + i))
		}
		ps = append(ps, b.obj())
		objs = append(objs, b.obj().DeepCopy())
	}
	f := newFixture(t, fixtureOpts{}, objs...)
	for i, p := range ps {
		f.waitPod("default", p.Name, func(*corev1.Pod) bool { return true })
		if err := f.bind(p, []string{"a", "b"}[i%2]); err != "" {
			t.Fatalf("bind %s: %s", p.Name, err)
		}
	}
	for _, p := range ps {
		f.waitPod("default", p.Name, func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	}
	want := f.ledger.Allocations()
	g := startExtender(t, f.ctx, f.client, f.api, fixtureOpts{})
	got := g.ledger.Allocations()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("restarted ledger differs:\nwant %+v\ngot  %+v", want, got)
	}
	if len(got) != len(ps) {
		t.Errorf("%d allocations, want %d", len(got), len(ps))
	}
	if errs := g.ledger.Check(); len(errs) > 0 {
		t.Errorf("ledger.Check() = %v", errs)
	}
}

// TestReleaseAndTopologyChange: finished and deleted pods release at once;
// a GPU turning unhealthy stops new work at once.
func TestReleaseAndTopologyChange(t *testing.T) {
	p1 := bound(pod("p1").mem(40).obj(), "n", 0, 40*1024, false)
	p2 := bound(pod("p2").mem(40).obj(), "n", 0, 40*1024, false)
	f := newFixture(t, fixtureOpts{}, node("n", 1, 80, 1, "leaf-a"), p1, p2)
	var res extenderv1.ExtenderFilterResult
	f.post("/filter", args(pod("x").mem(30).obj(), "n"), &res)
	if len(*res.NodeNames) != 0 {
		t.Fatalf("full node passed: %v", *res.NodeNames)
	}
	done := f.apiPod("p1")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := f.client.CoreV1().Pods("default").UpdateStatus(f.ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("p1 released", func() bool { _, ok := f.ledger.Get("uid-p1"); return !ok })
	if err := f.client.CoreV1().Pods("default").Delete(f.ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("p2 released", func() bool { _, ok := f.ledger.Get("uid-p2"); return !ok })
	f.post("/filter", args(pod("x").mem(30).obj(), "n"), &res)
	if !reflect.DeepEqual(*res.NodeNames, []string{"n"}) {
		t.Fatalf("emptied node does not pass: %v", res)
	}
	n := f.ledger.Snapshot().Node("n").Node.Document()
	n.GPUs[0].Health, n.GPUs[0].Reason = contract.Unhealthy, "XID 48"
	if _, err := f.client.CoreV1().Nodes().Update(f.ctx, nodeWith("n", n, "leaf-a"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("GPU unhealthy", func() bool { return !f.ledger.Snapshot().Node("n").Node.GPUs[0].Healthy })
	f.post("/filter", args(pod("x").mem(30).obj(), "n"), &res)
	if got := res.FailedAndUnresolvableNodes["n"]; got != "GPU 0 unhealthy: XID 48" {
		t.Errorf("unhealthy node: %+v", res)
	}
	// An invalid annotation is counted, and the node gets no work.
	bad := nodeWith("n", n, "leaf-a")
	bad.Annotations[names.TopologyAnnotation] = `{"version":"v9"}`
	if _, err := f.client.CoreV1().Nodes().Update(f.ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("invalid topology counted", func() bool { return f.cache.Stats().InvalidTopology == 1 })
	if f.ledger.Snapshot().Node("n") != nil {
		t.Error("node with an invalid topology is still in the ledger")
	}
}

// TestBindOversizedName: a name no Kubernetes object can have is refused
// without being echoed back.
func TestBindOversizedName(t *testing.T) {
	p := pod("o").mem(10).obj()
	f := newFixture(t, fixtureOpts{}, node("n", 1, 80, 1, "leaf-a"), p.DeepCopy())
	f.waitPod("default", "o", func(*corev1.Pod) bool { return true })
	long := strings.Repeat("n", 1<<16)
	got := f.bind(p, long)
	if !strings.Contains(got, "longer than 253 bytes") || len(got) > 200 {
		t.Errorf("Error = %.120q (%d bytes), want a short refusal", got, len(got))
	}
	if _, held := f.ledger.Get(string(p.UID)); held || f.api.binds != 0 {
		t.Errorf("an invalid bind reserved (%v) or wrote (%d bindings)", held, f.api.binds)
	}
}

func withTaint(n *corev1.Node, key string, effect corev1.TaintEffect) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "x", Effect: effect})
	return n
}

func withResources(n *corev1.Node, cpu, mem string) *corev1.Node {
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	return n
}

func (b *podBuilder) selector(k, v string) *podBuilder {
	if b.p.Spec.NodeSelector == nil {
		b.p.Spec.NodeSelector = map[string]string{}
	}
	b.p.Spec.NodeSelector[k] = v
	return b
}

func (b *podBuilder) tolerate(key string) *podBuilder {
	b.p.Spec.Tolerations = append(b.p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	return b
}

func (b *podBuilder) requests(cpu, mem string) *podBuilder {
	c := &b.p.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
	return b
}

// bindCheckObjects: node "gpu" (8 GPUs, 16 cores, 64 GiB, zone a), node
// "tainted" (as gpu, with a NoSchedule taint), node "cpu" (no GPUs, 4 cores,
// 8 GiB, with a bound pod taking 3 cores and 6 GiB) and node "gone-soon".
func bindCheckObjects() []runtimeObj {
	gpu := withResources(node("gpu", 8, 80, 4, "leaf-a"), "16", "64Gi")
	gpu.Labels["zone"] = "a"
	tainted := withTaint(withResources(node("tainted", 8, 80, 4, "leaf-a"), "16", "64Gi"), "dedicated", corev1.TaintEffectNoSchedule)
	cpu := withResources(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu", UID: "node-cpu", ResourceVersion: "1",
		Labels: map[string]string{"zone": "b"}}}, "4", "8Gi")
	busy := pod("busy").requests("3", "6Gi").obj()
	busy.Spec.NodeName, busy.Status.Phase = "cpu", corev1.PodRunning
	return []runtimeObj{gpu, tainted, cpu, busy}
}

// TestBindRefuses: bind refuses, with the reason in Error and nothing
// written (no Binding, no patch, the ledger as it was), every pod kube-
// scheduler would not have placed on the node, and the pods it must not
// touch; the same pods bind where they may (so each refusal is the check's,
// not the fixture's).
func TestBindRefuses(t *testing.T) {
	deleting := pod("deleting").mem(10).obj()
	now := metav1.Now()
	deleting.DeletionTimestamp, deleting.Finalizers = &now, []string{"example.com/hold"}
	tests := []struct {
		name      string
		givePod   *corev1.Pod // created before the bind; nil: none
		giveArgs  func(p *corev1.Pod) *extenderv1.ExtenderBindingArgs
		giveNode  string
		wantError string
		// okNode is a node the same pod binds to once refused ("" none).
		okNode string
	}{
		{name: "pod of another scheduler", givePod: func() *corev1.Pod {
			p := pod("foreign").mem(10).obj()
			p.Spec.SchedulerName = "other-scheduler"
			return p
		}(),
			giveNode:  "gpu",
			wantError: `bind: pod default/foreign has schedulerName "other-scheduler"; this extender binds only pods of default-scheduler (--scheduler-names)`},
		{name: "GPU-free pod of another scheduler", givePod: func() *corev1.Pod { p := pod("foreign-cpu").obj(); p.Spec.SchedulerName = "batch"; return p }(),
			giveNode: "cpu", wantError: `has schedulerName "batch"`},
		{name: "pod gone", giveArgs: func(*corev1.Pod) *extenderv1.ExtenderBindingArgs {
			return &extenderv1.ExtenderBindingArgs{PodName: "ghost", PodNamespace: "default", PodUID: "uid-ghost", Node: "gpu"}
		}, wantError: "bind: pod default/ghost no longer exists"},
		{name: "other UID than the pod's", givePod: pod("replaced").mem(10).obj(), giveNode: "gpu",
			giveArgs: func(p *corev1.Pod) *extenderv1.ExtenderBindingArgs {
				a := bindArgs(p, "gpu")
				a.PodUID = "uid-previous"
				return a
			}, wantError: "bind: pod default/replaced has UID uid-replaced, the request names uid-previous (the pod was replaced)", okNode: "gpu"},
		{name: "no UID", givePod: pod("nouid").mem(10).obj(), giveNode: "gpu",
			giveArgs: func(p *corev1.Pod) *extenderv1.ExtenderBindingArgs {
				a := bindArgs(p, "gpu")
				a.PodUID = ""
				return a
			}, wantError: "bind: podName, podNamespace, podUID and node are required", okNode: "gpu"},
		{name: "pod being deleted", givePod: deleting, giveNode: "gpu", wantError: "bind: pod default/deleting is being deleted or has finished"},
		{name: "unknown node", givePod: pod("lost").mem(10).obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere is unknown to the extender (no such node, or deleted)", okNode: "gpu"},
		{name: "unknown node, GPU-free pod", givePod: pod("lost-cpu").requests("1", "1Gi").obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere is unknown to the extender", okNode: "cpu"},
		{name: "GPU pod's nodeSelector excludes the node", givePod: pod("picky").mem(10).selector("zone", "b").obj(), giveNode: "gpu",
			wantError: "bind: pod default/picky may not run on node gpu: node gpu does not match the pod's nodeSelector zone=b"},
		{name: "GPU-free pod's nodeSelector excludes the node", givePod: pod("picky-cpu").selector("zone", "a").obj(), giveNode: "cpu",
			wantError: "node cpu does not match the pod's nodeSelector zone=a", okNode: "gpu"},
		{name: "required node affinity excludes the node", givePod: func() *corev1.Pod {
			p := pod("affine").mem(10).obj()
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: leafLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"leaf-a"}}}}}}}}
			return p
		}(), giveNode: "gpu", wantError: "node gpu does not match the pod's required node affinity"},
		{name: "untolerated NoSchedule taint", givePod: pod("intruder").mem(10).obj(), giveNode: "tainted",
			wantError: "bind: pod default/intruder may not run on node tainted: node tainted has taint dedicated=x:NoSchedule that the pod does not tolerate",
			okNode:    "gpu"},
		{name: "GPU pod that does not fit", givePod: pod("huge").gpus(9).obj(), giveNode: "gpu",
			wantError: "bind: node gpu no longer fits the pod's GPU request: node has 8 healthy GPUs, pod needs 9"},
		{name: "GPU pod short of CPU on its node", givePod: pod("hungry").gpus(1).requests("17", "1Gi").obj(), giveNode: "gpu",
			wantError: "bind: node gpu no longer fits the pod's GPU request: node has 16000m CPU free, pod needs 17000m"},
		{name: "GPU-free pod over a CPU node's free CPU", givePod: pod("cruncher").requests("2", "1Gi").obj(), giveNode: "cpu",
			wantError: "bind: pod default/cruncher may not run on node cpu: node cpu has 1000m CPU free (allocatable 4000m, requested 3000m), pod requests 2000m",
			okNode:    "gpu"},
		{name: "GPU-free pod over a CPU node's free memory", givePod: pod("hoarder").requests("500m", "3Gi").obj(), giveNode: "cpu",
			wantError: "node cpu has 2 GiB memory free (allocatable 8 GiB, requested 6 GiB), pod requests 3 GiB", okNode: "gpu"},
		{name: "GPU-free pod over a GPU node's allocatable", givePod: pod("giant").requests("20", "1Gi").obj(), giveNode: "gpu",
			wantError: "node gpu has 16000m CPU free (allocatable 16000m, requested 0m), pod requests 20000m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := bindCheckObjects()
			if tc.givePod != nil {
				objs = append(objs, tc.givePod.DeepCopy())
			}
			f := newFixture(t, fixtureOpts{}, objs...)
			p := tc.givePod
			if p != nil {
				f.waitPod("default", p.Name, func(*corev1.Pod) bool { return true })
			}
			f.waitPod("default", "busy", func(*corev1.Pod) bool { return true })
			args := func() *extenderv1.ExtenderBindingArgs { return bindArgs(p, tc.giveNode) }
			if tc.giveArgs != nil {
				args = func() *extenderv1.ExtenderBindingArgs { return tc.giveArgs(p) }
			}
			before := viewExtender(f)
			var res extenderv1.ExtenderBindingResult
			if code := f.post("/bind", args(), &res); code != http.StatusOK {
				t.Fatalf("bind status %d", code)
			}
			if !strings.Contains(res.Error, tc.wantError) {
				t.Fatalf("Error = %q, want %q", res.Error, tc.wantError)
			}
			if after := viewExtender(f); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused bind changed the ledger or the API:\nbefore %+v\nafter  %+v", before, after)
			}
			if p != nil {
				if got := f.apiPod(p.Name); got.Spec.NodeName != "" || got.Annotations[names.AssignmentAnnotation] != "" {
					t.Errorf("refused pod: node %q, annotations %v", got.Spec.NodeName, got.Annotations)
				}
				if _, held := f.ledger.Get(string(p.UID)); held {
					t.Error("a refused pod holds an allocation")
				}
			}
			if tc.okNode != "" {
				if err := f.bind(p, tc.okNode); err != "" {
					t.Fatalf("bind to %s: %s", tc.okNode, err)
				}
				if got := f.apiPod(p.Name); got.Spec.NodeName != tc.okNode {
					t.Errorf("pod bound to %q, want %s", got.Spec.NodeName, tc.okNode)
				}
			}
			if errs := f.ledger.Check(); len(errs) > 0 {
				t.Errorf("ledger.Check() = %v", errs)
			}
		})
	}
}

// TestBindAdmits: the checks let through what kube-scheduler would: a
// matching selector, a tolerated taint, a GPU-free pod that fits beside
// the node's bound pods.
func TestBindAdmits(t *testing.T) {
	ps := []*corev1.Pod{
		pod("zoned").mem(10).selector("zone", "a").obj(),
		pod("tolerant").gpus(1).tolerate("dedicated").obj(),
		pod("small").requests("1", "2Gi").selector("zone", "b").obj(),
	}
	nodes := []string{"gpu", "tainted", "cpu"}
	objs := bindCheckObjects()
	for _, p := range ps {
		objs = append(objs, p.DeepCopy())
	}
	f := newFixture(t, fixtureOpts{}, objs...)
	for i, p := range ps {
		f.waitPod("default", p.Name, func(*corev1.Pod) bool { return true })
		if err := f.bind(p, nodes[i]); err != "" {
			t.Errorf("bind %s to %s: %s", p.Name, nodes[i], err)
		}
	}
	if f.api.binds != len(ps) {
		t.Errorf("%d Bindings, want %d", f.api.binds, len(ps))
	}
}
