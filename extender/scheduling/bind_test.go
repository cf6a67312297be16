package scheduling_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/test/fixture"
)

func TestBind(t *testing.T) {
	tests := []struct {
		name      string
		givePod   *corev1.Pod
		giveNode  string
		setup     func(*schedulingtest.FakeAPI)
		wantError string
		// wantGPUs are the assigned GPU indexes (nil: no assignment).
		wantGPUs  []int
		wantBound bool
	}{
		{name: "share on the tightest GPU", givePod: fixture.Pod(ns, "a").MemoryMiB(10 * gib).Obj(), giveNode: "half",
			wantGPUs: []int{0}, wantBound: true},
		{name: "whole GPUs", givePod: fixture.Pod(ns, "b").GPUs(1).Obj(), giveNode: "empty", wantGPUs: []int{0}, wantBound: true},
		{name: "node no longer fits", givePod: fixture.Pod(ns, "d").MemoryMiB(40 * gib).Obj(), giveNode: "half",
			wantError: "bind: node half no longer fits the pod's GPU request: GPU 0 has 18 GiB free, pod needs 40 GiB"},
		{name: "unknown node", givePod: fixture.Pod(ns, "e").MemoryMiB(gib).Obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere is unknown to the extender (no such node, or deleted)"},
		{name: "node without GPU topology", givePod: fixture.Pod(ns, "e").MemoryMiB(gib).Obj(), giveNode: "plain",
			wantError: "bind: node plain no longer fits the pod's GPU request: node has not published its GPU topology yet"},
		{name: "binding fails: released, error returned", givePod: fixture.Pod(ns, "f").MemoryMiB(10 * gib).Obj(), giveNode: "half",
			setup: func(a *schedulingtest.FakeAPI) { a.FailBind = 1 }, wantError: "injected binding failure"},
		{name: "pod replaced under the bind: conflict, released", givePod: fixture.Pod(ns, "g").MemoryMiB(10 * gib).Obj(), giveNode: "half",
			setup: func(a *schedulingtest.FakeAPI) { a.BindConflicts = 1 }, wantError: "injected binding conflict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(halfUsed(), gpuNode("empty", 2, 1).Obj(), tc.givePod.DeepCopy(), fixture.Node("plain").Obj())
			e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
			e.WaitPods(tc.givePod)
			before := e.Ledger.Allocations()
			if tc.setup != nil {
				e.API.Set(tc.setup)
			}
			gotErr := e.Bind(tc.givePod, tc.giveNode)
			if !strings.Contains(gotErr, tc.wantError) || (tc.wantError == "" && gotErr != "") {
				t.Fatalf("Error = %q, want %q", gotErr, tc.wantError)
			}
			got := e.APIPod(tc.givePod.Name)
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
				if diff := cmp.Diff(tc.wantGPUs, idx); diff != "" || as.Node != tc.giveNode {
					t.Errorf("assignment on %s, want %s; GPUs (-want +got):\n%s", as.Node, tc.giveNode, diff)
				}
			}
			a, held := e.Ledger.Get(string(tc.givePod.UID))
			if held != tc.wantBound || (held && a.State != ledger.Committed) {
				t.Errorf("ledger holds %+v (%v), want committed %v", a, held, tc.wantBound)
			}
			if !tc.wantBound {
				if diff := cmp.Diff(before, e.Ledger.Allocations()); diff != "" {
					t.Errorf("a failed bind changed the ledger (-before +after):\n%s", diff)
				}
			}
			e.CheckLedger()
			// One API write per bind: the Binding carries the assignment.
			if _, patches := e.API.Writes(); patches != 0 {
				t.Errorf("bind patched the pod %d times; the assignment belongs on the Binding", patches)
			}
		})
	}
}

