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
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/app"
	"github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/extender/remediation"
	"github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/pkg/placement"
	pkgremediation "github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/version"
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
	logger.Info("Starting rota-extender", "version", version.Version, "revision", version.Revision())
	ctx = klog.NewContext(ctx, logger)
	a, err := app.New(ctx, cfg, rcfg)
	if err == nil {
		err = a.Run(ctx)
	}
	stop()
	if err != nil {
		logger.Error(err, "rota-extender failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// parseFlags binds the flags onto config.Default() and remediation.Default(),
// applies the configuration file (--config) and then the command line, and
// validates the result.
func parseFlags(args []string) (config.Config, remediation.Config, error) {
	cfg := config.Default()
	rcfg := remediation.Default()
	fs := flag.NewFlagSet("rota-extender", flag.ContinueOnError)
	klog.InitFlags(fs)
	version.AddFlag(fs, "rota-extender")
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
	fs.Func("scheduler-names", "comma-separated spec.schedulerName values of the pods bind serves: the scheduler profiles that call this extender (default "+strings.Join(cfg.SchedulerNames, ",")+")", func(v string) error { cfg.SchedulerNames = strings.Split(v, ","); return nil })
	fs.StringVar(&cfg.Domain, "domain", cfg.Domain, "domain of Rota's resources, labels and annotations")
	fs.StringVar(&cfg.RecordsKeyFile, "records-key-file", cfg.RecordsKeyFile, "file with the key (at least 32 bytes) that signs and checks Rota's records on pods; empty: records are not signed, and one changed while no extender ran is believed at start")
	fs.Func("records-signed-since", "RFC 3339 time signing began (the key's creation): pods created before it may carry unsigned records", func(v string) error {
		t, err := time.Parse(time.RFC3339, v)
		cfg.RecordsSignedSince = t
		return err
	})
	fs.Int64Var(&cfg.MemoryUnitMiB, "memory-unit-mib", cfg.MemoryUnitMiB, "size of one <domain>/gpu-memory unit in MiB, as the device plugins and rota-admission use it (quota charges memory shares by it)")
	tiers := fs.String("tier-labels", "", "comma-separated node labels of the topology tiers, narrowest first (default <domain>/leaf,topology.kubernetes.io/zone)")
	fs.StringVar(&cfg.Policy, "policy", cfg.Policy, "scoring policy: "+strings.Join(placement.PolicyNames, ", "))
	fs.StringVar(&cfg.WorkloadFile, "workload-file", "", "YAML or JSON list of pod shapes the fragmentation-aware policy keeps room for (default: a built-in mix)")
	fs.BoolVar(&cfg.FilterBestOnly, "filter-best-only", cfg.FilterBestOnly, "filter passes only the nodes of the best score class")
	fs.DurationVar(&cfg.BindTTL, "bind-ttl", cfg.BindTTL, "how long the GPUs chosen for a pod stay reserved while it binds")
	fs.DurationVar(&cfg.GangTTL, "gang-ttl", cfg.GangTTL, "lifetime of a gang plan's reserved slots (each bind extends it)")
	fs.IntVar(&cfg.MaxPreemptibleGangSize, "max-preemptible-gang-size", cfg.MaxPreemptibleGangSize, "members of larger gangs are never preempted")
	fs.DurationVar(&cfg.DefaultCheckpointInterval, "default-checkpoint-interval", cfg.DefaultCheckpointInterval, "checkpoint interval assumed for a running pod that declares none, when reclaim weighs the work a stop loses (0: such a pod loses its whole run)")
	fs.DurationVar(&cfg.MaxPodMinRuntime, "max-pod-min-runtime", cfg.MaxPodMinRuntime, "the longest minimum runtime a pod's own example.com/min-runtime annotation may ask; its team's minRuntime applies anyway (0: pods cannot ask)")
	fs.Func("dra-gpu-drivers", "comma-separated DRA drivers whose devices are GPUs (default gpu.nvidia.com): nodes with their ResourceSlices take no GPU work from Rota", func(v string) error {
		ds, err := dra.ParseDrivers(v)
		cfg.DRAGPUDrivers = ds
		return err
	})
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
	// Leader election: two replicas, one serving (see extender/app).
	le := &cfg.LeaderElection
	le.PodName, le.PodNamespace = os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if le.PodNamespace != "" {
		le.Namespace = le.PodNamespace
	}
	fs.BoolVar(&le.Enabled, "leader-elect", le.Enabled, "elect a leader on a Lease: only the leader serves the verbs and writes; the other replicas stand by with a warm ledger")
	fs.DurationVar(&le.LeaseDuration, "leader-elect-lease-duration", le.LeaseDuration, "how long the lease lasts after its last renewal (whole seconds); a killed leader is replaced after about this long")
	fs.DurationVar(&le.RenewDeadline, "leader-elect-renew-deadline", le.RenewDeadline, "the leader stops serving when it has not renewed for this long (below the lease duration)")
	fs.DurationVar(&le.RetryPeriod, "leader-elect-retry-period", le.RetryPeriod, "how often the leader renews and a standby tries to acquire")
	fs.StringVar(&le.Namespace, "leader-elect-resource-namespace", le.Namespace, "namespace of the Lease; $POD_NAMESPACE when set")
	fs.StringVar(&le.Name, "leader-elect-resource-name", le.Name, "name of the Lease")
	fs.StringVar(&le.PodName, "pod-name", le.PodName, "this replica's Pod, which carries <domain>/extender-leader while it leads ($POD_NAME when set; empty: no label)")
	fs.StringVar(&le.PodNamespace, "pod-namespace", le.PodNamespace, "namespace of --pod-name; $POD_NAMESPACE when set")
	fs.BoolVar(&cfg.Queue.Enabled, "queue", cfg.Queue.Enabled, "run the queue controller (on the leader): admit pods rota-admission gated, by team quota, fair share and room")
	fs.StringVar(&cfg.Queue.Namespace, "quota-namespace", cfg.Queue.Namespace, "namespace of the quota ConfigMap")
	fs.StringVar(&cfg.Queue.ConfigMap, "quota-config-map", cfg.Queue.ConfigMap, "quota ConfigMap (the one rota-admission reads); empty admits every team without quota")
	fs.StringVar(&cfg.Queue.ConfigMapKey, "quota-config-map-key", cfg.Queue.ConfigMapKey, "key of the quota document in the ConfigMap")
	fs.DurationVar(&cfg.Queue.Interval, "queue-interval", cfg.Queue.Interval, "time between queue admission passes")
	fs.IntVar(&cfg.Queue.AdmitConcurrency, "queue-admit-concurrency", cfg.Queue.AdmitConcurrency, "admitting updates of one pass in flight at once (1: one after the other, in queue order; more admits a backlog faster, in no set order within a pass: each pod's room is already held)")
	fs.DurationVar(&cfg.Queue.HoldTTL, "admission-hold-ttl", cfg.Queue.HoldTTL, "how long room stays held for an admitted pod that has not bound")
	fs.IntVar(&cfg.Queue.NarrowCandidates, "queue-narrow-candidates", cfg.Queue.NarrowCandidates, "narrow an admitted single pod that a controller owns to this many nodes (its held node and the next best), so that kube-scheduler filters only those; one unplaced when its hold lapses is evicted for its controller to recreate (0: never narrow)")
	fs.DurationVar(&cfg.Queue.ConditionInterval, "queue-condition-interval", cfg.Queue.ConditionInterval, "least time between two Queued condition writes on one pod")
	fs.Float64Var(&cfg.Queue.ConditionQPS, "queue-condition-qps", cfg.Queue.ConditionQPS, "Queued condition writes per second, cluster-wide")
	urgent := int(cfg.Queue.UrgentPriority)
	fs.IntVar(&urgent, "urgent-priority", urgent, "queued pods at or above this priority are admitted within quota even without room, so that kube-scheduler preempts for them (0: never)")
	fs.BoolVar(&cfg.Queue.Reclaim, "reclaim", cfg.Queue.Reclaim, "evict borrowed work (Eviction API) for a team below its guarantee whose queued work waits for room")
	rs := &cfg.Queue.Reserve
	fs.BoolVar(&rs.Enabled, "reserve", rs.Enabled, "hold room for queue heads that wait for room where they fit soonest; pods that declare a runtime ending before the expected start backfill it")
	fs.Int64Var(&rs.LargeGPUs, "reserve-large-gpus", rs.LargeGPUs, "a queued job of at least this many GPUs is held for as soon as it waits for room")
	fs.DurationVar(&rs.MaxAge, "reserve-max-age", rs.MaxAge, "a smaller queued job is held for once it has waited this long")
	fs.DurationVar(&rs.MaxHold, "reserve-max-hold", rs.MaxHold, "a hold whose job has not started after this long is released")
	fs.DurationVar(&rs.CoolOff, "reserve-cool-off", rs.CoolOff, "after a released hold, the job is not held for again for this long")
	fs.IntVar(&rs.Max, "reserve-max", rs.Max, "most holds at once")
	fs.BoolVar(&rs.Quota, "reserve-quota", rs.Quota, "a large or old queue head that waits for its team's quota keeps it: later work of the team is admitted only if its declared runtime ends first")
	fs.DurationVar(&rs.DefaultRuntime, "default-runtime", rs.DefaultRuntime, "estimated runtime of a running pod that declares none, for expected starts (0: such a pod never ends as far as plans go)")
	fs.DurationVar(&cfg.Queue.DeadlineLead, "deadline-lead", cfg.Queue.DeadlineLead, "inside its team and priority, a queued pod whose latest start (its <domain>/deadline less its declared runtime) is at most this far off goes ahead of the others (0: none does)")
	fs.DurationVar(&cfg.Queue.FairShareHalfLife, "fair-share-half-life", cfg.Queue.FairShareHalfLife, "fair share's memory: order teams by current dominant share plus their past share decayed with this half-life, so a team that held the cluster for hours yields (0: current use only)")
	fs.StringVar(&cfg.Queue.HistoryConfigMap, "usage-history-config-map", cfg.Queue.HistoryConfigMap, "ConfigMap in the quota namespace where the leader keeps fair share's usage history")
	df := &cfg.Queue.Defrag
	fs.Float64Var(&df.MaxMovedShare, "defrag-max-moved-share", df.MaxMovedShare, "most pods moved per hour to defragment free GPUs, as a share of running admitted pods (at least one; 0: never move); only for teams whose quota sets defrag, only pods annotated <domain>/movable")
	fs.IntVar(&df.MaxMoves, "defrag-max-moves", df.MaxMoves, "most pods one defragmentation plan moves (1 to 8)")
	fs.DurationVar(&df.HoldFor, "defrag-hold", df.HoldFor, "how long room freed by moves, or by reclaim, stays held for the workload it was freed for")
	fs.String("config", "", "configuration file ("+config.FileAPIVersion+" "+config.FileKind+": the flags by name under 'flags'); flags on the command line override it")
	if path := config.ConfigArg(args); path != "" {
		if err := config.ApplyFile(fs, path); err != nil {
			return cfg, rcfg, err
		}
	}
	if err := fs.Parse(args); err != nil {
		return cfg, rcfg, err
	}
	cfg.Queue.UrgentPriority = int32(min(max(urgent, 0), 1<<31-1))
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
