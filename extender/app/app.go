package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/binder"
	"github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/extender/dra"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/extender/queue"
	"github.com/rota-sched/rota/extender/remediation"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/server"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/pkg/contract"
	pkgdra "github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	pkgremediation "github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/reserve"
	"github.com/rota-sched/rota/pkg/stopcost"
	"github.com/rota-sched/rota/pkg/topology"
)

// LeaderLoop is work that writes to the API server, so it runs on the
// leader only: Run is called when this replica starts serving as the
// leader, with a context that ends when it loses the lease or stops, and
// must return soon after. A replica that leads again later calls it again,
// so it must rebuild what it needs from the API server (its informers stay
// warm meanwhile: start them in New, from the App's factories). Its writes
// go through the fenced client, refused once this replica may no longer
// write.
type LeaderLoop struct {
	Name string
	Run  func(ctx context.Context)
}

// App is rota-extender, wired: informers, the ledger cache, the decision
// layer, remediation, the status page, the HTTP server, and the election.
type App struct {
	cfg    config.Config
	logger klog.Logger
	names  contract.Names
	id     string

	client kubernetes.Interface // fenced: every part's reads and writes
	// Informer factories: nodes, and pods that can still run (a pod that
	// finishes leaves the watch as a delete, which releases its GPUs).
	// Remediation's node Leases are in others. Run starts
	// every informer that was asked for by then.
	nodeFactory, podFactory informers.SharedInformerFactory
	others                  []informers.SharedInformerFactory

	ledger   *ledger.Ledger
	cache    *state.Cache
	metrics  *metrics.Metrics
	extender *scheduling.Extender
	// pools are the node pools of the quota configuration in force.
	pools       *nodepool.Policies
	broadcaster record.EventBroadcaster
	status      *ui.UI
	server      *server.Server
	election    *election

	leaderLoops []LeaderLoop
	queue       *queue.Controller
	quotaSynced cache.InformerSynced
	records     podreq.Records
	// parser is the one parse of pods' requests that the cache, the verbs,
	// the queue, its guard and the status page share.
	parser *podreq.Parser
}

// loadRecords reads the records key (config.Config.RecordsKeyFile).
func loadRecords(cfg config.Config) (podreq.Records, error) {
	if cfg.RecordsKeyFile == "" {
		return podreq.Records{}, nil
	}
	data, err := os.ReadFile(cfg.RecordsKeyFile)
	if err != nil {
		return podreq.Records{}, fmt.Errorf("records key: %w", err)
	}
	key, err := contract.NewRecordKey(bytes.TrimSpace(data))
	if err != nil {
		return podreq.Records{}, fmt.Errorf("records key %s: %w", cfg.RecordsKeyFile, err)
	}
	return podreq.Records{Key: key, Since: cfg.RecordsSignedSince}, nil
}

