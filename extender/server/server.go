// Package server is rota-extender's HTTP face: httprouter routes that decode
// kube-scheduler's extender/v1 requests, call the decision layer, and encode
// the answers, plus /healthz, /readyz, /metrics, /debug/pods and the
// status page under /ui.
//
// Run serves them on two listeners. The verbs (filter, prioritize, bind,
// preempt) are on HTTP.Listen, in TLS that requires a client certificate
// signed by TLS.ClientCAFile when one is given: bind writes pods/binding for
// any pod, so only kube-scheduler may call it. The operations endpoints
// (/healthz, /readyz, /metrics, /ui, /debug/pods, /debug/pprof/) are on
// HTTP.OpsListen, in plain HTTP, for probes, Prometheus and people; neither
// listener serves the other's routes. The serving certificate and the
// client CA are re-read when their files change (package servingtls, on
// k8s.io/apiserver's dynamiccertificates: a file watch, and a check every
// minute), so a cert-manager renewal or a kubelet Secret update needs no
// restart.
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
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/server/servingtls"
	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/internal/profiling"
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
	// Serving, when set, is asked before every verb: an error refuses it
	// (see gate; the standby of an active-standby pair, extender/app).
	Serving func() error
	// Queue, when set, serves the queue's positions under /debug/queue
	// (extender/queue).
	Queue http.Handler
	// Pods, when set, looks a pod up in the extender's informer (its
	// trimmed copy, see state.PodTransform). Filter and prioritize then
	// decode only the identity of the pod kube-scheduler sends and use the
	// cached copy when it is the same version (UID and resourceVersion);
	// otherwise, and without Pods, the pod in the request is decoded whole.
	Pods func(namespace, name string) (*corev1.Pod, bool)
}

// Server routes the extender's HTTP endpoints.
type Server struct {
	verbs Verbs
	o     Options
	// verbsRouter has the verbs, opsRouter the operations endpoints, all
	// both (Handler).
	verbsRouter, opsRouter, all *httprouter.Router
}

// VerbPaths are the routes of the verbs listener.
var VerbPaths = []string{"/filter", "/prioritize", "/bind", "/preempt"}

// New builds the routes.
func New(verbs Verbs, o Options) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	s := &Server{verbs: verbs, o: o, verbsRouter: httprouter.New(), opsRouter: httprouter.New(), all: httprouter.New()}
	for _, r := range []*httprouter.Router{s.verbsRouter, s.all} {
		s.routeVerbs(r)
	}
	for _, r := range []*httprouter.Router{s.opsRouter, s.all} {
		s.routeOps(r)
	}
	return s
}

func (s *Server) routeVerbs(r *httprouter.Router) {
	r.POST("/filter", s.gate("filter", s.filter))
	r.POST("/prioritize", s.gate("prioritize", s.prioritize))
	r.POST("/bind", s.gate("bind", s.bind))
	r.POST("/preempt", s.gate("preempt", s.preempt))
}