func TestBindRetryIsIdempotent(t *testing.T) {
	p := fixture.Pod(ns, "r").MemoryMiB(10 * gib).Obj()
	e := schedulingtest.New(t, schedulingtest.Options{}, gpuNode("n", 1, 1).Obj(), p.DeepCopy())
	e.WaitPods(p)
	e.API.Set(func(a *schedulingtest.FakeAPI) { a.FailBind = 1 })
	if err := e.Bind(p, "n"); err == "" {
		t.Fatal("first bind should fail")
	}
	if got := e.APIPod("r"); got.Annotations[names.AssignmentAnnotation] != "" || got.Spec.NodeName != "" {
		t.Errorf("a failed bind left the pod changed: annotations %v, node %q", got.Annotations, got.Spec.NodeName)
	}
	if err := e.Bind(p, "n"); err != "" {
		t.Fatalf("retry: %s", err)
	}
	if got := e.APIPod("r"); got.Annotations[names.AssignmentAnnotation] == "" || got.Spec.NodeName != "n" {
		t.Errorf("retry did not bind with an assignment: node %q, annotations %v", got.Spec.NodeName, got.Annotations)
	}
	if binds, patches := e.API.Writes(); patches != 0 || binds != 1 {
		t.Errorf("writes: %d patches, %d bindings; want 0 and 1", patches, binds)
	}
	// A bind of a pod already bound there is a no-op success.
	e.WaitPod(ns, "r", func(p *corev1.Pod) bool { return p.Spec.NodeName == "n" })
	if err := e.Bind(p, "n"); err != "" {
		t.Errorf("bind of a bound pod: %s", err)
	}
	if err := e.Bind(p, "other"); !strings.Contains(err, "already bound to n") {
		t.Errorf("bind elsewhere: %q", err)
	}
}

// TestBindConcurrent: 32 binds race for one node's memory; exactly as many
// as fit succeed, and no GPU is ever over capacity.
func TestBindConcurrent(t *testing.T) {
	const pods = 32
	// 4 GPUs x 80 GiB; 30 GiB pods: 2 per GPU, 8 in all.
	objs := []runtime.Object{gpuNode("n", 4, 1).Obj()}
	var ps []*corev1.Pod
	for i := range pods {
		p := fixture.Pod(ns, fmt.Sprintf("p%02d", i)).MemoryMiB(30 * gib).Obj()
		ps = append(ps, p)
		objs = append(objs, p.DeepCopy())
	}
	e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
	e.WaitPods(ps...)
	var wg sync.WaitGroup
	errs := make([]string, pods)
	for i, p := range ps {
		wg.Go(func() { errs[i] = e.Bind(p, "n") })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == "" {
			ok++
		} else if !strings.Contains(err, "no longer fits") {
			t.Errorf("unexpected error %q", err)
		}
	}
	if ok != 8 {
		t.Errorf("%d binds succeeded, want 8", ok)
	}
	e.CheckLedger()
	ni := e.Ledger.Snapshot().Node("n")
	for s, u := range ni.Use {
		if u.UsedMiB > ni.Node.GPUs[s].MemoryMiB {
			t.Errorf("GPU %d: %s used of %s", s, u.UsedMiB, ni.Node.GPUs[s].MemoryMiB)
		}
	}
	if binds, _ := e.API.Writes(); binds != 8 {
		t.Errorf("%d Bindings created, want 8", binds)
	}
}

// TestBindOversizedName: a name no Kubernetes object can have is refused
// without being echoed back.
func TestBindOversizedName(t *testing.T) {
	p := fixture.Pod(ns, "o").MemoryMiB(10 * gib).Obj()
	e := schedulingtest.New(t, schedulingtest.Options{}, gpuNode("n", 1, 1).Obj(), p.DeepCopy())
	e.WaitPods(p)
	got := e.Bind(p, strings.Repeat("n", 1<<16))
	if !strings.Contains(got, "longer than 253 bytes") || len(got) > 200 {
		t.Errorf("Error = %.120q (%d bytes), want a short refusal", got, len(got))
	}
	if _, held := e.Ledger.Get(string(p.UID)); held {
		t.Error("an invalid bind reserved")
	}
	if binds, _ := e.API.Writes(); binds != 0 {
		t.Errorf("an invalid bind wrote %d bindings", binds)
	}
}

// extenderView is what a refused bind must leave alone: the ledger, its
// generation, and the API objects (no writes).
type extenderView struct {
	Generation  uint64
	Allocations []ledger.Allocation
	Writes      []string
}

func viewExtender(e *schedulingtest.Env) extenderView {
	v := extenderView{Generation: e.Ledger.Snapshot().Generation, Allocations: e.Ledger.Allocations()}
	for _, a := range e.Client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			v.Writes = append(v.Writes, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
		}
	}
	return v
}

// bindCheckObjects: node "gpu" (8 GPUs, 16 cores, 64 GiB, zone a), node
// "tainted" (as gpu, with a NoSchedule taint), node "cpu" (no GPUs, 4 cores,
// 8 GiB, with a bound pod taking 3 cores and 6 GiB).
func bindCheckObjects() []runtime.Object {
	return []runtime.Object{
		gpuNode("gpu", 8, 4).Allocatable("16", "64Gi").Label("zone", "a").Obj(),
		gpuNode("tainted", 8, 4).Allocatable("16", "64Gi").Taint("dedicated", corev1.TaintEffectNoSchedule).Obj(),
		fixture.Node("cpu").Label("zone", "b").Allocatable("4", "8Gi").Obj(),
		fixture.Pod(ns, "busy").Requests("3", "6Gi").Running("cpu").Obj(),
	}
}