// New wires rota-extender from its configuration. It talks to the API
// server only to discover the PodGroup CRD; Run starts everything.
func New(ctx context.Context, cfg config.Config, rcfg remediation.Config) (*App, error) {
	if err := errors.Join(cfg.Validate(), rcfg.Validate()); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	logger := klog.FromContext(ctx)
	names, err := cfg.Names()
	if err != nil {
		return nil, err
	}
	tiers := cfg.Tiers(names)
	records, err := loadRecords(cfg)
	if err != nil {
		return nil, err
	}
	if !records.Key.On() {
		logger.Info("WARNING: no --records-key-file: Rota's records on pods are not signed; a record changed while no extender runs is believed at the next start")
	}
	workload, err := config.LoadWorkload(cfg.WorkloadFile)
	if err != nil {
		return nil, err
	}
	policy, err := placement.NewPolicy(cfg.Policy, workload)
	if err != nil {
		return nil, err
	}
	le := cfg.LeaderElection
	id, err := Identity(le.PodName)
	if err != nil {
		return nil, err
	}
	base, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	base.QPS, base.Burst = cfg.QPS, cfg.Burst
	// The identity in the user agent tells the replicas' requests apart in
	// the API server's audit log.
	base.UserAgent = "rota-extender/" + id

	// The election's own client: a hung request must not outlast a renewal
	// (client-go's NewFromKubeconfig uses the same bound).
	elRest := rest.CopyConfig(base)
	elRest.Timeout = max(le.RenewDeadline/2, time.Second)
	elClient, err := kubernetes.NewForConfig(protobuf(elRest))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	a := &App{cfg: cfg, logger: logger, names: names, id: id, ledger: ledger.New(), records: records}
	a.election = newElection(le, id, names, elClient)

	partsRest := rest.CopyConfig(base)
	if le.Enabled {
		partsRest.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &fence{next: rt, until: a.election.deadline} })
	}
	client, err := kubernetes.NewForConfig(protobuf(partsRest))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(partsRest)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(partsRest)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	a.client = client
	logger.V(2).Info("Configuration", "config", cfg, "tiers", tiers.Tiers, "identity", id)

	a.nodeFactory = informers.NewSharedInformerFactory(client, 0)
	a.podFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)
	}))
	pods := a.podFactory.Core().V1().Pods().Informer()

	// The cache comes first: every other part reads it. Its events go to
	// parts built after it through hub, whose fields New fills in below;
	// events only flow once Run starts the informers.
	hub := &events{ctx: ctx, serving: a.serving, names: names}
	a.parser = podreq.NewParser(podreq.Options{Names: names, MemoryUnitMiB: contract.MiB(cfg.MemoryUnitMiB)}, records, 0)
	a.cache, err = state.New(ctx, state.Options{Records: records, Parser: a.parser,
		Names: names, Tiers: tiers, Ledger: a.ledger,
		Nodes: a.nodeFactory.Core().V1().Nodes().Informer(), Pods: pods,
		OnRelease: hub.released, OnPodFailed: hub.podFailed, Adjust: hub.adjust, OnForgedAssignment: hub.forgedAssignment,
		MemoryUnitMiB: contract.MiB(cfg.MemoryUnitMiB), OnNodeProblem: hub.nodeProblem,
		DefaultRuntime: cfg.Queue.Reserve.DefaultRuntime,
	})
	if err != nil {
		return nil, err
	}
	a.addMetrics(hub, workload)
	if err := a.addDRA(ctx, cfg, names, hub); err != nil {
		return nil, err
	}

	b := binder.New(client, names, cfg.APITimeout)
	b.OnConflict = a.metrics.BindConflicts.Inc
	var pg scheduling.PodGroups
	podGroups, err := scheduling.NewDynamicPodGroups(client.Discovery(), dyn, cfg.GangTTL/4)
	switch {
	case err != nil:
		logger.Error(err, "PodGroup discovery failed; pod-group gangs need the gang-size annotation")
	case podGroups == nil:
		logger.Info("PodGroup CRD not served; pod-group gangs need annotation " + names.GangSizeAnnotation)
	default:
		pg = podGroups
	}
	a.broadcaster = record.NewBroadcaster(record.WithContext(ctx))
	recorder := a.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "rota-extender"})
	hub.recorder = recorder

	// With the queue on, the quota configuration is read once, by the queue
	// controller and by the preempt verb's guard alike.
	var quotaFn func() (*quota.Config, bool)
	var guard scheduling.PreemptGuard
	if cfg.Queue.Enabled {
		if quotaFn, err = a.quotaSource(ctx, cfg.Queue); err != nil {
			return nil, err
		}
		guard = queue.NewGuard(queue.GuardOptions{Names: names, Records: records, Parser: a.parser, Pods: pods, Quota: quotaFn, MemoryUnitMiB: contract.MiB(cfg.MemoryUnitMiB),
			StopCost: stopCost(cfg), UrgentPriority: cfg.Queue.UrgentPriority,
			Namespaces: a.nodeFactory.Core().V1().Namespaces().Informer()})
	}
	// Node pools come with the quota configuration: each pool's policy is
	// rebuilt when the ConfigMap changes.
	a.pools = nodepool.New(logger.WithName("nodepool"), quotaFn, policy, workload)
	a.extender, err = scheduling.New(scheduling.Options{Records: records, Parser: a.parser,
		Names: names, SchedulerNames: cfg.SchedulerNames, Tiers: len(tiers.Tiers), Policy: policy, Pools: a.pools, Cache: a.cache, Ledger: a.ledger, Binder: b,
		Recorder: recorder, Metrics: a.metrics, PodGroups: pg, Guard: guard,
		BindTTL: cfg.BindTTL, GangTTL: cfg.GangTTL, MaxPreemptibleGangSize: cfg.MaxPreemptibleGangSize,
		StopCost: stopCost(cfg), UrgentPriority: cfg.Queue.UrgentPriority,
		FilterBestOnly: cfg.FilterBestOnly, DebugPods: cfg.DebugPods, DebugTTL: cfg.DebugTTL, HoldCandidates: cfg.Queue.NarrowCandidates,
	})
	if err != nil {
		return nil, err
	}
	hub.extender = a.extender

	// Remediation shares state's Node and pod informers (the Node
	// transform keeps what it reads of a node) and reads GPU health from
	// the cache's parse of the topology annotation; node Leases have an
	// informer of their own. Its reconcile loop writes (conditions,
	// deletions, taints), so it runs on the leader only.
	if rcfg.Mode != pkgremediation.Off {
		if hub.remediation, err = a.addRemediation(rcfg, pods, recorder); err != nil {
			return nil, err
		}
	}

	// The queue controller admits the pods rota-admission gated; it writes
	// (gates, conditions), so it runs on the leader only.
	if cfg.Queue.Enabled {
		if err := a.addQueue(ctx, cfg, rcfg.MaxCheckpointGrace, names, tiers, pods, meta, dyn, recorder, quotaFn); err != nil {
			return nil, err
		}
	}

	a.addServer(cfg, logger)
	return a, nil
}

