package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/contract"
)

// Identity returns a leader-election identity: the pod's name (or, outside
// a pod, the host's) and a random suffix, so that a restarted container
// never mistakes the lease of its previous run for its own.
func Identity(podName string) (string, error) {
	base := podName
	if base == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("leader election identity: %w", err)
		}
		base = h
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return base + "_" + hex.EncodeToString(b[:]), nil
}

// election is this replica's side of the Lease election. It answers, for
// every verb and every API write, whether this replica may act now
// (serving), and it labels the replica's own Pod.
//
// client-go's election does not fence: a leader that is paused, or cut off
// from the API server, still believes it leads. So serving is decided by
// the clock on every call, not by callbacks alone: this replica serves only
// while it leads, its takeover is done (App.takeOver), and its last
// renewal that others can see began less than RenewDeadline ago.
//
// Another replica may take over only after it has seen the Lease's record
// unchanged for LeaseDuration on its own clock (client-go's acquire). It
// compares the record as JSON, where the renew time has whole seconds: a
// renewal within the same second as the previous one changes nothing it
// can see, so "renewed" is when the first write of the record as it reads
// now began (observedLock). Others can only have seen that write after it
// began; so we stop at least LeaseDuration-RenewDeadline before anyone else
// can start, assuming the two clocks run at about the same rate, as
// client-go does (no clock needs to agree with another's time of day). The
// API writes of this replica are held to that same instant (fence): one
// not yet sent when serving ends is never sent, and a replica resumed
// after a SIGSTOP refuses every verb and write at once: its monotonic clock
// kept running while it was stopped. A renewal that
// succeeds again reopens the gate: it proves, by the Lease's
// resourceVersion, that nobody took the lease meanwhile.
type election struct {
	cfg    config.LeaderElection
	id     string
	names  contract.Names
	client kubernetes.Interface // not fenced: the Lease and this replica's own Pod
	now    func() time.Time
	lock   rl.Interface

	mu       sync.Mutex
	renewed  time.Time // when the first write of our record as others see it now began
	record   string    // that record, as client-go compares it
	leading  bool      // between OnStartedLeading and OnStoppedLeading
	serving  bool      // leading and taken over
	holder   string    // the holder last observed
	acquired time.Time // when this term's lease was acquired
}

func newElection(cfg config.LeaderElection, id string, names contract.Names, client kubernetes.Interface) *election {
	el := &election{cfg: cfg, id: id, names: names, client: client, now: time.Now}
	el.lock = &observedLock{Interface: &rl.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
		Client:     client.CoordinationV1(),
		LockConfig: rl.ResourceLockConfig{Identity: id},
	}, el: el}
	return el
}

// Serving is nil when this replica may serve a verb now, else the error the
// verb answers (server.Options.Serving).
func (el *election) Serving() error {
	_, err := el.deadline()
	return err
}

// deadline returns until when this replica may write (the fence), or why it
// may not.
func (el *election) deadline() (time.Time, error) {
	el.mu.Lock()
	defer el.mu.Unlock()
	holder := el.holder
	if holder == "" || holder == el.id {
		holder = "unknown"
	}
	switch {
	case el.serving:
		age := el.now().Sub(el.renewed)
		if age < el.cfg.RenewDeadline {
			return el.renewed.Add(el.cfg.RenewDeadline), nil
		}
		return time.Time{}, fmt.Errorf("rota-extender %s is standby; leader is %s (its own lease went unrenewed for %s, past the renew deadline %s); the scheduler will retry",
			el.id, holder, age.Round(time.Millisecond), el.cfg.RenewDeadline)
	case el.leading:
		return time.Time{}, fmt.Errorf("rota-extender %s is taking over the lease and does not serve yet; the scheduler will retry", el.id)
	}
	return time.Time{}, fmt.Errorf("rota-extender %s is standby; leader is %s; the scheduler will retry", el.id, holder)
}

// wrote records a successful write of the election record rec that began
// at start.
func (el *election) wrote(start time.Time, rec rl.LeaderElectionRecord) {
	// What the other candidates compare (LeaseLock.Get's raw record).
	spec := rl.LeaderElectionRecordToLeaseSpec(&rec)
	raw, _ := json.Marshal(*rl.LeaseSpecToLeaderElectionRecord(&spec))
	el.mu.Lock()
	defer el.mu.Unlock()
	el.holder = rec.HolderIdentity
	if rec.HolderIdentity != el.id {
		el.serving = false // released
		return
	}
	if string(raw) != el.record && start.After(el.renewed) {
		el.renewed, el.record = start, string(raw)
	}
}

