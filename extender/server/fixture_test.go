package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

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
	names     = contract.Default
	tiers     = topology.DefaultLabels(contract.Default)
	podsGVR   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	leafLabel = tiers.Tiers[0]
	// servedSchedulers are the scheduler names the fixtures' extenders bind
	// for: the test pods leave spec.schedulerName empty, which the API
	// server defaults to default-scheduler.
	servedSchedulers = []string{corev1.DefaultSchedulerName}
)

// fixture is one extender over a fake clientset, served by httptest.
type fixture struct {
	t        testing.TB
	ctx      context.Context
	client   *fake.Clientset
	api      *fakeAPI
	ledger   *ledger.Ledger
	cache    *state.Cache
	ext      *scheduling.Extender
	srv      *httptest.Server
	handler  http.Handler // what srv serves
	recorder *record.FakeRecorder
	clock    *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type fixtureOpts struct {
	policy         string
	filterBestOnly bool
	maxGang        int
}

func newFixture(t testing.TB, o fixtureOpts, objs ...runtime.Object) *fixture {
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
	api := installFakeAPI(client)
	return startExtender(t, ctx, client, api, o)
}

// startExtender wires a fresh extender (as main does) onto client.
func startExtender(t testing.TB, ctx context.Context, client *fake.Clientset, api *fakeAPI, o fixtureOpts) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: ctx, client: client, api: api, ledger: ledger.New(),
		recorder: record.NewFakeRecorder(1000), clock: &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	factory := informers.NewSharedInformerFactory(client, 0)
	var ext *scheduling.Extender
	var mu sync.Mutex
	c, err := state.New(ctx, state.Options{Names: names, Tiers: tiers, Ledger: f.ledger,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer(),
		OnRelease: func(as []ledger.Allocation) {
			mu.Lock()
			e := ext
			mu.Unlock()
			if e != nil {
				e.Released(as)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.cache = c
	m := metrics.New(metrics.Source{Snapshot: f.ledger.Snapshot})
	policyName := o.policy
	if policyName == "" {
		policyName = placement.Binpack
	}
	policy, err := placement.NewPolicy(policyName, nil)
	if err != nil {
		t.Fatal(err)
	}
	maxGang := o.maxGang
	if maxGang == 0 {
		maxGang = 8
	}
	e, err := scheduling.New(scheduling.Options{Names: names, SchedulerNames: servedSchedulers, Tiers: len(tiers.Tiers), Policy: policy, Cache: c,
		Ledger: f.ledger, Binder: binder.New(client, names, 5*time.Second), Recorder: f.recorder, Metrics: m,
		ReservationTTL: 30 * time.Second, GangTTL: time.Minute, MaxPreemptibleGangSize: maxGang,
		FilterBestOnly: o.filterBestOnly, DebugPods: 100, DebugTTL: time.Hour, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ext = e
	mu.Unlock()
	f.ext = e
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !c.WaitReady(ctx) {
		t.Fatal("cache never became ready")
	}
	srv := New(e, Options{MaxBodyBytes: 16 << 20, Metrics: m, Logger: klog.FromContext(ctx)})
	f.handler = srv.Handler()
	f.srv = httptest.NewServer(f.handler)
	t.Cleanup(f.srv.Close)
	t.Cleanup(e.Wait)
	return f
}

// post sends body to path and decodes the answer into out; it returns the status.
func (f *fixture) post(path string, body any, out any) int {
	f.t.Helper()
	var data []byte
	switch b := body.(type) {
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(body); err != nil {
			f.t.Fatal(err)
		}
	}
	resp, err := http.Post(f.srv.URL+path, "application/json", bytes.NewReader(data))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("%s: decoding %q: %v", path, raw, err)
		}
	}
	return resp.StatusCode
}

// eventually polls cond for up to 5 s.
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitPod waits until the informer holds the pod with cond true.
func (f *fixture) waitPod(ns, name string, cond func(*corev1.Pod) bool) {
	f.t.Helper()
	f.eventually("pod "+ns+"/"+name, func() bool {
		p, ok := f.cache.Pod(ns, name)
		return ok && cond(p)
	})
}

// node builds a GPU node: count GPUs of memGiB each in NVLink islands of
// island, on leaf.
func node(name string, count int, memGiB int64, island int, leaf string) *corev1.Node {
	n := topology.FromSpec(topology.Spec{Name: name, Model: "H100", Count: count, MemoryMiB: contract.MiB(memGiB * 1024), IslandSize: island})
	return nodeWith(name, n.Document(), leaf)
}

func nodeWith(name string, doc contract.Topology, leaf string) *corev1.Node {
	data, err := doc.Marshal()
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name), ResourceVersion: "1",
		Labels: map[string]string{leafLabel: leaf}, Annotations: map[string]string{names.TopologyAnnotation: string(data)}}}
}

// podBuilder builds test pods.
type podBuilder struct{ p *corev1.Pod }

func pod(name string) *podBuilder {
	return &podBuilder{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
	}}
}