// addMetrics registers the extender's metrics, read from the ledger and
// the cache, and whether this replica leads.
func (a *App) addMetrics(hub *events, workload placement.Workload) {
	a.metrics = metrics.New(metrics.Source{
		Snapshot: a.ledger.Snapshot,
		Workload: workload,
		Problems: func() map[string]int64 {
			s := a.cache.Stats()
			return map[string]int64{"invalid_topology": s.InvalidTopology, "invalid_assignment": s.InvalidAssignment,
				"restore_conflict": s.RestoreConflicts, "unaccounted": s.Unaccounted,
				"forged_assignment": s.ForgedAssignment, "memory_unit_mismatch": s.UnitMismatch}
		},
		GangsWaiting: hub.gangsWaiting,
		Pending:      func() (int, time.Duration) { return a.cache.Pending(time.Now()) },
		Pools: func() []nodepool.Pool {
			if a.pools == nil { // set once in New, before anything is served
				return nil
			}
			return a.pools.Pools()
		},
	})
	hub.podFailures = a.metrics.PodFailures
	a.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "rota_extender", Name: "leading",
		Help: "1 while this replica is the leader and serves the verbs, 0 while it is the standby.",
	}, func() float64 {
		if a.serving() {
			return 1
		}
		return 0
	}))
}

// addRemediation builds the remediation controller. It shares state's Node
// and pod informers (the Node transform keeps what it reads of a node) and
// reads GPU health from the cache's parse of the topology annotation; node
// Leases have an informer of their own. Its reconcile loop writes
// (conditions, deletions, taints), so it runs on the leader only.
func (a *App) addRemediation(rcfg remediation.Config, pods cache.SharedIndexInformer, recorder record.EventRecorder) (*remediation.Controller, error) {
	lf := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	c, err := remediation.New(remediation.Options{
		Config: rcfg, Names: a.names, Client: a.client, Recorder: recorder,
		Nodes: a.nodeFactory.Core().V1().Nodes().Informer(), GPUHealth: a.cache.GPUHealth,
		Leases: lf.Coordination().V1().Leases().Informer(),
		Pods:   pods, Metrics: remediation.NewMetrics(a.metrics.Registry),
		Reapply: a.cache.Reapply,
	})
	if err != nil {
		return nil, err
	}
	a.others = append(a.others, lf)
	a.AddLeaderLoop("remediation", c.Run)
	return c, nil
}