func (s *Server) routeOps(r *httprouter.Router) {
	r.GET("/healthz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		_, _ = w.Write([]byte("ok\n"))
	})
	r.GET("/readyz", s.readyz)
	r.GET("/debug/pods/:namespace/:name", s.debugPod)
	if s.o.Queue != nil {
		r.Handler(http.MethodGet, "/debug/queue", s.o.Queue)
	}
	if s.o.UI != nil {
		for _, p := range ui.Paths() {
			r.Handler(http.MethodGet, p, s.o.UI)
		}
	}
	if s.o.Metrics != nil {
		r.Handler(http.MethodGet, "/metrics", promhttp.HandlerFor(s.o.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	if s.o.Profiling {
		r.Handler(http.MethodGet, "/debug/pprof/*profile", profiling.Handler())
	}
}

// Handler serves every route, verbs and operations endpoints alike (for
// tests and for a single listener, HTTP.OpsListen empty).
func (s *Server) Handler() http.Handler { return s.all }

// VerbsHandler serves only the verbs; OpsHandler only the operations
// endpoints.
func (s *Server) VerbsHandler() http.Handler { return s.verbsRouter }

// OpsHandler serves /healthz, /readyz, /metrics, /ui, /debug/pods and, with
// Options.Profiling, /debug/pprof/.
func (s *Server) OpsHandler() http.Handler { return s.opsRouter }

func (s *Server) ctx(r *http.Request, verb string) context.Context {
	return klog.NewContext(r.Context(), klog.LoggerWithValues(s.o.Logger, "verb", verb))
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
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return s.refused(r, verb, "TooLarge",
			fmt.Errorf("%s: request body is larger than %d bytes (raise --max-body-bytes)", verb, s.o.MaxBodyBytes))
	default:
		return s.badJSON(r, verb, err)
	}
}

// badJSON refuses a request whose body, or the pod in it, does not decode.
func (s *Server) badJSON(r *http.Request, verb string, err error) error {
	return s.refused(r, verb, "BadJSON", fmt.Errorf("%s: request body is not valid extender/v1 JSON: %w", verb, err))
}

// refused counts and logs a request refused before it reached the verb.
func (s *Server) refused(r *http.Request, verb, kind string, err error) error {
	if s.o.Metrics != nil {
		s.o.Metrics.HTTPErrors.WithLabelValues(verb, kind).Inc()
	}
	klog.FromContext(r.Context()).V(2).Info("Bad extender request", "verb", verb, "err", err)
	return err
}

// verbArgs is extenderv1.ExtenderArgs with the pod kept undecoded: most of
// a filter request's bytes are the pod kube-scheduler sends, whole, while
// the informer already holds the parts the extender reads (extenderArgs).
type verbArgs struct {
	Pod       json.RawMessage  `json:"pod"`
	Nodes     *corev1.NodeList `json:"nodes,omitempty"`
	NodeNames *[]string        `json:"nodenames,omitempty"`
}

// podIdentity is what extenderArgs reads of the request's pod before it
// looks the pod up.
type podIdentity struct {
	Metadata struct {
		Namespace       string    `json:"namespace"`
		Name            string    `json:"name"`
		UID             types.UID `json:"uid"`
		ResourceVersion string    `json:"resourceVersion"`
	} `json:"metadata"`
}

// extenderArgs decodes a filter or prioritize request. The pod is the
// informer's copy when Options.Pods holds the same version of it (same UID
// and resourceVersion: the same object, trimmed to what the extender reads,
// which is also what bind reads), else the request's own, decoded whole. A
// body that does not decode is refused as decode refuses it.
func (s *Server) extenderArgs(w http.ResponseWriter, r *http.Request, verb string) (*extenderv1.ExtenderArgs, error) {
	var raw verbArgs
	if err := s.decode(w, r, verb, &raw); err != nil {
		return nil, err
	}
	args := &extenderv1.ExtenderArgs{Nodes: raw.Nodes, NodeNames: raw.NodeNames}
	if len(raw.Pod) == 0 || string(raw.Pod) == "null" {
		return args, nil
	}
	if s.o.Pods != nil {
		var id podIdentity
		if err := json.Unmarshal(raw.Pod, &id); err != nil {
			return nil, s.badJSON(r, verb, err)
		}
		if m := id.Metadata; m.UID != "" && m.ResourceVersion != "" {
			if cached, ok := s.o.Pods(m.Namespace, m.Name); ok && cached.UID == m.UID && cached.ResourceVersion == m.ResourceVersion {
				args.Pod = cached
				return args, nil
			}
		}
	}
	args.Pod = &corev1.Pod{}
	if err := json.Unmarshal(raw.Pod, args.Pod); err != nil {
		return nil, s.badJSON(r, verb, err)
	}
	return args, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) filter(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	defer s.observe("filter", time.Now())
	args, err := s.extenderArgs(w, r, "filter")
	if err != nil {
		writeJSON(w, http.StatusOK, &extenderv1.ExtenderFilterResult{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.verbs.Filter(s.ctx(r, "filter"), args))
}

func (s *Server) prioritize(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	defer s.observe("prioritize", time.Now())
	args, err := s.extenderArgs(w, r, "prioritize")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := s.verbs.Prioritize(s.ctx(r, "prioritize"), args)
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

// TLS configures HTTPS on the verbs listener; empty CertFile means plain
// HTTP.
type TLS struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, requires client certificates signed by it:
	// a connection without one, or with one another CA signed, fails in the
	// TLS handshake, before any request is read.
	ClientCAFile string
}

// HTTP holds the listener settings of Run.
type HTTP struct {
	// Listen is the verbs' address, in TLS when TLS.CertFile is set.
	Listen string
	// OpsListen is the operations endpoints' address, plain HTTP. Empty
	// serves every route on Listen (one listener, as Handler).
	OpsListen       string
	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	ShutdownTimeout time.Duration
	TLS             TLS
	// OpsReady, when set, receives the ops listener's address once it listens.
	OpsReady chan<- net.Addr
}

// listener is one http.Server on its socket.
type listener struct {
	name string
	srv  *http.Server
	ln   net.Listener
	tls  bool
}

// Run serves until ctx ends, then shuts down gracefully (in-flight calls
// finish within ShutdownTimeout). ready, when set, receives the verbs
// listener's address once it listens (and h.OpsReady the ops listener's).
// A failure to read the certificates or to listen is returned at once.
func (s *Server) Run(ctx context.Context, h HTTP, ready chan<- net.Addr) error {
	logger := klog.FromContext(ctx)
	newServer := func(handler http.Handler) *http.Server {
		return &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: h.ReadTimeout,
			ReadTimeout:       h.ReadTimeout,
			WriteTimeout:      h.WriteTimeout,
			IdleTimeout:       2 * time.Minute,
			// Refused handshakes (no or a foreign client certificate) are
			// logged here, in the process's log format.
			ErrorLog: klog.NewStandardLogger("WARNING"), //nolint:logcheck // net/http takes a *log.Logger, not a logr.Logger
			// In-flight calls outlive the shutdown signal; Shutdown bounds them.
			BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		}
	}
	verbs := &listener{name: "verbs", srv: newServer(s.verbsRouter), tls: h.TLS.CertFile != ""}
	if h.OpsListen == "" {
		verbs.srv.Handler = s.all
	}
	if verbs.tls {
		// The certificates are read now (a bad file fails Run) and re-read
		// until ctx ends.
		certs, err := servingtls.Load("rota-extender", servingtls.Files{CertFile: h.TLS.CertFile, KeyFile: h.TLS.KeyFile,
			ClientCAFile: h.TLS.ClientCAFile}, "h2", "http/1.1")
		if err != nil {
			return err
		}
		go certs.Run(ctx)
		// HTTP/2 is offered first: kube-scheduler's extender client
		// multiplexes its calls on one connection, where over HTTP/1.1 it
		// keeps two idle connections and opens (and handshakes) a new one
		// for every concurrent bind beyond them.
		verbs.srv.TLSConfig = certs.TLSConfig()
	}
	ls := []*listener{verbs}
	if h.OpsListen != "" {
		ls = append(ls, &listener{name: "ops", srv: newServer(s.opsRouter)})
	}
	for i, l := range ls {
		addr := h.Listen
		if l.name == "ops" {
			addr = h.OpsListen
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, prev := range ls[:i] {
				prev.ln.Close()
			}
			return fmt.Errorf("listen on %s (%s): %w", addr, l.name, err)
		}
		l.ln = ln
	}
	for _, l := range ls {
		logger.Info("Serving", "listener", l.name, "address", l.ln.Addr().String(), "tls", l.tls,
			"clientCerts", l.tls && h.TLS.ClientCAFile != "")
	}
	if ready != nil {
		ready <- verbs.ln.Addr()
	}
	if h.OpsReady != nil && len(ls) > 1 {
		h.OpsReady <- ls[1].ln.Addr()
	}
	errc := make(chan error, len(ls))
	for _, l := range ls {
		go func() {
			var err error
			if l.tls {
				// The certificate comes from TLSConfig.GetConfigForClient.
				err = l.srv.ServeTLS(l.ln, "", "")
			} else {
				err = l.srv.Serve(l.ln)
			}
			if !errors.Is(err, http.ErrServerClosed) {
				err = fmt.Errorf("serve %s: %w", l.name, err)
			} else {
				err = nil
			}
			errc <- err
		}()
	}
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	logger.Info("Shutting down the HTTP servers")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, l := range ls {
		if err := l.srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown %s: %w", l.name, err))
		}
	}
	if serveErr != nil {
		return errors.Join(append([]error{serveErr}, errs...)...)
	}
	return errors.Join(errs...)
}
