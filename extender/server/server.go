// Package server is rota-extender's HTTP face: httprouter routes that decode
// kube-scheduler's extender/v1 requests, call the decision layer, and encode
// the answers, plus /healthz, /readyz, /metrics, /debug/pods and the
// status page under /ui.
//
// Bodies are bounded (http.MaxBytesReader). A body that does not decode is
// answered with HTTP 200 and Error set where the verb's result has an Error
// field (filter, bind), because kube-scheduler ignores the body of any other
// status; prioritize and preempt have none and get HTTP 400.
//
// A Server is safe for concurrent use.
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/logkey"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/ui"
)

// Verbs is what the server needs from the decision layer.
type Verbs interface {
	Filter(ctx context.Context, args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult
	Prioritize(ctx context.Context, args *extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error)
	Bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) *extenderv1.ExtenderBindingResult
	Preempt(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error)
	Decisions(namespace, name string) []scheduling.Decision
	Ready() bool
}

var _ Verbs = (*scheduling.Extender)(nil)

// Options configure New.
type Options struct {
	MaxBodyBytes int64
	Metrics      *metrics.Metrics
	// Logger is the base logger of every request.
	Logger klog.Logger
	// UI, when set, serves the status page under /ui (see extender/ui).
	UI *ui.UI
	// Profiling serves Go's runtime profiles under /debug/pprof/ (off by
	// default, like kube-scheduler's --profiling=false in hardened setups).
	Profiling bool
}

// Server routes the extender's HTTP endpoints.
type Server struct {
	verbs  Verbs
	o      Options
	router *httprouter.Router
}

