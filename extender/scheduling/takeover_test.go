package scheduling_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/test/fixture"
)

// A new leader holds none of the old leader's gang plans or reservations
// (Forget): a gang the old leader planned and half bound is planned again
// from the pods' state, next to its bound members rather than on the
// tightest free node, and one unbound member of each gang is requeued.
func TestTakeoverReplansGangNearBoundMembers(t *testing.T) {
	ms := make([]*corev1.Pod, 4)
	objs := []runtime.Object{fixture.GPUNode("n0").GPUs(8, 80*gib).NVLink(4).Tier(leafLabel, "leaf-b").Obj(),
		gpuNode("n1", 8, 4).Obj(), gpuNode("n2", 8, 4).Obj()}
	for i := range ms {
		ms[i] = fixture.Pod(ns, fmt.Sprintf("m%d", i)).GPUs(4).Gang("train", 4).Obj()
		objs = append(objs, ms[i].DeepCopy())
	}
	e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
	e.WaitPods(ms...)
	nodes := []string{"n0", "n1", "n2"}

	// The old leader: the gang fits leaf-a only (n1, n2); m0 and m1 bind
	// on n1, m2 and m3 hold their slots on n2.
	if diff := cmp.Diff([]string{"n1"}, passed(e.Filter(ms[0], nodes...))); diff != "" {
		t.Fatalf("first plan: m0 passes (-want +got):\n%s", diff)
	}
	for _, m := range ms[:2] {
		if err := e.Bind(m, "n1"); err != "" {
			t.Fatal(err)
		}
		e.WaitPod(ns, m.Name, func(p *corev1.Pod) bool { return p.Spec.NodeName == "n1" })
	}
	e.Ext.Wait()

	// The takeover.
	plans, reservations := e.Ext.Forget()
	if plans != 1 || reservations != 2 {
		t.Errorf("Forget dropped %d plans and %d reservations, want the gang's plan and its 2 unbound slots", plans, reservations)
	}
	for _, a := range e.Ledger.Allocations() {
		if a.State != ledger.Committed {
			t.Errorf("after Forget the ledger still holds %+v", a)
		}
	}
	if got := len(e.Ledger.Allocations()); got != 2 {
		t.Errorf("after Forget the ledger holds %d allocations, want the 2 bound members'", got)
	}
	if n := e.Ext.RequeueGangs(t.Context(), "rota-extender leader b_2 took over"); n != 1 {
		t.Errorf("RequeueGangs requeued %d gangs, want 1", n)
	}
	e.Ext.Wait()
	touched := 0
	for _, m := range ms[2:] {
		if strings.Contains(e.APIPod(m.Name).Annotations[names.RequeueAnnotation()], "b_2 took over") {
			touched++
		}
	}
	if touched != 1 {
		t.Errorf("%d of the unbound members were requeued, want 1", touched)
	}

	// Planned again: n0 (leaf-b) is as tight a fit as n2 and first by
	// name, but the bound members are on leaf-a.
	res := e.Filter(ms[2], nodes...)
	if diff := cmp.Diff([]string{"n2"}, passed(res)); diff != "" {
		t.Fatalf("re-planned m2 passes (-want +got), want n2 next to its bound mates:\n%s\n%+v", diff, res)
	}
	for _, m := range ms[2:] {
		if a, ok := e.Ledger.Get(string(m.UID)); !ok || a.State != ledger.Reserved || a.Node != "n2" {
			t.Errorf("%s holds %+v, want a slot on n2", m.Name, a)
		}
	}
}
