package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

// inflight counts the pod updates (not status) in flight at once. Each
// update waits, up to a bound, for others to join it, as round trips to a
// busy API server overlap.
type inflight struct {
	mu        sync.Mutex
	now, peak int
	join      int
}

func (g *inflight) enter() {
	g.mu.Lock()
	g.now++
	g.peak = max(g.peak, g.now)
	g.mu.Unlock()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		g.mu.Lock()
		n := g.now
		g.mu.Unlock()
		if n >= g.join {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (g *inflight) leave() {
	g.mu.Lock()
	g.now--
	g.mu.Unlock()
}

type countingClient struct {
	kubernetes.Interface
	g *inflight
}

func (c countingClient) CoreV1() corev1client.CoreV1Interface {
	return countingCore{c.Interface.CoreV1(), c.g}
}

type countingCore struct {
	corev1client.CoreV1Interface
	g *inflight
}

func (c countingCore) Pods(ns string) corev1client.PodInterface {
	return countingPods{c.CoreV1Interface.Pods(ns), c.g}
}

type countingPods struct {
	corev1client.PodInterface
	g *inflight
}

func (p countingPods) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions,
	subresources ...string) (*corev1.Pod, error) {
	if len(subresources) == 0 {
		p.g.enter()
		defer p.g.leave()
	}
	return p.PodInterface.Patch(ctx, name, pt, data, opts, subresources...)
}

// lockedRoom is a Holder with room for everything, safe for concurrent use.
type lockedRoom struct {
	mu   sync.Mutex
	held int
}

func (r *lockedRoom) HoldRoom(pods []*corev1.Pod, scope room.Scope, expires time.Time) (room.Hold, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held += len(pods)
	return room.Hold{Level: -1}, ""
}

func (r *lockedRoom) ReleaseHold(room.Hold) {}

// TestPassAdmitsConcurrently: the admitting updates of one pass overlap, at
// most AdmitConcurrency at once, and every admitted pod is ungated.
func TestPassAdmitsConcurrently(t *testing.T) {
	const pods, concurrency = 40, 8
	var objs []runtime.Object
	for i := range pods {
		objs = append(objs, gpuPod(fmt.Sprintf("p%02d", i), 1, time.Duration(pods-i)*time.Minute, true))
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{names.TeamLabel: "vision"}}}
	base := fake.NewClientset(append(objs, ns)...)
	g := &inflight{join: 4}
	f := informers.NewSharedInformerFactory(base, 0)
	podInf, nss := f.Core().V1().Pods().Informer(), f.Core().V1().Namespaces().Informer()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), podInf.HasSynced, nss.HasSynced)
	c, err := New(Options{Names: names, Client: countingClient{base, g}, Pods: podInf, Namespaces: nss, Holder: &lockedRoom{},
		Snapshot: func() *ledger.Snapshot { return ledger.New().Snapshot() }, AdmitConcurrency: concurrency,
		Quota: func() (*quota.Config, bool) { return nil, true }, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c.Pass(ctx)
	took := time.Since(began)
	for i := range pods {
		if p := get(t, base, fmt.Sprintf("p%02d", i)); podreq.Queued(p, names) {
			t.Errorf("pod %s is still gated after the pass", p.Name)
		}
	}
	g.mu.Lock()
	peak := g.peak
	g.mu.Unlock()
	if peak < 2 || peak > concurrency {
		t.Errorf("at most %d admitting updates were in flight at once, want 2 to %d (AdmitConcurrency)", peak, concurrency)
	}
	t.Logf("%d admissions in %s, at most %d in flight", pods, took.Round(time.Millisecond), peak)
}