// New builds the routes.
func New(verbs Verbs, o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	s := &Server{verbs: verbs, o: o, router: httprouter.New()}
	s.router.POST("/filter", s.filter)
	s.router.POST("/prioritize", s.prioritize)
	s.router.POST("/bind", s.bind)
	s.router.POST("/preempt", s.preempt)
	s.router.GET("/healthz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		_, _ = w.Write([]byte("ok\n"))
	})
	s.router.GET("/readyz", s.readyz)
	s.router.GET("/debug/pods/:namespace/:name", s.debugPod)
	if o.UI != nil {
		for _, p := range ui.Paths() {
			s.router.Handler(http.MethodGet, p, o.UI)
		}
	}
	if o.Metrics != nil {
		s.router.Handler(http.MethodGet, "/metrics", promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	if o.Profiling {
		s.router.GET("/debug/pprof/*profile", servePprof)
	}
	return s
}

// servePprof serves net/http/pprof's handlers under /debug/pprof/.
func servePprof(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
	switch ps.ByName("profile") {
	case "/profile":
		pprof.Profile(w, r)
	case "/trace":
		pprof.Trace(w, r)
	case "/symbol":
		pprof.Symbol(w, r)
	case "/cmdline":
		pprof.Cmdline(w, r)
	default: // the index and the named profiles: heap, goroutine, allocs, ...
		pprof.Index(w, r)
	}
}

// Handler returns the router.
func (s *Server) Handler() http.Handler { return s.router }

func (s *Server) ctx(r *http.Request, verb string) context.Context {
	return klog.NewContext(r.Context(), klog.LoggerWithValues(s.o.Logger, logkey.Verb, verb))
}

func (s *Server) observe(verb string, start time.Time) {
	if s.o.Metrics != nil {
		s.o.Metrics.RequestDuration.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	}
}

// decode reads the JSON body into v; the error says what is wrong.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, verb string, v any) error {
	body := http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes)
	err := json.NewDecoder(body).Decode(v)
	if err == nil {
		return nil
	}
	kind := "BadJSON"
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		kind = "TooLarge"
		err = fmt.Errorf("%s: request body is larger than %d bytes (raise --max-body-bytes)", verb, s.o.MaxBodyBytes)
	} else {
		err = fmt.Errorf("%s: request body is not valid extender/v1 JSON: %w", verb, err)
	}
	if s.o.Metrics != nil {
		s.o.Metrics.HTTPErrors.WithLabelValues(verb, kind).Inc()
	}
	klog.FromContext(r.Context()).V(2).Info("Bad extender request", logkey.Verb, verb, "err", err.Error())
	return err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) filter(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	defer s.observe("filter", time.Now())
	var args extenderv1.ExtenderArgs
	if err := s.decode(w, r, "filter", &args); err != nil {
		writeJSON(w, http.StatusOK, &extenderv1.ExtenderFilterResult{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.verbs.Filter(s.ctx(r, "filter"), &args))
}

func (s *Server) prioritize(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	defer s.observe("prioritize", time.Now())
	var args extenderv1.ExtenderArgs
	if err := s.decode(w, r, "prioritize", &args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := s.verbs.Prioritize(s.ctx(r, "prioritize"), &args)
	if err != nil {
		http.Error(w, "prioritize: "+err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) bind(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	defer s.observe("bind", time.Now())
	var args extenderv1.ExtenderBindingArgs
	if err := s.decode(w, r, "bind", &args); err != nil {
		writeJSON(w, http.StatusOK, &extenderv1.ExtenderBindingResult{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.verbs.Bind(s.ctx(r, "bind"), &args))
}

func (s *Server) preempt(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	defer s.observe("preempt", time.Now())
	var args extenderv1.ExtenderPreemptionArgs
	if err := s.decode(w, r, "preempt", &args); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := s.verbs.Preempt(s.ctx(r, "preempt"), &args)
	if err != nil {
		http.Error(w, "preempt: "+err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	if !s.verbs.Ready() {
		http.Error(w, "informers not synced or ledger not rebuilt yet", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// podDecisions is the /debug/pods answer.
type podDecisions struct {
	Pod       string                `json:"pod"`
	Decisions []scheduling.Decision `json:"decisions"`
}

func (s *Server) debugPod(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	ns, name := ps.ByName("namespace"), ps.ByName("name")
	ds := s.verbs.Decisions(ns, name)
	if len(ds) == 0 {
		http.Error(w, fmt.Sprintf("no recent decision for pod %s/%s", ns, name), http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, podDecisions{Pod: ns + "/" + name, Decisions: ds})
}

// TLS configures HTTPS; empty CertFile means plain HTTP.
type TLS struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, requires client certificates signed by it.
	ClientCAFile string
}

// HTTP holds the listener settings of Run.
type HTTP struct {
	Listen          string
	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	ShutdownTimeout time.Duration
	TLS             TLS
}

// Run serves until ctx ends, then shuts down gracefully (in-flight calls
// finish within ShutdownTimeout). ready, when set, is closed once listening.
func (s *Server) Run(ctx context.Context, h HTTP, ready chan<- net.Addr) error {
	logger := klog.FromContext(ctx)
	srv := &http.Server{
		Handler:           s.router,
		ReadHeaderTimeout: h.ReadTimeout,
		ReadTimeout:       h.ReadTimeout,
		WriteTimeout:      h.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		// In-flight calls outlive the shutdown signal; Shutdown bounds them.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if h.TLS.CertFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if h.TLS.ClientCAFile != "" {
			pem, err := os.ReadFile(h.TLS.ClientCAFile)
			if err != nil {
				return fmt.Errorf("read client CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("client CA file %s holds no PEM certificate", h.TLS.ClientCAFile)
			}
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		srv.TLSConfig = cfg
	}
	ln, err := net.Listen("tcp", h.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", h.Listen, err)
	}
	logger.Info("Serving", "address", ln.Addr().String(), "tls", h.TLS.CertFile != "", "clientCerts", h.TLS.ClientCAFile != "")
	if ready != nil {
		ready <- ln.Addr()
	}
	errc := make(chan error, 1)
	go func() {
		if h.TLS.CertFile != "" {
			errc <- srv.ServeTLS(ln, h.TLS.CertFile, h.TLS.KeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("Shutting down the HTTP server")
	sctx, cancel := context.WithTimeout(context.Background(), h.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