// addServer builds /ui, /debug and the verbs' server over the extender.
func (a *App) addServer(cfg config.Config, logger klog.Logger) {
	uo := ui.Options{Names: a.names, Parser: a.parser, Snapshot: a.ledger.Snapshot, Pods: a.podFactory.Core().V1().Pods().Lister(),
		Decisions: a.extender.Decisions, Pools: a.pools}
	if a.queue != nil {
		uo.Queue = func() contract.QueueView { return a.queue.View(a.serving()) } // what /debug/queue serves
	}
	a.status = ui.New(uo)
	so := server.Options{MaxBodyBytes: cfg.MaxBodyBytes, Metrics: a.metrics, Logger: logger, UI: a.status,
		Profiling: cfg.Profiling, Pods: a.cache.Pod}
	if cfg.LeaderElection.Enabled {
		so.Serving = a.election.Serving
	}
	if a.queue != nil {
		so.Queue = a.queue.Handler(a.serving)
	}
	a.server = server.New(a.extender, so)
}

// AddLeaderLoop registers work that runs only while this replica leads
// (see LeaderLoop). Call it before Run.
func (a *App) AddLeaderLoop(name string, run func(ctx context.Context)) {
	a.leaderLoops = append(a.leaderLoops, LeaderLoop{Name: name, Run: run})
}

// Identity is this replica's leader-election identity.
func (a *App) Identity() string { return a.id }

// serving reports whether this replica serves the verbs now.
func (a *App) serving() bool {
	if !a.cfg.LeaderElection.Enabled {
		return true
	}
	return a.election.Serving() == nil
}

// Run serves until ctx ends: the informers, the ledger's upkeep, the status
// page and the HTTP server on every replica; the election, and while this
// replica leads, the takeover and the leader loops. On the way out the HTTP
// server finishes its in-flight calls, the leader loops end, and then the
// lease is released, so the standby takes over within a retry period.
func (a *App) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.client.CoreV1().Events("")})
	defer a.broadcaster.Shutdown()
	factories := append([]informers.SharedInformerFactory{a.nodeFactory, a.podFactory}, a.others...)
	for _, f := range factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if a.cache.WaitReady(ctx) {
			snap := a.ledger.Snapshot()
			logger.Info("Ledger rebuilt; ready", "nodes", snap.Len(), "allocations", len(a.ledger.Allocations()), "stats", a.cache.Stats())
		}
	})
	wg.Go(func() { a.extender.Run(ctx, a.cfg.ExpireInterval, a.cfg.CheckInterval) })
	wg.Go(func() { a.status.Run(ctx) })

	// The election outlives ctx until the HTTP server has finished its
	// in-flight calls: the lease stays renewed, and so valid, meanwhile.
	electCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		a.elect(electCtx)
	}()
	err := a.server.Run(ctx, server.HTTP{Listen: a.cfg.Listen, OpsListen: a.cfg.OpsListen, ReadTimeout: a.cfg.ReadTimeout, WriteTimeout: a.cfg.WriteTimeout,
		ShutdownTimeout: a.cfg.ShutdownTimeout,
		TLS:             server.TLS{CertFile: a.cfg.TLSCertFile, KeyFile: a.cfg.TLSKeyFile, ClientCAFile: a.cfg.ClientCAFile}}, nil)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	stopElection()
	<-elected
	if a.cfg.LeaderElection.Enabled {
		if rerr := a.election.release(context.WithoutCancel(ctx)); rerr != nil {
			logger.Error(rerr, "Releasing the lease failed; the standby takes over when it lapses")
		}
	}
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	logger.Info("Stopped")
	return nil
}

// elect runs the election until ctx ends: round after round, this replica
// waits as the standby, leads while it holds the lease, and steps down.
// With leader election off it leads from the start.
func (a *App) elect(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if !a.cfg.LeaderElection.Enabled {
		go a.labelUntilDone(ctx)
		a.lead(ctx)
		return
	}
	// A label left by this pod's previous run (a restarted container)
	// comes off first: this run starts as the standby.
	a.election.unlabel(ctx)
	for ctx.Err() == nil {
		started := make(chan context.Context, 1)
		le, err := a.election.elector(started)
		if err != nil {
			logger.Error(err, "Leader election cannot run; this replica stays the standby")
			<-ctx.Done()
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			le.Run(ctx)
		}()
		select {
		case term := <-started:
			// term is client-go's context for this term, derived from ctx
			// by the elector (it ends when the lease is lost or ctx ends).
			a.lead(term) //nolint:contextcheck // derived from ctx by leaderelection, see above
			<-done
			a.stepDown(ctx)
		case <-done:
		}
	}
}