func (el *election) observed(holder string) {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.holder = holder
}

func (el *election) setLeading(on bool) {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.leading = on
	el.serving = el.serving && on
	if on {
		el.acquired = el.renewed
	}
}

func (el *election) setServing(on bool) {
	el.mu.Lock()
	defer el.mu.Unlock()
	el.serving = on && el.leading
}

// status returns the holder last observed and whether this replica serves.
func (el *election) status() (holder string, serving bool) {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.holder, el.serving
}

// elector builds a LeaderElector for one round: from the first acquire
// attempt until the lease is lost or ctx ends. started receives the term's
// context. The lease is not released on cancel: Run releases it (release)
// once nothing that a leader runs is left.
func (el *election) elector(started chan<- context.Context) (*leaderelection.LeaderElector, error) {
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          el.lock,
		LeaseDuration: el.cfg.LeaseDuration,
		RenewDeadline: el.cfg.RenewDeadline,
		RetryPeriod:   el.cfg.RetryPeriod,
		Name:          el.cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				el.setLeading(true)
				started <- ctx
			},
			OnStoppedLeading: func() { el.setLeading(false) },
			OnNewLeader:      el.observed,
		},
	})
}

// release gives the lease up when this replica still holds it, as
// client-go's ReleaseOnCancel does (holder empty, one second left), so the
// standby takes over within a retry period instead of a lease duration.
func (el *election) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, el.cfg.RenewDeadline)
	defer cancel()
	rec, _, err := el.lock.Get(ctx)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	if rec.HolderIdentity != el.id {
		return nil
	}
	now := metav1.NewTime(el.now())
	return el.lock.Update(ctx, rl.LeaderElectionRecord{
		LeaderTransitions:    rec.LeaderTransitions,
		LeaseDurationSeconds: 1,
		RenewTime:            now,
		AcquireTime:          now,
	})
}

// label marks this replica's own Pod as the leader (the Service that the
// scheduler calls selects names.LeaderLabel) or removes the mark, and
// returns the Pod's resourceVersion after the write ("" without a Pod).
// The label's key, as an annotation, records who took over when: it makes
// every takeover a real write, whose resourceVersion the takeover waits
// for (takeOver), even when a label of an earlier term was never removed.
func (el *election) label(ctx context.Context, leader bool) (string, error) {
	if el.cfg.PodName == "" {
		return "", nil
	}
	var label, note any // JSON null removes the key
	if leader {
		label, note = "true", el.id+" since "+el.now().UTC().Format(time.RFC3339Nano)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{el.names.LeaderLabel: label},
		"annotations": map[string]any{el.names.LeaderLabel: note},
	}})
	if err != nil {
		return "", err
	}
	p, err := el.client.CoreV1().Pods(el.cfg.PodNamespace).Patch(ctx, el.cfg.PodName, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("labelling its own pod %s/%s: %w", el.cfg.PodNamespace, el.cfg.PodName, err)
	}
	return p.ResourceVersion, nil
}

// unlabel removes the leader mark, retrying for up to a lease duration
// (best effort: a replica that cannot reach the API server cannot serve a
// verb either, see Serving).
func (el *election) unlabel(ctx context.Context) {
	if el.cfg.PodName == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, el.cfg.LeaseDuration)
	defer cancel()
	for {
		_, err := el.label(ctx, false)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			klog.FromContext(ctx).Error(err, "The leader label stays on this standby's pod; the Service may route to it, and it refuses every verb")
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(el.cfg.RetryPeriod):
		}
	}
}

// observedLock is the Lease lock; it tells the election who holds the
// lease and when our own record was last written.
type observedLock struct {
	rl.Interface
	el *election
}

func (l *observedLock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.el.observed(rec.HolderIdentity)
	}
	return rec, raw, err
}

func (l *observedLock) Create(ctx context.Context, rec rl.LeaderElectionRecord) error {
	start := l.el.now()
	err := l.Interface.Create(ctx, rec)
	if err == nil {
		l.el.wrote(start, rec)
	}
	return err
}

func (l *observedLock) Update(ctx context.Context, rec rl.LeaderElectionRecord) error {
	start := l.el.now()
	err := l.Interface.Update(ctx, rec)
	if err == nil {
		l.el.wrote(start, rec)
	}
	return err
}
