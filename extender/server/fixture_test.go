package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/test/fixture"
)

const gib = contract.MiB(1024)

var (
	names            = schedulingtest.Names
	tiers            = schedulingtest.Tiers
	leafLabel        = schedulingtest.LeafLabel
	servedSchedulers = schedulingtest.SchedulerNames
)

// served is one extender (schedulingtest.Env) served by httptest: the
// tests here are of the HTTP face; the decisions' own tests are in
// extender/scheduling.
type served struct {
	t        testing.TB
	env      *schedulingtest.Env
	ctx      context.Context
	client   *fake.Clientset
	api      *schedulingtest.FakeAPI
	ledger   *ledger.Ledger
	cache    *state.Cache
	ext      *scheduling.Extender
	recorder *record.FakeRecorder
	clock    *schedulingtest.Clock
	srv      *httptest.Server
	handler  http.Handler // what srv serves
}

type fixtureOpts = schedulingtest.Options

func newFixture(t testing.TB, o fixtureOpts, objs ...runtime.Object) *served {
	t.Helper()
	return serve(schedulingtest.New(t, o, objs...))
}

func serve(e *schedulingtest.Env) *served {
	f := &served{t: e.T, env: e, ctx: e.Ctx, client: e.Client, api: e.API, ledger: e.Ledger, cache: e.Cache,
		ext: e.Ext, recorder: e.Recorder, clock: e.Clock}
	f.handler = New(e.Ext, Options{MaxBodyBytes: 16 << 20, Metrics: e.Metrics, Logger: klog.FromContext(e.Ctx), Pods: e.Cache.Pod}).Handler()
	f.srv = httptest.NewServer(f.handler)
	e.T.Cleanup(f.srv.Close)
	return f
}

// post sends body to path and decodes the answer into out; it returns the status.
func (f *served) post(path string, body any, out any) int {
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

// bind posts a bind of p to node and returns the result's Error.
func (f *served) bind(p *corev1.Pod, node string) string {
	f.t.Helper()
	var res extenderv1.ExtenderBindingResult
	if code := f.post("/bind", bindArgs(p, node), &res); code != http.StatusOK {
		f.t.Fatalf("bind status %d", code)
	}
	return res.Error
}

func (f *served) eventually(what string, cond func() bool) {
	f.t.Helper()
	f.env.Eventually(what, cond)
}
func (f *served) waitPod(ns, name string, cond func(*corev1.Pod) bool) {
	f.t.Helper()
	f.env.WaitPod(ns, name, cond)
}
func (f *served) apiPod(name string) *corev1.Pod { f.t.Helper(); return f.env.APIPod(name) }
func (f *served) wantDecisionReasons(p *corev1.Pod, resolvable, unresolvable map[string]string) {
	f.t.Helper()
	f.env.WantDecisionReasons(p, resolvable, unresolvable)
}

var (
	args     = schedulingtest.Args
	bindArgs = schedulingtest.BindArgs
)

// halfUsed is node "half": 2 GPUs of 80 GiB, GPU 0 with 62 GiB assigned, GPU 1
// owned whole.
func halfUsed() []runtime.Object {
	return []runtime.Object{fixture.GPUNode("half").GPUs(2, 80*gib).Tier(leafLabel, "leaf-a").Obj(),
		fixture.Pod("default", "p1").MemoryMiB(62*gib).Running("half").Share("half", 0, 62*gib).Obj(),
		fixture.Pod("default", "p2").GPUs(1).Running("half").Whole("half", 80*gib, 1).Obj()}
}

func deref(p *[]string) []string {
	if p == nil {
		return nil
	}
	return *p
}

// The spelling gang_test.go uses, over test/fixture: pod(name).gpus(n),
// .mem(GiB), .prio(p), .gang(name, size), .obj(); node(name, count, GiB,
// island, leaf); bound(pod, node, gpu, MiB, whole).
type podBuilder struct{ b *fixture.PodBuilder }

func pod(name string) *podBuilder                            { return &podBuilder{fixture.Pod("default", name)} }
func (p *podBuilder) gpus(n int64) *podBuilder               { p.b.GPUs(int(n)); return p }
func (p *podBuilder) mem(giB int64) *podBuilder              { p.b.MemoryMiB(contract.MiB(giB) * gib); return p }
func (p *podBuilder) prio(v int32) *podBuilder               { p.b.Priority(v); return p }
func (p *podBuilder) gang(name string, size int) *podBuilder { p.b.Gang(name, size); return p }
func (p *podBuilder) obj() *corev1.Pod                       { return p.b.Obj() }

func node(name string, count int, memGiB int64, island int, leaf string) *corev1.Node {
	return fixture.GPUNode(name).GPUs(count, contract.MiB(memGiB)*gib).NVLink(island).Tier(leafLabel, leaf).Obj()
}

func bound(p *corev1.Pod, nodeName string, gpu int, mib contract.MiB, whole bool) *corev1.Pod {
	as := contract.Assignment{Version: contract.Version, Node: nodeName, Whole: whole,
		GPUs: []contract.AssignedGPU{{Index: gpu, UUID: fixture.UUID(nodeName, gpu), MemoryMiB: mib}}}
	data, err := as.Marshal()
	if err != nil {
		panic(err)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[names.AssignmentAnnotation] = string(data)
	p.Spec.NodeName = nodeName
	p.Status.Phase = corev1.PodRunning
	return p
}

func contractMiB(v int64) contract.MiB { return contract.MiB(v) }

func itoa(n int) string { return fmt.Sprint(n) }