// lead is one term: ctx ends when the lease is lost or the replica stops.
//
// Takeover, before the first verb: drop whatever this replica kept from an
// earlier term (scheduling.Extender.Forget), write the leader label on the
// replica's own Pod, and wait until the pod informer has delivered that
// write to the cache (state.Cache.PodsSeen). The label is written after
// the lease was acquired, which client-go allows only once the old
// holder's lease has lapsed on this replica's clock, so after the old
// leader stopped writing (see election); the informer delivers pod events
// in order, so once it delivers the label, the ledger holds every binding
// the old leader wrote. Then the verbs are served, and one member of every
// gang with unbound members is requeued: the gangs the old leader was
// waiting on are planned again from the pods' state
// (scheduling.Extender.RequeueGangs). Outside a pod there is no label to
// wait for; the lease's lapse is then the only wait.
func (a *App) lead(ctx context.Context) {
	logger := klog.FromContext(ctx)
	began := time.Now()
	if a.cfg.LeaderElection.Enabled {
		a.election.setLeading(true)
		// Whatever the order of client-go's callbacks, the term is over
		// once its context ends.
		context.AfterFunc(ctx, func() { a.election.setLeading(false) })
		plans, reservations := a.extender.Forget()
		logger.Info("Acquired the lease; taking over", "identity", a.id, "droppedPlans", plans, "droppedReservations", reservations)
		if !a.takeOver(ctx) {
			return
		}
		a.election.setServing(true)
		gangs := a.extender.RequeueGangs(ctx, "rota-extender leader "+a.id+" took over")
		logger.Info("Leading: serving the verbs", "identity", a.id, "takeover", time.Since(began).Round(time.Millisecond),
			"requeuedGangs", gangs)
	}
	var wg sync.WaitGroup
	for _, l := range a.leaderLoops {
		wg.Go(func() { l.Run(klog.NewContext(ctx, logger.WithValues("loop", l.Name))) })
	}
	wg.Wait()
	<-ctx.Done()
}

// takeOver labels the Pod and waits for the cache to see the label and be
// rebuilt; false when ctx ended first.
func (a *App) takeOver(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	var rv string
	for {
		var err error
		if rv, err = a.election.label(ctx, true); err == nil {
			break
		}
		logger.Error(err, "Not serving until this replica's pod carries the leader label")
		select {
		case <-ctx.Done():
			return false
		case <-time.After(a.cfg.LeaderElection.RetryPeriod):
		}
	}
	if !a.cache.WaitReady(ctx) {
		return false
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	waited := time.Now()
	for rv != "" && !a.cache.PodsSeen(rv) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if time.Since(waited) > 5*time.Second {
			logger.Info("Still waiting for the pod informer to deliver the leader label", "resourceVersion", rv)
			waited = time.Now()
		}
	}
	return true
}

// stepDown runs after a term: the verbs are refused already (the election
// callbacks and the clock see to that); the term's memory-only state goes,
// and so does the label.
func (a *App) stepDown(ctx context.Context) {
	a.election.setLeading(false)
	holder, _ := a.election.status()
	plans, reservations := a.extender.Forget()
	klog.FromContext(ctx).Info("Stopped leading; standby", "identity", a.id, "holder", holder,
		"droppedPlans", plans, "droppedReservations", reservations)
	a.election.unlabel(context.WithoutCancel(ctx))
}

