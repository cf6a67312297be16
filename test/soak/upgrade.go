package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// Roll is one part moved from one build to another during the upgrade
// segment, and how long it (or, for the replicated services, the whole
// service) was not serving.
type Roll struct {
	// Step is "upgrade" (to the next build) or "rollback".
	Step string
	Part string
	// DownSeconds is how long the part did not serve: a node's device
	// plugin from its stop until it registered again; the extender or the
	// webhook from the first moment no replica served until one did.
	DownSeconds float64
	Err         string `json:",omitempty"`
}

// upgradeDelay is how long the upgrade segment's load runs before the
// roll begins, and between the upgrade and the rollback.
const upgradeDelay = 20 * time.Second

// upgrade rolls every Rota part to the next build (a build that writes the
// next version of Rota's documents, with a field this build does not know)
// and back, under load, in the orders helm upgrade may roll them: device
// plugins first on the way up, the Deployments first on the way back.
func (s *soak) upgrade(ctx context.Context) {
	next, err := filepath.Abs(s.o.nextBin)
	if err == nil {
		for _, b := range []string{"rota-extender", "rota-admission", "rota-device-plugin"} {
			if _, serr := os.Stat(filepath.Join(next, b)); serr != nil {
				err = fmt.Errorf("the next build is missing (make build-next): %w", serr)
			}
		}
	}
	if err != nil {
		s.mu.Lock()
		s.res.Rolls = append(s.res.Rolls, Roll{Step: "upgrade", Part: "all", Err: err.Error()})
		s.mu.Unlock()
		return
	}
	this := filepath.Dir(s.env.Extenders[0].Path)
	sleepUntil(ctx, time.Now().Add(upgradeDelay))
	s.logf("   upgrade: rolling every part from %s to %s", this, next)
	s.rollPlugins(ctx, "upgrade", next)
	s.rollExtenders(ctx, "upgrade", next)
	s.rollWebhooks(ctx, "upgrade", next)
	sleepUntil(ctx, time.Now().Add(upgradeDelay))
	s.logf("   rollback: rolling every part back to %s", this)
	s.rollWebhooks(ctx, "rollback", this)
	s.rollExtenders(ctx, "rollback", this)
	s.rollPlugins(ctx, "rollback", this)
}

func (s *soak) record(r Roll) {
	s.mu.Lock()
	s.res.Rolls = append(s.res.Rolls, r)
	s.mu.Unlock()
	msg := fmt.Sprintf("   %s %s: not serving for %.1fs", r.Step, r.Part, r.DownSeconds)
	if r.Err != "" {
		msg += ": ERROR " + r.Err
	}
	s.logf("%s", msg)
}

// rollPlugins replaces the device plugins one node at a time, as the
// DaemonSet's rolling update does: stop (SIGTERM), start the other build,
// wait until the kubelet has its registration and devices again.
func (s *soak) rollPlugins(ctx context.Context, step, dir string) {
	for i := range plugins {
		n := s.env.GPUNode(evalkit.NodeName(i))
		r := Roll{Step: step, Part: "rota-device-plugin on " + n.Spec.Name}
		began := time.Now()
		err := func() error {
			before := registered(n, s.env.Names.GPU)
			if err := n.Plugin.Stop(10 * time.Second); err != nil {
				return err
			}
			n.Plugin.Path = filepath.Join(dir, "rota-device-plugin")
			if err := n.Plugin.Start(); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			return n.Stub.WaitRegistered(wctx, s.env.Names.GPU, before)
		}()
		r.DownSeconds = time.Since(began).Seconds()
		if err != nil {
			r.Err = err.Error()
		}
		s.record(r)
	}
}

// registered counts the registrations of resource the node's kubelet has
// had.
func registered(n *harness.GPUNode, resource string) int {
	c := 0
	for _, reg := range n.Stub.Registrations() {
		if reg.Resource == resource {
			c++
		}
	}
	return c
}

// rollExtenders replaces the extender replicas standby first, then the
// leader (whose stop hands the Lease over), and measures how long no
// replica served the verbs.
func (s *soak) rollExtenders(ctx context.Context, step, dir string) {
	leader, err := s.extender(ctx, true)
	if err != nil {
		s.record(Roll{Step: step, Part: "rota-extender", Err: err.Error()})
		return
	}
	order := []*harness.Replica{}
	for _, r := range s.env.Extenders {
		if r != leader {
			order = append(order, r)
		}
	}
	order = append(order, leader)
	down := s.outage(ctx, func(ctx context.Context) bool { return s.leaderServing(ctx) == nil })
	var errs []error
	for _, r := range order {
		if err := r.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Path = filepath.Join(dir, "rota-extender")
		if err := s.env.StartReplica(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.waitLeader(ctx); err != nil {
		errs = append(errs, err)
	}
	r := Roll{Step: step, Part: "rota-extender (2 replicas)", DownSeconds: down()}
	if len(errs) > 0 {
		r.Err = errors.Join(errs...).Error()
	}
	s.record(r)
}

// rollWebhooks replaces the webhook replicas as the chart's Recreate
// strategy does: both stop, then both start on the other build.
func (s *soak) rollWebhooks(ctx context.Context, step, dir string) {
	down := s.outage(ctx, func(ctx context.Context) bool { return s.webhookServing(ctx) == nil })
	var errs []error
	for _, w := range s.env.Webhooks {
		if err := w.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range s.env.Webhooks {
		w.Path = filepath.Join(dir, "rota-admission")
		if err := s.env.StartWebhook(ctx, w); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.waitWebhookReady(ctx); err != nil {
		errs = append(errs, err)
	}
	r := Roll{Step: step, Part: fmt.Sprintf("rota-admission (%d replicas, recreated)", len(s.env.Webhooks)), DownSeconds: down()}
	if len(errs) > 0 {
		r.Err = errors.Join(errs...).Error()
	}
	s.record(r)
}

// outage polls serving from now until the returned function is called,
// which returns the seconds serving was false (each poll's answer holds
// until the next, about 200 ms later).
func (s *soak) outage(ctx context.Context, serving func(context.Context) bool) func() float64 {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg   sync.WaitGroup
		down time.Duration
	)
	wg.Go(func() {
		prev := time.Now()
		for ctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			ok := serving(pctx)
			pcancel()
			now := time.Now()
			if !ok && ctx.Err() == nil {
				down += now.Sub(prev)
			}
			prev = now
			sleepUntil(ctx, now.Add(200*time.Millisecond))
		}
	})
	return func() float64 {
		cancel()
		wg.Wait()
		return down.Seconds()
	}
}
