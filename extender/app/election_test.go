package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/contract"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func testElection(t *testing.T, id string, client *fake.Clientset) *election {
	t.Helper()
	cfg := config.DefaultLeaderElection()
	cfg.Namespace = "rota-system"
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 2*time.Second, 1500*time.Millisecond, 200*time.Millisecond
	return newElection(cfg, id, contract.Default, client)
}

// leRecord is the election record holder writes at t.
func leRecord(holder string, t time.Time) rl.LeaderElectionRecord {
	return rl.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 2, RenewTime: metav1.NewTime(t),
		AcquireTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
}

// A leader serves only while its last renewal that others can see began
// less than the renew deadline ago, by its own clock: resumed after a
// pause past its lease, it refuses at once, before client-go notices.
func TestServingNeedsAFreshRenewal(t *testing.T) {
	el := testElection(t, "a_1", fake.NewClientset())
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)}
	el.now = clock.Now

	err := el.Serving()
	if err == nil || !strings.Contains(err.Error(), "rota-extender a_1 is standby; leader is unknown") {
		t.Fatalf("before any election: %v", err)
	}
	el.observed("b_2")
	if err := el.Serving(); err == nil || !strings.Contains(err.Error(), "is standby; leader is b_2") {
		t.Fatalf("standby: %v", err)
	}

	renewed := clock.Now()
	el.wrote(renewed, leRecord("a_1", renewed))
	el.setLeading(true)
	if err := el.Serving(); err == nil || !strings.Contains(err.Error(), "taking over") {
		t.Fatalf("leading before the takeover is done: %v", err)
	}
	el.setServing(true)
	// A renewal in the same second changes nothing the standby can see:
	// the deadline stays where the first write of that second put it.
	clock.Add(900 * time.Millisecond)
	el.wrote(clock.Now(), leRecord("a_1", clock.Now()))
	until, err := el.deadline()
	if want := renewed.Add(1500 * time.Millisecond); err != nil || !until.Equal(want) {
		t.Fatalf("renewed within the second: deadline %v, %v; want %v", until, err, want)
	}
	clock.Add(200 * time.Millisecond) // 10.1 s: a new second
	el.wrote(clock.Now(), leRecord("a_1", clock.Now()))
	if until, err := el.deadline(); err != nil || !until.Equal(clock.Now().Add(1500*time.Millisecond)) {
		t.Fatalf("renewed in the next second: deadline %v, %v", until, err)
	}

	// Paused (SIGSTOP) past the renew deadline, then resumed.
	clock.Add(2 * time.Second)
	if err := el.Serving(); err == nil || !strings.Contains(err.Error(), "went unrenewed for 2s") {
		t.Fatalf("after the renew deadline: %v", err)
	}
	// A renewal that began before the last one does not move it back.
	el.wrote(renewed.Add(-time.Second), leRecord("a_1", renewed.Add(-time.Second)))
	if err := el.Serving(); err == nil {
		t.Fatal("an older renewal reopened the gate")
	}
	el.wrote(clock.Now(), leRecord("a_1", clock.Now()))
	if err := el.Serving(); err != nil {
		t.Fatalf("renewed again: %v", err)
	}
	// Releasing (holder empty) or losing the term closes it at once.
	el.wrote(clock.Now(), leRecord("", clock.Now()))
	if err := el.Serving(); err == nil {
		t.Fatal("released, still serving")
	}
	el.wrote(clock.Now(), leRecord("a_1", clock.Now().Add(time.Second)))
	el.setServing(true)
	el.setLeading(false)
	if err := el.Serving(); err == nil {
		t.Fatal("stopped leading, still serving")
	}
}

// fakeWire stands for the network: it writes the request out (telling the
// request's trace) at once, or only after writeAfter, then answers after
// answerAfter, failing when the request's context ended first.
type fakeWire struct {
	mu                      sync.Mutex
	methods                 []string
	writeAfter, answerAfter time.Duration
}