// labelUntilDone writes the leader label with leader election off (the
// only replica leads), retrying until it succeeds or ctx ends.
func (a *App) labelUntilDone(ctx context.Context) {
	for {
		_, err := a.election.label(ctx, true)
		if err == nil {
			return
		}
		klog.FromContext(ctx).Error(err, "The Service routes to the leader label; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// events carries the cache's events to the parts that New builds after the
// cache (the cache comes first because they all read it). New sets every
// field before Run starts the informers, the only source of events, and
// nothing changes them afterwards.
type events struct {
	ctx         context.Context
	serving     func() bool
	extender    *scheduling.Extender
	remediation *remediation.Controller // nil when remediation is off
	dra         *dra.Watch              // nil when the API server does not serve DRA
	podFailures *prometheus.CounterVec
	recorder    record.EventRecorder
	names       contract.Names
}

// nodeProblem puts a Warning event on the node, on the leader.
func (h *events) nodeProblem(node *corev1.Node, reason, message string) {
	if h.recorder == nil || !h.serving() {
		return
	}
	h.recorder.Event(node, corev1.EventTypeWarning, reason, message)
}

// forgedAssignment tells the pod's owner, on the leader, that its
// assignment record is not believed.
func (h *events) forgedAssignment(pod *corev1.Pod, message string) {
	if h.recorder == nil || !h.serving() {
		return
	}
	h.recorder.Event(pod, corev1.EventTypeWarning, contract.ReasonForgedRecord, message)
}

// released: GPUs came free, so gangs waiting for room are requeued.
func (h *events) released(as []ledger.Allocation) { h.extender.Released(as) }

// podFailed counts a failed GPU pod against its node; remediation hears of
// it on the leader only (a quarantine it triggers writes to the node).
func (h *events) podFailed(node string) {
	h.podFailures.WithLabelValues(node).Inc()
	if h.remediation != nil && h.serving() {
		h.remediation.PodFailed(h.ctx, node)
	}
}

// adjust closes a node whose GPUs DRA manages and lets remediation take
// quarantined and recovering GPUs out of placement.
func (h *events) adjust(n *topology.Node) *topology.Node {
	if h.dra != nil {
		if why := h.dra.Why(n.Name, pkgdra.UUIDs(n)); why != "" {
			c := *n
			c.Closed = strings.TrimPrefix(n.Closed+"; "+why, "; ")
			n = &c
		}
	}
	if h.remediation == nil {
		return n
	}
	return h.remediation.Adjust(n)
}

func (h *events) gangsWaiting() int { return h.extender.GangsWaiting() }

// addDRA watches DRA's ResourceSlices and DeviceClasses, where the API
// server serves them, so that nodes whose GPUs DRA manages take no GPU
// work from Rota (extender/dra).
func (a *App) addDRA(ctx context.Context, cfg config.Config, names contract.Names, hub *events) error {
	logger := klog.FromContext(ctx)
	// The API server may be restarting as the extender starts: ask again
	// for half a minute before giving up (the process then exits and is
	// restarted), as the informers ride out such a restart.
	var served bool
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		served, err = dra.Served(a.client.Discovery())
		if err != nil {
			logger.V(2).Info("DRA discovery failed; asking again", "err", err)
		}
		return err == nil, nil
	})
	switch {
	case err != nil:
		return err
	case !served:
		logger.Info("The API server does not serve " + dra.GroupVersion + " ResourceSlices and DeviceClasses; no node is DRA-managed")
		return nil
	}
	hub.dra, err = dra.New(ctx, a.nodeFactory, pkgdra.NewRules(cfg.DRAGPUDrivers, names), func(nodes []string) {
		for _, n := range nodes {
			a.cache.Reapply(n)
		}
	}, func(node string) { hub.extender.NodeOpened(ctx, node) })
	if err != nil {
		return err
	}
	a.cache.AlsoWaitFor(hub.dra.HasSynced)
	logger.Info("Watching DRA ResourceSlices and DeviceClasses", "gpuDrivers", cfg.DRAGPUDrivers)
	return nil
}

// quotaSource returns the quota configuration's reader: the ConfigMap's
// informer when one is named (started with the other informers), else no
// configuration (every team unlimited).
func (a *App) quotaSource(ctx context.Context, q config.Queue) (func() (*quota.Config, bool), error) {
	if q.ConfigMap == "" {
		return func() (*quota.Config, bool) { return nil, true }, nil
	}
	src, err := queue.NewQuotaSource(klog.FromContext(ctx).WithName("quota"), a.client, q.Namespace, q.ConfigMap, q.ConfigMapKey)
	if err != nil {
		return nil, err
	}
	a.others = append(a.others, src.Factory)
	a.quotaSynced = src.Factory.Core().V1().ConfigMaps().Informer().HasSynced
	return src.Current, nil
}

// addQueue builds the queue controller and registers it as a leader loop.
func (a *App) addQueue(ctx context.Context, cfg config.Config, maxGrace time.Duration, names contract.Names, tiers topology.Labels,
	pods cache.SharedIndexInformer, meta metadata.Interface, dyn dynamic.Interface, recorder record.EventRecorder, quotaFn func() (*quota.Config, bool)) error {
	q := cfg.Queue
	// A queued pod's age is its Job's or JobSet's (metadata informers of
	// their own, on the leader only, as the queue). JobSets are read whole:
	// the queue admits those queued suspended.
	owners := queue.NewOwners(meta, a.client.Discovery())
	owners.QueueJobSets(dyn, names)
	a.AddLeaderLoop("queue-owners", owners.Run)
	o := queue.Options{Names: names, Records: a.records, Parser: a.parser, Client: a.client, Pods: pods, Owners: owners, Synced: []cache.InformerSynced{owners.HasSynced},
		Namespaces: a.nodeFactory.Core().V1().Namespaces().Informer(), Holder: a.extender.Room(), Snapshot: a.ledger.Snapshot,
		TierLabels: tiers.Tiers, Recorder: recorder, Metrics: queue.NewMetrics(a.metrics.Registry),
		Interval: q.Interval, AdmitConcurrency: q.AdmitConcurrency, HoldTTL: q.HoldTTL, Narrow: q.NarrowCandidates > 0, ConditionInterval: q.ConditionInterval, ConditionQPS: q.ConditionQPS,
		UrgentPriority: q.UrgentPriority, Reclaim: q.Reclaim, MaxPreemptibleGangSize: cfg.MaxPreemptibleGangSize,
		StopCost: stopCost(cfg), MaxCheckpointGrace: maxGrace,
		Defrag:    queue.Defrag{MaxMovedShare: q.Defrag.MaxMovedShare, MaxMoves: q.Defrag.MaxMoves, HoldFor: q.Defrag.HoldFor},
		Defragger: a.extender.Room(), Reserver: a.extender.Room(),
		DeadlineLead: q.DeadlineLead, FairShareHalfLife: q.FairShareHalfLife, HistoryNamespace: q.Namespace, HistoryConfigMap: q.HistoryConfigMap,
		Quota: quotaFn, MemoryUnitMiB: contract.MiB(cfg.MemoryUnitMiB)}
	o.Jobs, o.Dynamic = a.nodeFactory.Batch().V1().Jobs().Informer(), dyn
	o.PriorityClasses = a.nodeFactory.Scheduling().V1().PriorityClasses().Informer()
	if err := o.Jobs.SetTransform(queue.JobTransform(names)); err != nil {
		return err
	}
	if a.quotaSynced != nil {
		o.Synced = append(o.Synced, a.quotaSynced)
	}
	if r := q.Reserve; r.Enabled {
		o.Reserve = &reserve.Policy{LargeGPUs: r.LargeGPUs, MaxAge: r.MaxAge, MaxHold: r.MaxHold, CoolOff: r.CoolOff, Max: r.Max,
			Tiers: len(tiers.Tiers)}
		o.ReserveQuota = r.Quota
	}
	c, err := queue.New(o)
	if err != nil {
		return err
	}
	a.queue = c
	a.AddLeaderLoop("queue", c.Run)
	return nil
}

// protobuf has a typed client speak protobuf, as kube-scheduler's does: the
// API server encodes each watch event once per encoding its watchers ask
// for, so a JSON watcher of every pod (the extender's informer) would cost
// it a JSON encoding of every pod update. Kinds without protobuf (custom
// resources go through the dynamic and metadata clients) fall back to JSON.
func protobuf(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// stopCost is the cluster's side of what a stop costs (pkg/stopcost); a
// team's minimum runtime comes from the quota where it is read.
func stopCost(cfg config.Config) stopcost.Policy {
	return stopcost.Policy{DefaultInterval: cfg.DefaultCheckpointInterval, MaxPodMinRuntime: cfg.MaxPodMinRuntime}
}
