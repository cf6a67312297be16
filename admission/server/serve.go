package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/certs"
	"github.com/rota-sched/rota/admission/config"
)

// Run serves the webhook until ctx ends, then shuts down gracefully:
// it stops accepting connections and lets the requests in flight finish
// (up to cfg.ShutdownTimeout). ready, if not nil, receives the address the
// server listens on once it accepts connections.
func Run(ctx context.Context, cfg config.Config, ready chan<- net.Addr) error {
	logger := klog.FromContext(ctx)
	if err := cfg.Validate(); err != nil {
		return err
	}
	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = cfg.KubeQPS, cfg.KubeBurst
	restCfg.UserAgent = "rota-admission"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("building the API client: %w", err)
	}
	reloader, err := certs.NewReloader(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	app, err := NewApp(cfg, client, reg) //nolint:contextcheck // informer handlers get no context; they log through Start's (App.ctx)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	app.Start(ctx)
	srv := &http.Server{
		Handler: app.Routes(),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: reloader.GetCertificate,
		},
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
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	logger.Info("Serving", "address", ln.Addr().String(), "domain", cfg.Domain, "namespace", cfg.Namespace,
		"configMap", cfg.ConfigMap, "leaderElect", cfg.LeaderElect)
	if ready != nil {
		ready <- ln.Addr()
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	logger.Info("Shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}