func (w *fakeWire) RoundTrip(req *http.Request) (*http.Response, error) {
	w.mu.Lock()
	w.methods = append(w.methods, req.Method)
	writeAfter, answerAfter := w.writeAfter, w.answerAfter
	w.mu.Unlock()
	ctx := req.Context()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(writeAfter):
	}
	if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.WroteRequest != nil {
		tr.WroteRequest(httptrace.WroteRequestInfo{})
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(answerAfter):
	}
	return &http.Response{StatusCode: 201, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// The fence passes reads, refuses writes while the replica may not write,
// abandons a write not yet sent when the permission ends, and never one
// already sent: the API server would apply it anyway, and the caller
// would take it for failed.
func TestFenceRefusesWritesOfAStandby(t *testing.T) {
	wire := &fakeWire{}
	until := time.Now().Add(time.Hour)
	var refuse error
	f := &fence{next: wire, until: func() (time.Time, error) { return until, refuse }}
	do := func(method string) error {
		req, _ := http.NewRequest(method, "https://api/api/v1/namespaces/a/pods/p/binding", nil)
		resp, err := f.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := do(http.MethodPost); err != nil {
		t.Fatal(err)
	}
	refuse = errors.New("rota-extender x is standby; leader is y")
	if err := do(http.MethodGet); err != nil {
		t.Fatalf("a standby's read: %v", err)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if err := do(m); err == nil || !strings.Contains(err.Error(), "is standby") {
			t.Errorf("a standby's %s: %v", m, err)
		}
	}
	if strings.Join(wire.methods, ",") != "POST,GET" {
		t.Errorf("sent %v, want the leader's POST and the standby's GET only", wire.methods)
	}

	// Permission ends in 50 ms.
	refuse = nil
	until = time.Now().Add(50 * time.Millisecond)
	wire.writeAfter, wire.answerAfter = 0, 150*time.Millisecond
	if err := do(http.MethodPost); err != nil {
		t.Errorf("a write sent in time, answered after the permission ended: %v", err)
	}
	until = time.Now().Add(50 * time.Millisecond)
	wire.writeAfter, wire.answerAfter = 150*time.Millisecond, 0
	if err := do(http.MethodPost); !errors.Is(err, context.Canceled) {
		t.Errorf("a write still unsent when the permission ended: %v, want it abandoned", err)
	}
}

// Two replicas on one Lease: the second takes over only once the first's
// lease has lapsed after its last renewal, and by then the first has
// stopped serving; the standby names the leader.
func TestElectionHandsOverAfterTheLeaseLapses(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rota-system"}})
	a, b := testElection(t, "a_1", client), testElection(t, "b_2", client)
	run := func(ctx context.Context, el *election) <-chan context.Context {
		started := make(chan context.Context, 1)
		le, err := el.elector(started)
		if err != nil {
			t.Fatal(err)
		}
		go le.Run(ctx)
		return started
	}
	actx, killA := context.WithCancel(ctx)
	defer killA()
	select {
	case <-run(actx, a):
		a.setServing(true)
	case <-time.After(5 * time.Second):
		t.Fatal("a never acquired the free lease")
	}
	if err := a.Serving(); err != nil {
		t.Fatalf("leader: %v", err)
	}
	bstarted := run(ctx, b)
	time.Sleep(300 * time.Millisecond)
	if err := b.Serving(); err == nil || !strings.Contains(err.Error(), "b_2 is standby; leader is a_1") {
		t.Fatalf("standby: %v", err)
	}

	killA() // a's renewals stop; no release, as after kill -9
	var took time.Time
	select {
	case <-bstarted:
		took = time.Now()
	case <-time.After(5 * time.Second):
		t.Fatal("b never took over")
	}
	a.mu.Lock()
	lastRenew, renewDeadline := a.renewed, a.cfg.RenewDeadline
	a.mu.Unlock()
	if earliest := lastRenew.Add(2 * time.Second); took.Before(earliest) {
		t.Errorf("b took over %v after a's last visible renewal, before a's lease duration (2s)", took.Sub(lastRenew))
	}
	if a.Serving() == nil {
		t.Error("a still serves after b took over")
	}
	t.Logf("b took over %v after a's last visible renewal; a stopped serving %v after it", took.Sub(lastRenew).Round(time.Millisecond), renewDeadline)
}