// TestBindRefuses: bind refuses, with the reason in Error and nothing
// written (no Binding, no patch, the ledger as it was), every pod kube-
// scheduler would not have placed on the node, and the pods it must not
// touch; the same pods bind where they may (so each refusal is the check's,
// not the fixture's).
func TestBindRefuses(t *testing.T) {
	deleting := fixture.Pod(ns, "deleting").MemoryMiB(10 * gib).Obj()
	now := metav1.Now()
	deleting.DeletionTimestamp, deleting.Finalizers = &now, []string{"example.com/hold"}
	share := func(name string) *fixture.PodBuilder { return fixture.Pod(ns, name).MemoryMiB(10 * gib) }
	affine := share("affine").Obj()
	affine.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: leafLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"leaf-a"}}}}}}}}
	tests := []struct {
		name      string
		givePod   *corev1.Pod // created before the bind; nil: none
		giveArgs  func(p *corev1.Pod) *extenderv1.ExtenderBindingArgs
		giveNode  string
		wantError string
		// okNode is a node the same pod binds to once refused ("" none).
		okNode string
	}{
		{name: "pod of another scheduler", givePod: share("foreign").SchedulerName("other-scheduler").Obj(),
			giveNode:  "gpu",
			wantError: `bind: pod default/foreign has schedulerName "other-scheduler"; this extender binds only pods of default-scheduler (--scheduler-names)`},
		{name: "GPU-free pod of another scheduler", givePod: fixture.Pod(ns, "foreign-cpu").SchedulerName("batch").Obj(),
			giveNode: "cpu", wantError: `has schedulerName "batch"`},
		{name: "pod gone", giveArgs: func(*corev1.Pod) *extenderv1.ExtenderBindingArgs {
			return &extenderv1.ExtenderBindingArgs{PodName: "ghost", PodNamespace: ns, PodUID: "uid-ghost", Node: "gpu"}
		}, wantError: "bind: pod default/ghost no longer exists"},
		{name: "other UID than the pod's", givePod: share("replaced").Obj(), giveNode: "gpu",
			giveArgs: func(p *corev1.Pod) *extenderv1.ExtenderBindingArgs {
				a := schedulingtest.BindArgs(p, "gpu")
				a.PodUID = "uid-previous"
				return a
			}, wantError: "bind: pod default/replaced has UID uid-replaced, the request names uid-previous (the pod was replaced)", okNode: "gpu"},
		{name: "no UID", givePod: share("nouid").Obj(), giveNode: "gpu",
			giveArgs: func(p *corev1.Pod) *extenderv1.ExtenderBindingArgs {
				a := schedulingtest.BindArgs(p, "gpu")
				a.PodUID = ""
				return a
			}, wantError: "bind: podName, podNamespace, podUID and node are required", okNode: "gpu"},
		{name: "pod being deleted", givePod: deleting, giveNode: "gpu", wantError: "bind: pod default/deleting is being deleted or has finished"},
		{name: "unknown node", givePod: share("lost").Obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere is unknown to the extender (no such node, or deleted)", okNode: "gpu"},
		{name: "unknown node, GPU-free pod", givePod: fixture.Pod(ns, "lost-cpu").Requests("1", "1Gi").Obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere is unknown to the extender", okNode: "cpu"},
		{name: "GPU pod's nodeSelector excludes the node", givePod: share("picky").NodeSelector("zone", "b").Obj(), giveNode: "gpu",
			wantError: "bind: pod default/picky may not run on node gpu: node gpu does not match the pod's nodeSelector zone=b"},
		{name: "GPU-free pod's nodeSelector excludes the node", givePod: fixture.Pod(ns, "picky-cpu").NodeSelector("zone", "a").Obj(), giveNode: "cpu",
			wantError: "node cpu does not match the pod's nodeSelector zone=a", okNode: "gpu"},
		{name: "required node affinity excludes the node", givePod: affine, giveNode: "gpu",
			wantError: "node gpu does not match the pod's required node affinity"},
		{name: "untolerated NoSchedule taint", givePod: share("intruder").Obj(), giveNode: "tainted",
			wantError: "bind: pod default/intruder may not run on node tainted: node tainted has taint dedicated=x:NoSchedule that the pod does not tolerate",
			okNode:    "gpu"},
		{name: "GPU pod that does not fit", givePod: fixture.Pod(ns, "huge").GPUs(9).Obj(), giveNode: "gpu",
			wantError: "bind: node gpu no longer fits the pod's GPU request: node has 8 healthy GPUs, pod needs 9"},
		{name: "GPU pod short of CPU on its node", givePod: fixture.Pod(ns, "hungry").GPUs(1).Requests("17", "1Gi").Obj(), giveNode: "gpu",
			wantError: "bind: node gpu no longer fits the pod's GPU request: node has 16000m CPU free, pod needs 17000m"},
		{name: "GPU-free pod over a CPU node's free CPU", givePod: fixture.Pod(ns, "cruncher").Requests("2", "1Gi").Obj(), giveNode: "cpu",
			wantError: "bind: pod default/cruncher may not run on node cpu: node cpu has 1000m CPU free (allocatable 4000m, requested 3000m), pod requests 2000m",
			okNode:    "gpu"},
		{name: "GPU-free pod over a CPU node's free memory", givePod: fixture.Pod(ns, "hoarder").Requests("500m", "3Gi").Obj(), giveNode: "cpu",
			wantError: "node cpu has 2 GiB memory free (allocatable 8 GiB, requested 6 GiB), pod requests 3 GiB", okNode: "gpu"},
		{name: "GPU-free pod over a GPU node's allocatable", givePod: fixture.Pod(ns, "giant").Requests("20", "1Gi").Obj(), giveNode: "gpu",
			wantError: "node gpu has 16000m CPU free (allocatable 16000m, requested 0m), pod requests 20000m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := bindCheckObjects()
			if tc.givePod != nil {
				objs = append(objs, tc.givePod.DeepCopy())
			}
			e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
			p := tc.givePod
			if p != nil {
				e.WaitPods(p)
			}
			e.WaitPod(ns, "busy", func(*corev1.Pod) bool { return true })
			args := schedulingtest.BindArgs
			if tc.giveArgs != nil {
				args = func(p *corev1.Pod, _ string) *extenderv1.ExtenderBindingArgs { return tc.giveArgs(p) }
			}
			before := viewExtender(e)
			res := e.Ext.Bind(e.Ctx, args(p, tc.giveNode))
			if !strings.Contains(res.Error, tc.wantError) {
				t.Fatalf("Error = %q, want %q", res.Error, tc.wantError)
			}
			if diff := cmp.Diff(before, viewExtender(e)); diff != "" {
				t.Errorf("a refused bind changed the ledger or the API (-before +after):\n%s", diff)
			}
			if p != nil {
				if got := e.APIPod(p.Name); got.Spec.NodeName != "" || got.Annotations[names.AssignmentAnnotation] != "" {
					t.Errorf("refused pod: node %q, annotations %v", got.Spec.NodeName, got.Annotations)
				}
				if _, held := e.Ledger.Get(string(p.UID)); held {
					t.Error("a refused pod holds an allocation")
				}
			}
			if tc.okNode != "" {
				if err := e.Bind(p, tc.okNode); err != "" {
					t.Fatalf("bind to %s: %s", tc.okNode, err)
				}
				if got := e.APIPod(p.Name); got.Spec.NodeName != tc.okNode {
					t.Errorf("pod bound to %q, want %s", got.Spec.NodeName, tc.okNode)
				}
			}
			e.CheckLedger()
		})
	}
}

// TestBindAdmits: the checks let through what kube-scheduler would: a
// matching selector, a tolerated taint, a GPU-free pod that fits beside
// the node's bound pods.
func TestBindAdmits(t *testing.T) {
	ps := []*corev1.Pod{
		fixture.Pod(ns, "zoned").MemoryMiB(10*gib).NodeSelector("zone", "a").Obj(),
		fixture.Pod(ns, "tolerant").GPUs(1).Tolerate("dedicated").Obj(),
		fixture.Pod(ns, "small").Requests("1", "2Gi").NodeSelector("zone", "b").Obj(),
	}
	nodes := []string{"gpu", "tainted", "cpu"}
	objs := bindCheckObjects()
	for _, p := range ps {
		objs = append(objs, p.DeepCopy())
	}
	e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
	for i, p := range ps {
		e.WaitPods(p)
		if err := e.Bind(p, nodes[i]); err != "" {
			t.Errorf("bind %s to %s: %s", p.Name, nodes[i], err)
		}
	}
	if binds, _ := e.API.Writes(); binds != len(ps) {
		t.Errorf("%d Bindings, want %d", binds, len(ps))
	}
}
