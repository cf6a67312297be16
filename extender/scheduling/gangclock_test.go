package scheduling_test

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/test/fixture"
)

// A gang plan lives on the extender's clock, as its slots do: it is kept
// while that clock stays short of the gang TTL however much wall time
// passes, a member's bind renews it, and it expires (with its slots) when
// that clock passes the TTL.
func TestGangPlanFollowsTheExtendersClock(t *testing.T) {
	ms := make([]*corev1.Pod, 3)
	objs := []runtime.Object{gpuNode("n1", 8, 4).Obj()}
	for i := range ms {
		ms[i] = fixture.Pod(ns, fmt.Sprintf("m%d", i)).GPUs(2).Gang("train", 3).Obj()
		objs = append(objs, ms[i].DeepCopy())
	}
	e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
	e.WaitPods(ms...)
	expired := func() float64 {
		var m dto.Metric
		if err := e.Metrics.GangPlans.WithLabelValues("expired").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	if got := passed(e.Filter(ms[0], "n1")); len(got) != 1 {
		t.Fatalf("the gang was not planned: %v", got)
	}
	e.Clock.Add(50 * time.Second) // the gang TTL is a minute
	e.Ext.Expire(t.Context())
	if n := len(e.Ledger.Allocations()); n != 3 || expired() != 0 {
		t.Fatalf("before the TTL: %d slots, %v plans expired; want 3 and 0", n, expired())
	}
	if err := e.Bind(ms[0], "n1"); err != "" {
		t.Fatal(err)
	}
	e.Clock.Add(50 * time.Second) // 100 s after planning, 50 s after the renewing bind
	e.Ext.Expire(t.Context())
	if n := len(e.Ledger.Allocations()); n != 3 || expired() != 0 {
		t.Fatalf("after a bind renewed it: %d allocations, %v plans expired; want 3 and 0", n, expired())
	}
	// The members left still pass only their slots' node: the plan stands.
	if got := passed(e.Filter(ms[1], "n1")); len(got) != 1 {
		t.Fatalf("a member of the renewed plan is refused: %v", got)
	}
	e.Clock.Add(time.Minute)
	e.Ext.Expire(t.Context())
	if n := len(e.Ledger.Allocations()); n != 1 || expired() != 1 {
		t.Errorf("after the TTL: %d allocations (want the bound member's 1), %v plans expired (want 1)", n, expired())
	}
}
