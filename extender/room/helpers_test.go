package room_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/topology"
)

// world is what a planner runs over in these tests: the extender's state
// cache of nodes on a fake API server, its ledger, and the one parse of a
// pod's request.
type world struct {
	ctx     context.Context
	led     *ledger.Ledger
	cache   *state.Cache
	request func(*corev1.Pod) (placement.Request, error)
	tiers   int
}

// newWorld starts the state cache over nodes and waits until it is ready;
// it stops when the test ends.
func newWorld(t *testing.T, nodes ...runtime.Object) world {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset(nodes...)
	factory := informers.NewSharedInformerFactory(client, 0)
	led := ledger.New()
	names, tiers := contract.Default, topology.DefaultLabels(contract.Default)
	c, err := state.New(ctx, state.Options{Names: names, Tiers: tiers, Ledger: led,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !c.WaitReady(ctx) {
		t.Fatal("cache never became ready")
	}
	request := func(p *corev1.Pod) (placement.Request, error) {
		parsed := podreq.Parse(p, podreq.Options{Names: names}, podreq.Records{})
		return parsed.Request, parsed.Err
	}
	return world{ctx: ctx, led: led, cache: c, request: request, tiers: len(tiers.Tiers)}
}
