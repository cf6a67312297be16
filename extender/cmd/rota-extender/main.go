// Command rota-extender is Rota's kube-scheduler HTTP extender: it keeps
// the GPU ledger from the API server, answers filter, prioritize, bind and
// preempt, and explains every refusal. See extender/config for the flags'
// meaning and config.SchedulerConfig for the scheduler side.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/binder"
	"github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/remediation"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/extender/server"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	pkgremediation "github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/topology"
)

func main() {
	cfg, rcfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	logger := klog.Background().WithName("rota-extender")
	ctx = klog.NewContext(ctx, logger)
	err = run(ctx, cfg, rcfg)
	stop()
	if err != nil {
		logger.Error(err, "rota-extender failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// parseFlags binds the flags onto config.Default() and remediation.Default()
// and validates the result.
func parseFlags(args []string) (config.Config, remediation.Config, error) {
	cfg := config.Default()
	rcfg := remediation.Default()
	fs := flag.NewFlagSet("rota-extender", flag.ContinueOnError)
	klog.InitFlags(fs)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", cfg.Kubeconfig, "kubeconfig file; empty means in-cluster configuration")
	qps := float64(cfg.QPS)
	fs.Float64Var(&qps, "kube-api-qps", qps, "queries per second to the API server")
	fs.IntVar(&cfg.Burst, "kube-api-burst", cfg.Burst, "burst of queries to the API server")
	fs.DurationVar(&cfg.APITimeout, "api-timeout", cfg.APITimeout, "timeout of each API call made while binding")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address of filter, prioritize, bind and preempt (kube-scheduler's calls), host:port")
	fs.StringVar(&cfg.OpsListen, "ops-listen", cfg.OpsListen, "address of /healthz, /readyz, /metrics, /ui and /debug (plain HTTP, no client certificates), host:port")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "serve the verbs over HTTPS with this certificate (re-read when the file changes)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "key of --tls-cert-file")
	fs.StringVar(&cfg.ClientCAFile, "client-ca-file", "", "require client certificates signed by this CA for the verbs (re-read when the file changes)")
	fs.BoolVar(&cfg.AllowUnauthenticatedVerbs, "allow-unauthenticated-verbs", false, "allow a non-loopback --listen without --client-ca-file: anyone who reaches it can bind pods")
	fs.BoolVar(&cfg.Profiling, "profiling", cfg.Profiling, "serve Go runtime profiles under /debug/pprof/")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", cfg.MaxBodyBytes, "largest request body accepted")
	fs.DurationVar(&cfg.ReadTimeout, "read-timeout", cfg.ReadTimeout, "HTTP read timeout")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", cfg.WriteTimeout, "HTTP write timeout")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "grace period for in-flight calls on SIGTERM")
	fs.StringVar(&cfg.Domain, "domain", cfg.Domain, "domain of Rota's resources, labels and annotations")
	tiers := fs.String("tier-labels", "", "comma-separated node labels of the topology tiers, narrowest first (default <domain>/leaf,topology.kubernetes.io/zone)")
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "scoring policy: "+strings.Join(placement.PolicyNames, ", "))
	fs.StringVar(&cfg.WorkloadFile, "workload-file", "", "YAML or JSON list of pod shapes the fragmentation-aware policy keeps room for (default: a built-in mix)")
	fs.BoolVar(&cfg.FilterBestOnly, "filter-best-only", cfg.FilterBestOnly, "filter passes only the nodes of the best score class")
	fs.DurationVar(&cfg.ReservationTTL, "reservation-ttl", cfg.ReservationTTL, "lifetime of a bind's reservation")
	fs.DurationVar(&cfg.GangTTL, "gang-ttl", cfg.GangTTL, "lifetime of a gang plan's reserved slots (each bind extends it)")
	fs.IntVar(&cfg.MaxPreemptibleGangSize, "max-preemptible-gang-size", cfg.MaxPreemptibleGangSize, "members of larger gangs are never preempted")
	fs.DurationVar(&cfg.ExpireInterval, "expire-interval", cfg.ExpireInterval, "how often expired reservations are released")
	fs.DurationVar(&cfg.CheckInterval, "check-interval", cfg.CheckInterval, "how often the ledger invariants are checked")
	fs.IntVar(&cfg.DebugPods, "debug-pods", cfg.DebugPods, "pods whose recent decisions /debug/pods keeps")
	fs.DurationVar(&cfg.DebugTTL, "debug-ttl", cfg.DebugTTL, "how long /debug/pods keeps a pod's decisions")
	// Remediation: off by default because it deletes pods; run dry-run
	// first (see extender/remediation's package doc).
	mode := fs.String("remediation", string(rcfg.Mode), "fault remediation: off, dry-run (report only) or on (mark, delete, quarantine)")
	fs.DurationVar(&rcfg.Interval, "remediation-interval", rcfg.Interval, "how often remediation reconciles")
	fs.DurationVar(&rcfg.HeartbeatTimeout, "node-heartbeat-timeout", rcfg.HeartbeatTimeout, "a node whose Lease is older has stopped reporting")
	fs.DurationVar(&rcfg.GracePeriod, "eviction-grace-period", rcfg.GracePeriod, "grace period of a remediation deletion (pods may ask for more with <domain>/checkpoint-grace)")
	fs.DurationVar(&rcfg.MaxCheckpointGrace, "max-checkpoint-grace", rcfg.MaxCheckpointGrace, "cap on a pod's <domain>/checkpoint-grace")
	fs.Float64Var(&rcfg.EvictionsPerMinute, "evictions-per-minute", rcfg.EvictionsPerMinute, "workloads (pod or whole gang) remediation may delete per minute, cluster-wide")
	fs.IntVar(&rcfg.EvictionBurst, "eviction-burst", rcfg.EvictionBurst, "burst of --evictions-per-minute")
	fs.Float64Var(&rcfg.NodeEvictionsPerMinute, "node-evictions-per-minute", rcfg.NodeEvictionsPerMinute, "workloads remediation may delete per minute for one faulty node")
	fs.IntVar(&rcfg.NodeEvictionBurst, "node-eviction-burst", rcfg.NodeEvictionBurst, "burst of --node-evictions-per-minute")
	fs.IntVar(&rcfg.QuarantineThreshold, "quarantine-threshold", rcfg.QuarantineThreshold, "failures within --quarantine-window that quarantine a GPU or node (0: never)")
	fs.DurationVar(&rcfg.QuarantineWindow, "quarantine-window", rcfg.QuarantineWindow, "window of --quarantine-threshold")
	fs.DurationVar(&rcfg.RecoveryQuiet, "recovery-quiet", rcfg.RecoveryQuiet, "how long a recovered GPU or node stays healthy before it takes new work")
	if err := fs.Parse(args); err != nil {
		return cfg, rcfg, err
	}
	if fs.NArg() > 0 {
		return cfg, rcfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	rcfg.Mode = pkgremediation.Mode(*mode)
	cfg.QPS = float32(qps)
	if *tiers != "" {
		cfg.TierLabels = strings.Split(*tiers, ",")
	}
	if err := errors.Join(cfg.Validate(), rcfg.Validate()); err != nil {
		return cfg, rcfg, fmt.Errorf("invalid flags:\n%w", err)
	}
	return cfg, rcfg, nil
}

// run wires the parts and serves until ctx ends.
func run(ctx context.Context, cfg config.Config, rcfg remediation.Config) error {
	logger := klog.FromContext(ctx)
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	tiers := cfg.Tiers(names)
	workload, err := config.LoadWorkload(cfg.WorkloadFile)
	if err != nil {
		return err
	}
	policy, err := placement.NewPolicy(cfg.Policy, workload)
	if err != nil {
		return err
	}
	rest, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	rest.QPS, rest.Burst = cfg.QPS, cfg.Burst
	rest.UserAgent = "rota-extender"
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rest)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	logger.V(2).Info("Configuration", "config", cfg, "tiers", tiers.Tiers)

	// Informers: nodes, and pods that can still run (a pod that finishes
	// leaves the watch as a delete, which releases its GPUs).
	nodeFactory := informers.NewSharedInformerFactory(client, 0)
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)
	}))
	led := ledger.New()
	var podFailures func(node string)
	var ctl atomic.Pointer[remediation.Controller]
	var ext *scheduling.Extender
	var extMu sync.Mutex
	extender := func() *scheduling.Extender { extMu.Lock(); defer extMu.Unlock(); return ext }
	cache, err := state.New(ctx, state.Options{
		Names: names, Tiers: tiers, Ledger: led,
		Nodes: nodeFactory.Core().V1().Nodes().Informer(), Pods: podFactory.Core().V1().Pods().Informer(),
		OnRelease: func(as []ledger.Allocation) {
			if e := extender(); e != nil {
				e.Released(as)
			}
		},
		OnPodFailed: func(node string) {
			if f := podFailures; f != nil {
				f(node)
			}
			if c := ctl.Load(); c != nil {
				c.PodFailed(ctx, node)
			}
		},
		Adjust: func(n *topology.Node) *topology.Node {
			if c := ctl.Load(); c != nil {
				return c.Adjust(n)
			}
			return n
		},
	})
	if err != nil {
		return err
	}
	m := metrics.New(metrics.Source{
		Snapshot: led.Snapshot,
		Workload: workload,
		Problems: func() map[string]int64 {
			s := cache.Stats()
			return map[string]int64{"invalid_topology": s.InvalidTopology, "invalid_assignment": s.InvalidAssignment,
				"restore_conflict": s.RestoreConflicts, "unaccounted": s.Unaccounted}
		},
		GangsWaiting: func() int {
			if e := extender(); e != nil {
				return e.GangsWaiting()
			}
			return 0
		},
		Pending: func() (int, time.Duration) { return cache.Pending(time.Now()) },
	})
	podFailures = func(node string) { m.PodFailures.WithLabelValues(node).Inc() }
	b := binder.New(client, names, cfg.APITimeout)
	b.OnConflict = m.BindConflicts.Inc
	podGroups, err := scheduling.NewDynamicPodGroups(client.Discovery(), dyn, cfg.GangTTL/4)
	if err != nil {
		logger.Error(err, "PodGroup discovery failed; pod-group gangs need the gang-size annotation")
	}
	var pg scheduling.PodGroups
	if podGroups != nil {
		pg = podGroups
	} else {
		logger.Info("PodGroup CRD not served; pod-group gangs need annotation " + names.GangSizeAnnotation)
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "rota-extender"})

	e, err := scheduling.New(scheduling.Options{
		Names: names, Tiers: len(tiers.Tiers), Policy: policy, Cache: cache, Ledger: led, Binder: b,
		Recorder: recorder, Metrics: m, PodGroups: pg,
		ReservationTTL: cfg.ReservationTTL, GangTTL: cfg.GangTTL, MaxPreemptibleGangSize: cfg.MaxPreemptibleGangSize,
		FilterBestOnly: cfg.FilterBestOnly, DebugPods: cfg.DebugPods, DebugTTL: cfg.DebugTTL,
	})
	if err != nil {
		return err
	}
	extMu.Lock()
	ext = e
	extMu.Unlock()

	// Remediation has informers of its own for full Nodes and node Leases
	// (state's are trimmed to the topology) and shares state's pod informer.
	var remFactories []informers.SharedInformerFactory
	if rcfg.Mode != pkgremediation.Off {
		rnf := informers.NewSharedInformerFactory(client, 0)
		lf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
		c, err := remediation.New(remediation.Options{
			Config: rcfg, Names: names, Client: client, Recorder: recorder,
			Nodes: rnf.Core().V1().Nodes().Informer(), Leases: lf.Coordination().V1().Leases().Informer(),
			Pods: podFactory.Core().V1().Pods().Informer(), Metrics: remediation.NewMetrics(m.Registry),
			Reapply: cache.Reapply,
		})
		if err != nil {
			return err
		}
		ctl.Store(c)
		remFactories = append(remFactories, rnf, lf)
	}

	nodeFactory.Start(ctx.Done())
	podFactory.Start(ctx.Done())
	defer nodeFactory.Shutdown()
	defer podFactory.Shutdown()
	for _, f := range remFactories {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if cache.WaitReady(ctx) {
			snap := led.Snapshot()
			logger.Info("Ledger rebuilt; ready", "nodes", snap.Len(), "allocations", len(led.Allocations()), "stats", cache.Stats())
		}
	})
	wg.Go(func() { e.Run(ctx, cfg.ExpireInterval, cfg.CheckInterval) })
	if c := ctl.Load(); c != nil {
		wg.Go(func() { c.Run(ctx) })
	}
	status := ui.New(ui.Options{Names: names, Snapshot: led.Snapshot, Pods: podFactory.Core().V1().Pods().Lister(),
		Decisions: e.Decisions})
	wg.Go(func() { status.Run(ctx) })
	srv := server.New(e, server.Options{MaxBodyBytes: cfg.MaxBodyBytes, Metrics: m, Logger: logger, UI: status,
		Profiling: cfg.Profiling})
	err = srv.Run(ctx, server.HTTP{Listen: cfg.Listen, OpsListen: cfg.OpsListen, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		ShutdownTimeout: cfg.ShutdownTimeout,
		TLS:             server.TLS{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, ClientCAFile: cfg.ClientCAFile}}, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	wg.Wait()
	logger.Info("Stopped")
	return nil
}
