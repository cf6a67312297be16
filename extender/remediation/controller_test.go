package remediation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/topology"
)

var names = contract.Default

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func topo(node string) *topology.Node {
	return topology.FromSpec(topology.Spec{Name: node, Model: "H100", Count: 4, MemoryMiB: 80 * 1024})
}

// nodeObj is a Ready node publishing its topology with the given GPU
// indexes unhealthy.
func nodeObj(name string, unhealthy ...int) *corev1.Node {
	doc := topo(name).Document()
	for i := range doc.GPUs {
		if slices.Contains(unhealthy, doc.GPUs[i].Index) {
			doc.GPUs[i].Health, doc.GPUs[i].Reason = contract.Unhealthy, "XID 79"
		}
	}
	data, _ := doc.Marshal()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{names.TopologyAnnotation: string(data)}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// podOn is a running pod holding 8 GiB of GPU index gpu on node.
func podOn(name, node string, gpu int, labels map[string]string) *corev1.Pod {
	t := topo(node)
	as := contract.Assignment{Version: contract.Version, Node: node,
		GPUs: []contract.AssignedGPU{{Index: gpu, UUID: t.GPUs[gpu].UUID, MemoryMiB: 8192}}}
	data, _ := as.Marshal()
	q := resource.MustParse("8")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name), Labels: labels,
			Annotations: map[string]string{names.AssignmentAnnotation: string(data)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(names.GPUMemory): q}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

type fixture struct {
	t      testing.TB
	ctx    context.Context
	client *fake.Clientset
	ctl    *Controller
	cache  *state.Cache
	led    *ledger.Ledger
	rec    *record.FakeRecorder
	mu     sync.Mutex
	now    time.Time
	// evicted are the evictions carried out, in order.
	evicted []eviction
}

func (f *fixture) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func newFixture(t testing.TB, cfg Config, objs ...runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := fake.NewClientset(objs...)
	f := &fixture{t: t, ctx: ctx, client: client, led: ledger.New(), rec: record.NewFakeRecorder(1000), now: t0}
	client.PrependReactor("create", "pods", f.evictions)
	return f.start(cfg)
}

// evictions carries out the Eviction API in the fake client as the API
// server does when no budget refuses: it deletes the pod (with the
// eviction's options).
func (f *fixture) evictions(a k8stesting.Action) (bool, runtime.Object, error) {
	c, ok := a.(k8stesting.CreateAction)
	if !ok || a.GetSubresource() != "eviction" {
		return false, nil, nil
	}
	ev, ok := c.GetObject().(*policyv1.Eviction)
	if !ok {
		return true, nil, fmt.Errorf("not an Eviction: %T", c.GetObject())
	}
	var opts metav1.DeleteOptions
	if ev.DeleteOptions != nil {
		opts = *ev.DeleteOptions
	}
	f.mu.Lock()
	f.evicted = append(f.evicted, eviction{pod: ev.Name, options: opts})
	f.mu.Unlock()
	err := f.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	return true, nil, err
}

// eviction is one eviction the fixture carried out.
type eviction struct {
	pod     string
	options metav1.DeleteOptions
}

func (f *fixture) start(cfg Config) *fixture {
	t := f.t
	sf := informers.NewSharedInformerFactory(f.client, 0)
	rf := informers.NewSharedInformerFactory(f.client, 0)
	var ctl *Controller
	c, err := state.New(f.ctx, state.Options{Names: names, Tiers: topology.DefaultLabels(names), Ledger: f.led,
		Nodes: sf.Core().V1().Nodes().Informer(), Pods: sf.Core().V1().Pods().Informer(),
		Adjust: func(n *topology.Node) *topology.Node {
			if ctl != nil {
				return ctl.Adjust(n)
			}
			return n
		},
		OnPodFailed: func(node string) { ctl.PodFailed(f.ctx, node) },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.cache = c
	ctl, err = New(Options{Config: cfg, Names: names, Client: f.client, Recorder: f.rec,
		Nodes: sf.Core().V1().Nodes().Informer(), GPUHealth: c.GPUHealth, Leases: rf.Coordination().V1().Leases().Informer(),
		Pods: sf.Core().V1().Pods().Informer(), Reapply: c.Reapply, Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.ctl = ctl
	sf.Start(f.ctx.Done())
	rf.Start(f.ctx.Done())
	if !cache.WaitForCacheSync(f.ctx.Done(), ctl.HasSynced, c.Ready) {
		t.Fatal("informers did not sync")
	}
	return f
}

// setNode updates the node and waits until the node informer holds it and
// the state cache has parsed its topology.
func (f *fixture) setNode(n *corev1.Node) {
	f.t.Helper()
	cur, err := f.client.CoreV1().Nodes().Get(f.ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cur.Annotations[names.TopologyAnnotation] = n.Annotations[names.TopologyAnnotation]
	for k, v := range n.Annotations {
		cur.Annotations[k] = v
	}
	cur.Status.Conditions = n.Status.Conditions
	if _, err := f.client.CoreV1().Nodes().Update(f.ctx, cur, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.waitFor("node informer update", func() bool {
		obj, ok, _ := f.ctl.nodes.GetStore().GetByKey(n.Name)
		if !ok {
			return false
		}
		got := obj.(*corev1.Node)
		for k, v := range n.Annotations {
			if got.Annotations[k] != v {
				return false
			}
		}
		return len(got.Status.Conditions) == 1 && got.Status.Conditions[0].Status == n.Status.Conditions[0].Status &&
			cmp.Equal(f.parsed(n), f.health(n.Name))
	})
}

// parsed is the GPU health n's topology annotation states.
func (f *fixture) parsed(n *corev1.Node) []state.GPUHealth {
	t, err := contract.ParseTopology([]byte(n.Annotations[names.TopologyAnnotation]))
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]state.GPUHealth, 0, len(t.GPUs))
	for _, g := range t.GPUs {
		out = append(out, state.GPUHealth{UUID: g.UUID, Healthy: g.Health == contract.Healthy, Reason: g.Reason})
	}
	return out
}

// health is what the state cache says of the node's GPUs.
func (f *fixture) health(node string) []state.GPUHealth {
	gs, _ := f.cache.GPUHealth(node)
	return gs
}

func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		f.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (f *fixture) pods() map[string]*corev1.Pod {
	list, err := f.client.CoreV1().Pods("ns").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// writes returns the verbs of the client's mutating calls, e.g. "delete pods".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		s := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		if n, ok := a.(interface{ GetName() string }); ok {
			s += " " + n.GetName()
		}
		out = append(out, s)
	}
	return out
}

func hasCondition(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return string(c.Type) == names.GPUFailureCondition && c.Status == corev1.ConditionTrue
	})
}

func gangLabels() map[string]string { return map[string]string{names.GangLabel: "g"} }

// scenario: n1 GPU 0 holds gang members g-0 and g-1 (shares) and mark-only
// pod keep; g-2, g-3 run on n2; other runs on n1 GPU 2.
func scenarioObjects() []runtime.Object {
	return []runtime.Object{
		nodeObj("n1"), nodeObj("n2"),
		podOn("g-0", "n1", 0, gangLabels()), podOn("g-1", "n1", 1, gangLabels()),
		podOn("g-2", "n2", 0, gangLabels()), podOn("g-3", "n2", 1, gangLabels()),
		podOn("keep", "n1", 0, map[string]string{names.RemediationLabel: contract.RemediationMarkOnly}),
		podOn("other", "n1", 2, nil),
	}
}

func onConfig() Config {
	c := Default()
	c.Mode = remediation.On
	c.RecoveryQuiet = time.Minute
	return c
}

func keys(m map[string]*corev1.Pod) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestNewRequiresItsInputs: the controller reads GPU health from the state
// cache and nothing else, so New refuses to run without it.
func TestNewRequiresItsInputs(t *testing.T) {
	client := fake.NewClientset()
	sf := informers.NewSharedInformerFactory(client, 0)
	o := Options{Config: onConfig(), Names: names, Client: client, Recorder: record.NewFakeRecorder(1),
		Nodes: sf.Core().V1().Nodes().Informer(), Pods: sf.Core().V1().Pods().Informer()}
	if _, err := New(o); err == nil {
		t.Error("New without GPUHealth succeeded")
	}
	o.GPUHealth = func(string) ([]state.GPUHealth, bool) { return nil, false }
	if _, err := New(o); err != nil {
		t.Errorf("New() = %v", err)
	}
}
