package ui

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// Paths the UI answers (GET); the server routes each of them to the UI.
const (
	PathPage   = "/ui"
	PathScript = "/ui/app.js"
	PathStyle  = "/ui/style.css"
	PathState  = "/ui/api/state"
)

// Paths returns every path the UI answers.
func Paths() []string { return []string{PathPage, PathScript, PathStyle, PathState} }

//go:embed assets
var assets embed.FS

// Options configure New. Snapshot and Pods are required.
type Options struct {
	Names contract.Names
	// Parser is the process's one parse of pods' requests (nil: one of
	// its own).
	Parser *podreq.Parser
	// Snapshot returns the ledger's current view.
	Snapshot func() *ledger.Snapshot
	// Pods lists the pods the extender's informer holds.
	Pods corelisters.PodLister
	// Decisions returns a pod's decision log, oldest first (nil: none).
	Decisions func(namespace, name string) []scheduling.Decision
	// Queue returns the queue controller's view, the document /debug/queue
	// serves (nil: the queue controller is off).
	Queue func() contract.QueueView
	// Pools are the node pools of the quota configuration (nil: none).
	Pools *nodepool.Policies
	// Workload measures fragmentation (nil: placement.DefaultWorkload).
	Workload placement.Workload
	// SampleEvery is the fragmentation sampling interval (default 10s) and
	// Keep how many samples are kept (default one hour's worth).
	SampleEvery time.Duration
	Keep        int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// UI serves the status page. It is safe for concurrent use.
type UI struct {
	o     Options
	ring  *ring
	mux   *http.ServeMux
	page  []byte
	js    []byte
	style []byte
}

var _ http.Handler = (*UI)(nil)

// New builds the UI.
func New(o Options) *UI {
	if len(o.Workload) == 0 {
		o.Workload = placement.DefaultWorkload()
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	if o.Keep <= 0 {
		o.Keep = int(time.Hour / o.SampleEvery)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Parser == nil {
		o.Parser = podreq.NewParser(podreq.Options{Names: o.Names}, podreq.Records{}, 0)
	}
	u := &UI{o: o, ring: newRing(o.Keep), mux: http.NewServeMux()}
	// The files are embedded: reading them cannot fail.
	u.page, _ = assets.ReadFile("assets/index.html")
	u.js, _ = assets.ReadFile("assets/app.js")
	u.style, _ = assets.ReadFile("assets/style.css")
	u.mux.HandleFunc("GET "+PathPage, u.file(u.page, "text/html; charset=utf-8"))
	u.mux.HandleFunc("GET "+PathScript, u.file(u.js, "text/javascript; charset=utf-8"))
	u.mux.HandleFunc("GET "+PathStyle, u.file(u.style, "text/css; charset=utf-8"))
	u.mux.HandleFunc("GET "+PathState, u.state)
	return u
}

// ServeHTTP answers the UI's paths.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.mux.ServeHTTP(w, r) }

// Run takes a fragmentation sample now and then every SampleEvery until
// ctx ends.
func (u *UI) Run(ctx context.Context) {
	t := time.NewTicker(u.o.SampleEvery)
	defer t.Stop()
	for {
		u.Sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sample adds one fragmentation sample to the ring.
func (u *UI) Sample() {
	if u.o.Snapshot == nil {
		return
	}
	u.ring.add(sample(u.o.Snapshot(), u.o.Workload, u.o.Now()))
}

// State builds the page's data now.
func (u *UI) State() State {
	now := u.o.Now()
	st := State{Time: now, Nodes: []Node{}, Queue: []Waiting{}, Namespaces: []NamespaceUse{},
		UsageNote: usageNote, SampleEvery: u.o.SampleEvery.String()}
	use := map[string]*NamespaceUse{}
	var snap *ledger.Snapshot
	if u.o.Snapshot != nil {
		snap = u.o.Snapshot()
		st.Nodes, st.Totals, use = nodes(snap)
		st.Fragmentation = append(u.ring.samples(), sample(snap, u.o.Workload, now))
	}
	if u.o.Pods != nil {
		var pods []*corev1.Pod
		if ps, err := u.o.Pods.List(labels.Everything()); err == nil {
			pods = ps
		}
		st.Queue = waiting(pods, u.o.Names, u.o.Parser, u.o.Decisions, now)
	}
	var view *contract.QueueView
	if u.o.Queue != nil {
		v := u.o.Queue()
		view = &v
		st.TeamQueues = teamQueues(v)
		// A queued pod waits for the queue, not for a node: its reason is
		// where it stands in its team's queue.
		at := make(map[string]contract.QueuePosition, len(v.Pods))
		for _, p := range v.Pods {
			at[p.Pod] = p
		}
		for i := range st.Queue {
			if p, ok := at[st.Queue[i].Pod]; ok {
				w := &st.Queue[i]
				w.Reason, w.Verb, w.Outcome, w.ReasonAt = p.Message, "queue", p.Reason, time.Time{}
			}
		}
	}
	if snap != nil {
		st.Pools = pools(snap, u.o.Workload, u.o.Pools, view)
	}
	st.Totals.Waiting = len(st.Queue)
	for _, w := range st.Queue {
		ns, _, _ := strings.Cut(w.Pod, "/")
		nu := use[ns]
		if nu == nil {
			nu = &NamespaceUse{Namespace: ns}
			use[ns] = nu
		}
		nu.Waiting++
	}
	for _, nu := range use {
		nu.GPUs = round2(nu.GPUs)
		st.Namespaces = append(st.Namespaces, *nu)
	}
	slices.SortFunc(st.Namespaces, func(a, b NamespaceUse) int {
		if c := cmp.Compare(b.GPUs, a.GPUs); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace, b.Namespace)
	})
	return st
}

func (u *UI) state(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(u.State())
}

// csp allows only the page's own script, style and state.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'"

func (u *UI) file(body []byte, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	}
}

// Assets returns the embedded files of the page.
func Assets() fs.FS { return assets }
