package server

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
			wantError: "bind: node half no longer fits: GPU 0 has 18 GiB free, pod needs 40 GiB"},
		{name: "unknown node", givePod: pod("e").mem(1).obj(), giveNode: "nowhere",
			wantError: "bind: node nowhere no longer fits: node has not published its GPU topology yet"},
		{name: "binding fails: released, error returned", givePod: pod("f").mem(10).obj(), giveNode: "half",
			setup: func(a *fakeAPI) { a.failBind = 1 }, wantError: "injected binding failure"},
		{name: "pod replaced under the bind: conflict, released", givePod: pod("g").mem(10).obj(), giveNode: "half",
			setup: func(a *fakeAPI) { a.bindConflicts = 1 }, wantError: "injected binding conflict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := append(halfUsed(), node("empty", 2, 80, 1, "leaf-a"), tc.givePod.DeepCopy())
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
