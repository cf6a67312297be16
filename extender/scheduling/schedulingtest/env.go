// Package schedulingtest runs one extender (extender/scheduling over
// extender/state and extender/binder) against a fake clientset, as
// rota-extender wires it, for the tests of the decision layer and of its
// HTTP face (extender/server). Build its objects with test/fixture.
package schedulingtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/binder"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

var (
	// Names are the extender's names (contract.Default, as test/fixture's).
	Names = contract.Default
	// Tiers are the topology labels; LeafLabel is the lowest tier's.
	Tiers     = topology.DefaultLabels(contract.Default)
	LeafLabel = Tiers.Tiers[0]
	// SchedulerNames are those the extender binds for: fixture pods leave
	// spec.schedulerName empty, which the API server defaults to
	// default-scheduler.
	SchedulerNames = []string{corev1.DefaultSchedulerName}

	podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// Options tune New.
type Options struct {
	Policy         string // placement policy; "" is binpack
	FilterBestOnly bool
	MaxGang        int // MaxPreemptibleGangSize; 0 is 8
}

// Env is one extender over a fake clientset with its informers synced.
type Env struct {
	T        testing.TB
	Ctx      context.Context
	Client   *fake.Clientset
	API      *FakeAPI
	Ledger   *ledger.Ledger
	Cache    *state.Cache
	Ext      *scheduling.Extender
	Metrics  *metrics.Metrics
	Recorder *record.FakeRecorder
	Clock    *Clock
}

// Clock is the extender's settable clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now reads the clock.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// Add moves the clock forward.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// New starts an extender over a fake clientset holding objs; everything
// stops when the test ends.
func New(t testing.TB, o Options, objs ...runtime.Object) *Env {
	t.Helper()
	var ctx context.Context
	if tt, ok := t.(*testing.T); ok {
		_, ctx = ktesting.NewTestContext(tt)
	} else {
		ctx = klog.NewContext(context.Background(), klog.Background())
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := fake.NewSimpleClientset(objs...)
	return start(t, ctx, client, installFakeAPI(client), o)
}

// Restart wires a second extender, as a restarted rota-extender, onto the
// same API objects.
func (e *Env) Restart(o Options) *Env { return start(e.T, e.Ctx, e.Client, e.API, o) }

func start(t testing.TB, ctx context.Context, client *fake.Clientset, api *FakeAPI, o Options) *Env {
	t.Helper()
	e := &Env{T: t, Ctx: ctx, Client: client, API: api, Ledger: ledger.New(),
		Recorder: record.NewFakeRecorder(1000), Clock: &Clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	factory := informers.NewSharedInformerFactory(client, 0)
	rel := &releases{}
	c, err := state.New(ctx, state.Options{Names: Names, Tiers: Tiers, Ledger: e.Ledger,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer(),
		OnRelease: rel.released})
	if err != nil {
		t.Fatal(err)
	}
	e.Cache = c
	e.Metrics = metrics.New(metrics.Source{Snapshot: e.Ledger.Snapshot})
	policyName := o.Policy
	if policyName == "" {
		policyName = placement.Binpack
	}
	policy, err := placement.NewPolicy(policyName, nil)
	if err != nil {
		t.Fatal(err)
	}
	maxGang := o.MaxGang
	if maxGang == 0 {
		maxGang = 8
	}
	x, err := scheduling.New(scheduling.Options{Names: Names, SchedulerNames: SchedulerNames, Tiers: len(Tiers.Tiers), Policy: policy, Cache: c,
		Ledger: e.Ledger, Binder: binder.New(client, Names, 5*time.Second), Recorder: e.Recorder, Metrics: e.Metrics,
		BindTTL: 30 * time.Second, GangTTL: time.Minute, MaxPreemptibleGangSize: maxGang,
		FilterBestOnly: o.FilterBestOnly, DebugPods: 100, DebugTTL: time.Hour, Now: e.Clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	rel.set(x)
	e.Ext = x
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !c.WaitReady(ctx) {
		t.Fatal("cache never became ready")
	}
	t.Cleanup(x.Wait)
	return e
}

// releases hands the cache's releases to the extender, once it exists (the
// cache is built first), as rota-extender's wiring does.
type releases struct {
	mu  sync.Mutex
	ext *scheduling.Extender
}

func (r *releases) set(x *scheduling.Extender) { r.mu.Lock(); defer r.mu.Unlock(); r.ext = x }

func (r *releases) released(as []ledger.Allocation) {
	r.mu.Lock()
	x := r.ext
	r.mu.Unlock()
	if x != nil {
		x.Released(as)
	}
}

// Args is the filter and prioritize request for p over nodes.
func Args(p *corev1.Pod, nodes ...string) *extenderv1.ExtenderArgs {
	return &extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes}
}

// BindArgs is the bind request for p to node.
func BindArgs(p *corev1.Pod, node string) *extenderv1.ExtenderBindingArgs {
	return &extenderv1.ExtenderBindingArgs{PodName: p.Name, PodNamespace: p.Namespace, PodUID: p.UID, Node: node}
}

// Filter asks the extender to filter nodes for p.
func (e *Env) Filter(p *corev1.Pod, nodes ...string) *extenderv1.ExtenderFilterResult {
	return e.Ext.Filter(e.Ctx, Args(p, nodes...))
}

// Passed is the nodes a filter result passes (nil when it names none).
func Passed(r *extenderv1.ExtenderFilterResult) []string {
	if r.NodeNames == nil {
		return nil
	}
	return *r.NodeNames
}

// Bind binds p to node and returns the result's Error.
func (e *Env) Bind(p *corev1.Pod, node string) string {
	return e.Ext.Bind(e.Ctx, BindArgs(p, node)).Error
}

// APIPod reads pod default/name from the API.
func (e *Env) APIPod(name string) *corev1.Pod {
	e.T.Helper()
	p, err := e.Client.CoreV1().Pods("default").Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return p
}

// CreatePod creates p and waits until the extender's informer holds it.
func (e *Env) CreatePod(p *corev1.Pod) {
	e.T.Helper()
	if _, err := e.Client.CoreV1().Pods(p.Namespace).Create(e.Ctx, p.DeepCopy(), metav1.CreateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	e.WaitPod(p.Namespace, p.Name, func(*corev1.Pod) bool { return true })
}

// Eventually polls cond for up to 5 s.
func (e *Env) Eventually(what string, cond func() bool) {
	e.T.Helper()
	err := wait.PollUntilContextTimeout(e.Ctx, 5*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.T.Fatalf("timed out waiting for %s: %v", what, err)
	}
}

// WaitPod waits until the informer holds the pod with cond true.
func (e *Env) WaitPod(ns, name string, cond func(*corev1.Pod) bool) {
	e.T.Helper()
	e.Eventually("pod "+ns+"/"+name, func() bool {
		p, ok := e.Cache.Pod(ns, name)
		return ok && cond(p)
	})
}

// WaitPods waits until the informer holds each of ps.
func (e *Env) WaitPods(ps ...*corev1.Pod) {
	e.T.Helper()
	for _, p := range ps {
		e.WaitPod(p.Namespace, p.Name, func(*corev1.Pod) bool { return true })
	}
}

// WantDecisionReasons checks that p's latest filter decision explains each
// refused node: its reason group names the node with a message that starts
// with the wanted one.
func (e *Env) WantDecisionReasons(p *corev1.Pod, resolvable, unresolvable map[string]string) {
	e.T.Helper()
	ds := e.Ext.Decisions(p.Namespace, p.Name)
	var last *scheduling.Decision
	for i := range ds {
		if ds[i].Verb == "filter" {
			last = &ds[i]
		}
	}
	if last == nil {
		e.T.Fatalf("no filter decision recorded for %s", p.Name)
	}
	for want, isResolvable := range map[*map[string]string]bool{&resolvable: true, &unresolvable: false} {
		for node, msg := range *want {
			found := false
			for _, r := range last.Reasons {
				if r.Resolvable == isResolvable && r.ExampleNode == node && strings.HasPrefix(r.Example, msg) {
					found = true
				}
			}
			if !found {
				e.T.Errorf("decision reasons %+v: none says %q for node %s", last.Reasons, msg, node)
			}
		}
	}
}

// CheckLedger fails the test when the ledger's invariants do not hold.
func (e *Env) CheckLedger() {
	e.T.Helper()
	if errs := e.Ledger.Check(); len(errs) > 0 {
		e.T.Errorf("ledger.Check() = %v", errs)
	}
}

// FakeAPI adds what the fake clientset lacks: resourceVersion bumps and
// preconditions on merge patches, and the pods/binding subresource (which,
// like the API server, copies the Binding's annotations onto the pod).
// Read and set its counters under Set.
type FakeAPI struct {
	mu      sync.Mutex
	rv      int
	tracker k8stesting.ObjectTracker
	// FailBind fails the next n binding creations.
	FailBind int
	// BindConflicts makes the next n binding creations fail with a
	// conflict, as when the pod was replaced under the bind.
	BindConflicts int
	// Binds and Patches count the Bindings created and the pod patches.
	Binds, Patches int
}

func installFakeAPI(client *fake.Clientset) *FakeAPI {
	a := &FakeAPI{rv: 100, tracker: client.Tracker()}
	client.PrependReactor("patch", "pods", a.patch)
	client.PrependReactor("create", "pods", a.bind)
	return a
}

// Set runs f with the API locked.
func (a *FakeAPI) Set(f func(*FakeAPI)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

// Writes returns the Bindings created and the pod patches so far.
func (a *FakeAPI) Writes() (binds, patches int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Binds, a.Patches
}

func (a *FakeAPI) nextRV() string { a.rv++; return fmt.Sprint(a.rv) }

func (a *FakeAPI) patch(action k8stesting.Action) (bool, runtime.Object, error) {
	pa, ok := action.(k8stesting.PatchActionImpl)
	if !ok || pa.GetSubresource() != "" || pa.GetPatchType() != types.MergePatchType {
		return false, nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.Patches++
	obj, err := a.tracker.Get(podsGVR, pa.GetNamespace(), pa.GetName())
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*corev1.Pod)
	var patch struct {
		Metadata struct {
			UID             types.UID          `json:"uid"`
			ResourceVersion string             `json:"resourceVersion"`
			Annotations     map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(pa.GetPatch(), &patch); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if (patch.Metadata.UID != "" && patch.Metadata.UID != pod.UID) ||
		(patch.Metadata.ResourceVersion != "" && patch.Metadata.ResourceVersion != pod.ResourceVersion) {
		return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), pod.Name, fmt.Errorf("precondition failed"))
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range patch.Metadata.Annotations {
		if v == nil {
			delete(pod.Annotations, k)
		} else {
			pod.Annotations[k] = *v
		}
	}
	pod.ResourceVersion = a.nextRV()
	if err := a.tracker.Update(podsGVR, pod, pod.Namespace); err != nil {
		return true, nil, err
	}
	return true, pod, nil
}

func (a *FakeAPI) bind(action k8stesting.Action) (bool, runtime.Object, error) {
	ca, ok := action.(k8stesting.CreateActionImpl)
	if !ok || ca.GetSubresource() != "binding" {
		return false, nil, nil
	}
	b := ca.GetObject().(*corev1.Binding)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.FailBind > 0 {
		a.FailBind--
		return true, nil, apierrors.NewInternalError(fmt.Errorf("injected binding failure"))
	}
	if a.BindConflicts > 0 {
		a.BindConflicts--
		return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), b.Name, fmt.Errorf("injected binding conflict"))
	}
	obj, err := a.tracker.Get(podsGVR, b.Namespace, b.Name)
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*corev1.Pod)
	if b.UID != "" && b.UID != pod.UID {
		return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), pod.Name, fmt.Errorf("UID mismatch"))
	}
	if pod.Spec.NodeName != "" {
		return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), pod.Name,
			fmt.Errorf("pod %s is already assigned to node %q", pod.Name, pod.Spec.NodeName))
	}
	pod.Spec.NodeName = b.Target.Name
	// Like the API server, copy the Binding's annotations onto the pod.
	for k, v := range b.Annotations {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[k] = v
	}
	pod.ResourceVersion = a.nextRV()
	a.Binds++
	return true, b, a.tracker.Update(podsGVR, pod, pod.Namespace)
}