func (b *podBuilder) res(name string, v int64) *podBuilder {
	q := *resource.NewQuantity(v, resource.DecimalSI)
	c := &b.p.Spec.Containers[0]
	if c.Resources.Limits == nil {
		c.Resources.Limits, c.Resources.Requests = corev1.ResourceList{}, corev1.ResourceList{}
	}
	c.Resources.Limits[corev1.ResourceName(name)] = q
	c.Resources.Requests[corev1.ResourceName(name)] = q
	return b
}

func (b *podBuilder) mem(giB int64) *podBuilder { return b.res(names.GPUMemory, giB) }
func (b *podBuilder) gpus(n int64) *podBuilder  { return b.res(names.GPU, n) }
func (b *podBuilder) prio(p int32) *podBuilder  { b.p.Spec.Priority = &p; return b }
func (b *podBuilder) label(k, v string) *podBuilder {
	if b.p.Labels == nil {
		b.p.Labels = map[string]string{}
	}
	b.p.Labels[k] = v
	return b
}
func (b *podBuilder) annotate(k, v string) *podBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[k] = v
	return b
}
func (b *podBuilder) gang(name string, size int) *podBuilder {
	return b.label(names.GangLabel, name).annotate(names.GangSizeAnnotation, fmt.Sprint(size))
}
func (b *podBuilder) obj() *corev1.Pod { return b.p }

// fakeAPI adds what the fake clientset lacks: resourceVersion bumps and
// preconditions on merge patches, and the pods/binding subresource (which,
// like the API server, copies the Binding's annotations onto the pod).
type fakeAPI struct {
	mu      sync.Mutex
	rv      int
	tracker k8stesting.ObjectTracker
	// failBind, when set, fails the next n binding creations.
	failBind int
	// bindConflicts makes the next n binding creations fail with a
	// conflict, as when the pod was replaced under the bind.
	bindConflicts int
	binds         int
	patches       int
}

func installFakeAPI(client *fake.Clientset) *fakeAPI {
	a := &fakeAPI{rv: 100, tracker: client.Tracker()}
	client.PrependReactor("patch", "pods", a.patch)
	client.PrependReactor("create", "pods", a.bind)
	return a
}

func (a *fakeAPI) nextRV() string { a.rv++; return fmt.Sprint(a.rv) }

func (a *fakeAPI) patch(action k8stesting.Action) (bool, runtime.Object, error) {
	pa, ok := action.(k8stesting.PatchActionImpl)
	if !ok || pa.GetSubresource() != "" || pa.GetPatchType() != types.MergePatchType {
		return false, nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.patches++
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

func (a *fakeAPI) bind(action k8stesting.Action) (bool, runtime.Object, error) {
	ca, ok := action.(k8stesting.CreateActionImpl)
	if !ok || ca.GetSubresource() != "binding" {
		return false, nil, nil
	}
	b := ca.GetObject().(*corev1.Binding)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failBind > 0 {
		a.failBind--
		return true, nil, apierrors.NewInternalError(fmt.Errorf("injected binding failure"))
	}
	if a.bindConflicts > 0 {
		a.bindConflicts--
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
	a.binds++
	return true, b, a.tracker.Update(podsGVR, pod, pod.Namespace)
}

func (a *fakeAPI) set(f func(*fakeAPI)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(a)
}

type runtimeObj = runtime.Object

func metaName(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, UID: types.UID("node-" + name), ResourceVersion: "1"}
}

func contractMiB(v int64) contract.MiB { return contract.MiB(v) }

func itoa(n int) string { return fmt.Sprint(n) }
