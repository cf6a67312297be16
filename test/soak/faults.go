package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// FaultRecord is one fault as it happened.
type FaultRecord struct {
	Fault
	// Target names the part hit (a replica, a node).
	Target string
	// StartSeconds is from the soak's start; HealedSeconds is how long after
	// the fault began the part served again (the hold included).
	StartSeconds, HealedSeconds float64
	// Err says why the fault could not be injected or healed.
	Err string `json:",omitempty"`
}

// runFaults injects the segment's faults at their times, each healed after
// its hold, and returns once every one has healed.
func (s *soak) runFaults(ctx context.Context, seg int, segStart time.Time) {
	var wg sync.WaitGroup
	for _, f := range s.faultsOf(seg) {
		wg.Go(func() {
			if !sleepUntil(ctx, segStart.Add(f.At)) {
				return
			}
			rec := s.inject(ctx, f)
			s.mu.Lock()
			s.res.Faults = append(s.res.Faults, rec)
			s.mu.Unlock()
			msg := fmt.Sprintf("   fault %s: %s, serving again after %.0fs", f.Kind, rec.Target, rec.HealedSeconds)
			if rec.Err != "" {
				msg += ": ERROR " + rec.Err
			}
			s.logf("%s", msg)
		})
	}
	wg.Wait()
}

// inject brings one fault about and heals it.
func (s *soak) inject(ctx context.Context, f Fault) FaultRecord {
	rec := FaultRecord{Fault: f, StartSeconds: time.Since(s.start).Seconds()}
	began := time.Now()
	err := s.apply(ctx, f, &rec)
	rec.HealedSeconds = time.Since(began).Seconds()
	if err != nil {
		rec.Err = err.Error()
	}
	return rec
}

// hold waits the fault's hold.
func hold(ctx context.Context, f Fault) {
	sleepUntil(ctx, time.Now().Add(f.Hold))
}

// retry calls fn until it succeeds or a minute passes (the API server may
// be restarting under another fault).
func retry(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
}

func (s *soak) apply(ctx context.Context, f Fault, rec *FaultRecord) error {
	env := s.env
	switch f.Kind {
	case ExtenderLeaderKill, ExtenderStandbyKill, ExtenderLeaderPause:
		r, err := s.extender(ctx, f.Kind != ExtenderStandbyKill)
		if err != nil {
			return err
		}
		rec.Target = r.Pod
		if f.Kind == ExtenderLeaderPause {
			if err := r.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			hold(ctx, f)
			if err := r.Signal(syscall.SIGCONT); err != nil {
				return err
			}
			return s.waitLeader(ctx)
		}
		if err := r.Kill(); err != nil {
			return err
		}
		hold(ctx, f)
		if err := env.StartReplica(ctx, r); err != nil {
			return err
		}
		return s.waitLeader(ctx)
	case WebhookKill, WebhookPause:
		w := env.Webhooks[f.Target]
		rec.Target = fmt.Sprintf("rota-admission-%d", f.Target)
		if f.Kind == WebhookPause {
			if err := w.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			hold(ctx, f)
			if err := w.Signal(syscall.SIGCONT); err != nil {
				return err
			}
		} else {
			if err := w.Kill(); err != nil {
				return err
			}
			hold(ctx, f)
			if err := env.StartWebhook(ctx, w); err != nil {
				return err
			}
		}
		return s.waitWebhookReady(ctx)
	case PluginKill, PluginPause:
		n := env.GPUNode(evalkit.NodeName(f.Target))
		if n == nil || n.Plugin == nil {
			return fmt.Errorf("node %s runs no device plugin", evalkit.NodeName(f.Target))
		}
		rec.Target = "rota-device-plugin on " + n.Spec.Name
		if f.Kind == PluginPause {
			if err := harness.SignalGroup(n.Plugin, syscall.SIGSTOP); err != nil {
				return err
			}
			hold(ctx, f)
			return harness.SignalGroup(n.Plugin, syscall.SIGCONT)
		}
		if err := n.Plugin.Kill(); err != nil {
			return err
		}
		hold(ctx, f)
		return n.Plugin.Start()
	case NodeHeartbeat:
		name := evalkit.NodeName(f.Target)
		rec.Target = "node " + name
		if err := env.Cluster.Nodes.SetHeartbeat(ctx, name, false); err != nil {
			return err
		}
		hold(ctx, f)
		return retry(ctx, func() error { return env.Cluster.Nodes.SetHeartbeat(ctx, name, true) })
	case SchedulerKill:
		rec.Target = "kube-scheduler"
		if err := env.Cluster.KillScheduler(); err != nil {
			return err
		}
		hold(ctx, f)
		return env.Cluster.StartScheduler(ctx)
	case APIServerRestart:
		rec.Target = "kube-apiserver"
		return env.Cluster.RestartAPIServer(ctx)
	case EtcdRestart:
		rec.Target = "etcd and kube-apiserver"
		return env.Cluster.RestartStorage(ctx)
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

// extender finds the replica that leads (or the one that does not).
func (s *soak) extender(ctx context.Context, leader bool) (*harness.Replica, error) {
	var out *harness.Replica
	err := retry(ctx, func() error {
		l, err := s.env.Leader(ctx)
		if err != nil {
			return err
		}
		if l == nil {
			return errors.New("no extender replica holds the Lease")
		}
		out = l
		if !leader {
			for _, r := range s.env.Extenders {
				if r != l {
					out = r
				}
			}
		}
		return nil
	})
	return out, err
}

// waitLeader waits until a replica leads and serves the verbs.
func (s *soak) waitLeader(ctx context.Context) error {
	return retry(ctx, func() error { return s.leaderServing(ctx) })
}

// leaderServing says (nil) whether a replica holds the Lease and serves.
func (s *soak) leaderServing(ctx context.Context) error {
	l, err := s.env.Leader(ctx)
	if err != nil {
		return err
	}
	if l == nil {
		return errors.New("no extender replica holds the Lease")
	}
	ok, err := l.Leading(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s holds the Lease but does not serve yet", l.Pod)
	}
	return nil
}

// waitWebhookReady waits until a webhook replica is ready (leads).
func (s *soak) waitWebhookReady(ctx context.Context) error {
	return retry(ctx, func() error { return s.webhookServing(ctx) })
}

// webhookServing says (nil) whether a webhook replica is ready.
func (s *soak) webhookServing(ctx context.Context) error {
	for _, w := range s.env.Webhooks {
		if w.Running() && s.env.WebhookReady(ctx, w) {
			return nil
		}
	}
	return errors.New("no webhook replica is ready")
}
