package server

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/ledger"
)

func member(name string, size int) *corev1.Pod {
	return pod(name).gpus(4).gang("train", size).obj()
}

func TestGang(t *testing.T) {
	m0, m1 := member("m0", 2), member("m1", 2)
	f := newFixture(t, fixtureOpts{}, node("n1", 4, 80, 4, "leaf-a"), node("n3", 8, 80, 4, "leaf-b"), m0.DeepCopy())
	f.waitPod("default", "m0", func(*corev1.Pod) bool { return true })
	nodes := []string{"n1", "n3"}

	// 1. One of two members exists: every node refuses, nothing is reserved.
	var res extenderv1.ExtenderFilterResult
	f.post("/filter", args(m0, nodes...), &res)
	want := "gang default/train: 1 of 2 members exist; waiting for 1 more before placing any"
	if len(*res.NodeNames) != 0 || res.FailedAndUnresolvableNodes["n1"] != want || res.FailedAndUnresolvableNodes["n3"] != want {
		t.Fatalf("incomplete gang: %+v", res)
	}
	if n := len(f.ledger.Allocations()); n != 0 {
		t.Fatalf("%d allocations for an incomplete gang", n)
	}
	if f.ext.GangsWaiting() != 1 {
		t.Errorf("GangsWaiting = %d, want 1", f.ext.GangsWaiting())
	}

	// 2. The second member appears: the next filter plans the whole gang on
	// the one node that holds both, and touches the other member.
	if _, err := f.client.CoreV1().Pods("default").Create(f.ctx, m1.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitPod("default", "m1", func(*corev1.Pod) bool { return true })
	f.post("/filter", args(m0, nodes...), &res)
	if !reflect.DeepEqual(*res.NodeNames, []string{"n3"}) {
		t.Fatalf("planned member passes %v, want [n3]; %+v", *res.NodeNames, res)
	}
	for _, uid := range []string{"uid-m0", "uid-m1"} {
		if a, ok := f.ledger.Get(uid); !ok || a.State != ledger.Reserved || a.Node != "n3" || a.Gang != "default/train" {
			t.Errorf("%s holds %+v, want a reserved slot on n3", uid, a)
		}
	}
	f.ext.Wait()
	if v := f.apiPod("m1").Annotations[names.RequeueAnnotation()]; !strings.Contains(v, "gang default/train planned") {
		t.Errorf("m1 was not touched: %q", v)
	}
	f.post("/filter", args(m1, nodes...), &res)
	if !reflect.DeepEqual(*res.NodeNames, []string{"n3"}) {
		t.Errorf("second member: %+v", res)
	}
	f.wantDecisionReasons(m1, nil, map[string]string{"n1": "gang default/train: this member's reserved slot is on node n3"})

	// 3. Bind: the slot's node only; each bind commits and keeps the mates.
	if err := f.bind(m0, "n1"); !strings.Contains(err, "slot on node n3") {
		t.Errorf("bind off the slot: %q", err)
	}
	if err := f.bind(m0, "n3"); err != "" {
		t.Fatal(err)
	}
	if a, _ := f.ledger.Get("uid-m1"); a.State != ledger.Reserved {
		t.Errorf("mate lost its slot: %+v", a)
	}
	if err := f.bind(m1, "n3"); err != "" {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-m0", "uid-m1"} {
		if a, _ := f.ledger.Get(uid); a.State != ledger.Committed {
			t.Errorf("%s: %+v, want committed", uid, a)
		}
	}
	if errs := f.ledger.Check(); len(errs) > 0 {
		t.Errorf("ledger.Check() = %v", errs)
	}
}

func TestGangNoFitAndExpiry(t *testing.T) {
	objs := []runtime.Object{node("n1", 4, 80, 4, "leaf-a"), node("n2", 4, 80, 4, "leaf-a")}
	big := []*corev1.Pod{member("b0", 3), member("b1", 3), member("b2", 3)}
	for _, p := range big {
		objs = append(objs, p.DeepCopy())
	}
	small := []*corev1.Pod{member("s0", 2), member("s1", 2)}
	for _, p := range small {
		p.Labels[names.GangLabel] = "small"
		objs = append(objs, p.DeepCopy())
	}
	f := newFixture(t, fixtureOpts{}, objs...)
	for _, p := range append(big, small...) {
		f.waitPod("default", p.Name, func(*corev1.Pod) bool { return true })
	}
	// Three 4-GPU members on two 4-GPU nodes: every member gets the same refusal.
	var first string
	for _, p := range big {
		var res extenderv1.ExtenderFilterResult
		f.post("/filter", args(p, "n1", "n2"), &res)
		msg := res.FailedAndUnresolvableNodes["n1"]
		if first == "" {
			first = msg
		}
		if len(*res.NodeNames) != 0 || msg != first || res.FailedAndUnresolvableNodes["n2"] != first {
			t.Errorf("%s: %+v", p.Name, res)
		}
	}
	if !strings.HasPrefix(first, "gang default/train: 2 of 3 members fit in the cluster") {
		t.Errorf("reason = %q", first)
	}
	if n := len(f.ledger.Allocations()); n != 0 {
		t.Fatalf("%d allocations after a gang that does not fit", n)
	}
	// A gang that fits is planned; when its TTL passes, every slot goes.
	var res extenderv1.ExtenderFilterResult
	f.post("/filter", args(small[0], "n1", "n2"), &res)
	if len(*res.NodeNames) != 1 || len(f.ledger.Allocations()) != 2 {
		t.Fatalf("small gang not planned: %+v", res)
	}
	f.clock.Add(2 * time.Minute)
	if got := f.ext.Expire(f.ctx); len(got) != 2 {
		t.Errorf("expired %d reservations, want 2", len(got))
	}
	if n := len(f.ledger.Allocations()); n != 0 {
		t.Errorf("%d allocations after expiry", n)
	}
	if errs := f.ledger.Check(); len(errs) > 0 {
		t.Errorf("ledger.Check() = %v", errs)
	}
}

func TestPreempt(t *testing.T) {
	low := func(name string, mib int64) *corev1.Pod {
		return bound(pod(name).mem(mib).prio(1).obj(), "n", 0, contractMiB(mib*1024), false)
	}
	tests := []struct {
		name        string
		giveVictims []*corev1.Pod
		wantVictims []string // nil: node dropped
	}{
		{name: "lowest priority pod makes room", giveVictims: []*corev1.Pod{low("l1", 60)}, wantVictims: []string{"uid-l1"}},
		{name: "preemptible=false is never evicted", giveVictims: []*corev1.Pod{
			withLabel(low("l1", 60), names.PreemptibleLabel, "false")}},
		{name: "higher priority pod is never evicted", giveVictims: []*corev1.Pod{
			withPrio(low("l1", 60), 100)}},
		{name: "a gang member takes its gang", giveVictims: []*corev1.Pod{
			withGang(low("g1", 30), "g", 2), withGang(low("g2", 30), "g", 2), low("l1", 10)},
			wantVictims: []string{"uid-g1", "uid-g2"}},
		{name: "large gangs are never evicted", giveVictims: []*corev1.Pod{
			withGang(low("g1", 35), "g", 9), withGang(low("g2", 35), "g", 9)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{node("n", 1, 80, 1, "leaf-a")}
			for _, p := range tc.giveVictims {
				objs = append(objs, p)
			}
			f := newFixture(t, fixtureOpts{}, objs...)
			preemptor := pod("hi").mem(40).prio(10).obj()
			var got extenderv1.ExtenderPreemptionResult
			f.post("/preempt", &extenderv1.ExtenderPreemptionArgs{Pod: preemptor,
				NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{"n": {}}}, &got)
			mv, ok := got.NodeNameToMetaVictims["n"]
			if ok != (tc.wantVictims != nil) {
				t.Fatalf("node kept = %v, want %v (%+v)", ok, tc.wantVictims != nil, got)
			}
			if !ok {
				return
			}
			var uids []string
			for _, p := range mv.Pods {
				uids = append(uids, p.UID)
			}
			if !sameSet(uids, tc.wantVictims) {
				t.Errorf("victims = %v, want %v", uids, tc.wantVictims)
			}
		})
	}
}

func withLabel(p *corev1.Pod, k, v string) *corev1.Pod {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}
func withPrio(p *corev1.Pod, prio int32) *corev1.Pod { p.Spec.Priority = &prio; return p }
func withGang(p *corev1.Pod, g string, size int) *corev1.Pod {
	withLabel(p, names.GangLabel, g)
	p.Annotations[names.GangSizeAnnotation] = itoa(size)
	return p
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}
