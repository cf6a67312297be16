// Package health decides whether each GPU is healthy. It turns backend
// events (XID, ECC, lost) and periodic probes into health states, ignores
// application XIDs, and brings a GPU back only after a quiet period and a
// successful probe, or when an admin overrides it.
//
// Tracker is a state machine that takes the time from its caller; Run is the
// adapter loop around it. Tracker is safe for concurrent use.
package health

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/discovery"
)

// Status is the health of one GPU.
type Status struct {
	Healthy bool
	Reason  string // why unhealthy, e.g. "XID 79"
}

// Change is a health transition of one GPU.
type Change struct {
	UUID string
	Status
}

type gpuState struct {
	Status
	lastFault time.Time
}

// Tracker holds the health of a fixed set of GPUs.
type Tracker struct {
	ignored map[uint64]bool
	quiet   time.Duration

	mu    sync.Mutex
	order []string // UUIDs in index order
	state map[string]*gpuState
}

// NewTracker tracks uuids, all healthy. XIDs in ignored never fail a GPU;
// an unhealthy GPU recovers after quiet without faults and a good probe.
func NewTracker(uuids []string, ignored []uint64, quiet time.Duration) *Tracker {
	t := &Tracker{ignored: map[uint64]bool{}, quiet: quiet, order: slices.Clone(uuids), state: map[string]*gpuState{}}
	for _, x := range ignored {
		t.ignored[x] = true
	}
	for _, u := range uuids {
		t.state[u] = &gpuState{Status: Status{Healthy: true}}
	}
	return t
}

// Ignored reports whether e is an application XID that does not count.
func (t *Tracker) Ignored(e discovery.Event) bool {
	return e.Kind == discovery.KindXID && t.ignored[e.XID]
}

// Observe records a fault event at now. It returns the resulting change, if
// the GPU was healthy before; ok is false for ignored events, unknown GPUs
// and GPUs that were already unhealthy (their quiet period restarts).
func (t *Tracker) Observe(e discovery.Event, now time.Time) (Change, bool) {
	if t.Ignored(e) {
		return Change{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.state[e.UUID]
	if !ok {
		return Change{}, false
	}
	s.lastFault = now
	if !s.Healthy {
		return Change{}, false
	}
	s.Status = Status{Healthy: false, Reason: e.Reason()}
	return Change{UUID: e.UUID, Status: s.Status}, true
}

// Check probes every GPU: a healthy GPU that fails its probe turns
// unhealthy; an unhealthy GPU whose last fault is at least the quiet period
// old and that passes its probe turns healthy. probe is called without the
// tracker's lock held. Changes come back in index order.
func (t *Tracker) Check(now time.Time, probe func(uuid string) error) []Change {
	t.mu.Lock()
	order := slices.Clone(t.order)
	t.mu.Unlock()
	results := make(map[string]error, len(order))
	for _, u := range order {
		results[u] = probe(u)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Change
	for _, u := range order {
		s := t.state[u]
		err := results[u]
		switch {
		case s.Healthy && err != nil:
			s.lastFault = now
			s.Status = Status{Healthy: false, Reason: "probe failed: " + err.Error()}
			out = append(out, Change{UUID: u, Status: s.Status})
		case !s.Healthy && err != nil:
			s.lastFault = now
		case !s.Healthy && now.Sub(s.lastFault) >= t.quiet:
			s.Status = Status{Healthy: true}
			out = append(out, Change{UUID: u, Status: s.Status})
		}
	}
	return out
}

// Override forces uuid healthy (an admin's decision); ok is false when it
// was healthy already or is unknown.
func (t *Tracker) Override(uuid string) (Change, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.state[uuid]
	if !ok || s.Healthy {
		return Change{}, false
	}
	s.Status = Status{Healthy: true}
	s.lastFault = time.Time{}
	return Change{UUID: uuid, Status: s.Status}, true
}

// Snapshot returns the health of every GPU by UUID.
func (t *Tracker) Snapshot() map[string]Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]Status, len(t.state))
	for u, s := range t.state {
		out[u] = s.Status
	}
	return out
}

// Run feeds backend events and periodic probes into t until ctx is done,
// calling notify for every change. It returns when ctx ends; a failing
// event source is logged and the periodic probe carries on alone.
func Run(ctx context.Context, b discovery.Backend, t *Tracker, interval time.Duration, notify func(Change)) {
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		err := b.Watch(ctx, func(e discovery.Event) {
			if t.Ignored(e) {
				logger.V(2).Info("Ignoring application XID", "gpu", e.UUID, "xid", e.XID)
				return
			}
			logger.Info("GPU fault", "gpu", e.UUID, "reason", e.Reason())
			if c, ok := t.Observe(e, time.Now()); ok {
				notify(c)
			}
		})
		if err != nil {
			logger.Error(err, "GPU event watch stopped; health relies on the periodic probe")
		}
	})
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		for _, c := range t.Check(time.Now(), b.Probe) {
			notify(c)
		}
	}
}
