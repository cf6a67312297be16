package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/server/servingtls"
)

// Run serves the webhooks until ctx ends, then shuts down gracefully: it
// stops accepting connections and lets the requests in flight finish (up
// to cfg.ShutdownTimeout). The serving certificate is read first (a bad
// file fails Run at once) and re-read whenever its files change.
func (a *App) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	certs, err := servingtls.Load("rota-admission", servingtls.Files{CertFile: a.cfg.TLSCertFile, KeyFile: a.cfg.TLSKeyFile},
		"h2", "http/1.1")
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", a.cfg.Listen, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for _, f := range a.factories {
			f.Shutdown() // waits for the informers to stop
		}
	}()
	go certs.Run(ctx)
	a.start(ctx)
	srv := &http.Server{
		Handler:           a.Routes(),
		TLSConfig:         certs.TLSConfig(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// Requests keep the logger but are not cancelled by shutdown; the
		// server's Shutdown waits for them instead.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	// The certificate comes from TLSConfig.GetConfigForClient.
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	logger.Info("Serving", "address", ln.Addr().String(), "domain", a.cfg.Domain, "namespace", a.cfg.Namespace,
		"configMap", a.cfg.ConfigMap, "leaderElect", a.cfg.LeaderElect)
	if a.ready != nil {
		a.ready <- ln.Addr()
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	logger.Info("Shutting down")
	sctx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ShutdownTimeout)
	defer cancelShutdown()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// start starts the informers, leader election (or, without it, admits at
// once) and the reservation timer; they stop when ctx ends.
func (a *App) start(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, f := range a.factories {
		f.Start(ctx.Done())
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), a.hasSynced...) {
			logger.Info("Informers synced")
		}
	}()
	if a.cfg.LeaderElect {
		go a.elect(ctx)
	} else {
		a.active.Store(true)
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.view.Expire()
			}
		}
	}()
}

// elect contends for the lease until ctx ends.
func (a *App) elect(ctx context.Context) {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.cfg.LeaseNS(), Name: a.cfg.LeaseName},
		Client:     a.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   a.cfg.LeaseDuration,
			RenewDeadline:   a.cfg.RenewDeadline,
			RetryPeriod:     a.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            a.cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					a.active.Store(true)
					logger.Info("Became the active replica", "lease", klog.KRef(a.cfg.LeaseNS(), a.cfg.LeaseName))
				},
				OnStoppedLeading: func() {
					a.active.Store(false)
					logger.Info("Stopped being the active replica", "lease", klog.KRef(a.cfg.LeaseNS(), a.cfg.LeaseName))
				},
				OnNewLeader: func(id string) {
					logger.V(2).Info("Leader", "identity", id)
				},
			},
		})
		if err != nil {
			logger.Error(err, "Leader election is misconfigured; this replica stays standby")
			return
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
}
