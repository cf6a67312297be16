package config

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

// Config is everything rota-extender needs to run.
type Config struct {
	// Kubeconfig is the kubeconfig file; empty means in-cluster config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// QPS and Burst bound the extender's API client. Today's extenders die
	// at client-go's default 5 QPS; one bind costs one write, and at 200 QPS
	// a burst of thousands of pods queued binds past the scheduler's
	// httpTimeout (measured in test/load), so the default matches the
	// scheduler's own rate.
	QPS   float32 `json:"qps"`
	Burst int     `json:"burst"`
	// APITimeout bounds each API call made while binding.
	APITimeout time.Duration `json:"apiTimeout"`

	// Listen is the address of the verbs (filter, prioritize, bind,
	// preempt), host:port: the only listener kube-scheduler calls.
	Listen string `json:"listen"`
	// OpsListen is the address of the operations endpoints, host:port:
	// /healthz, /readyz, /metrics, /ui, /debug/pods and /debug/pprof/, in
	// plain HTTP without client certificates (for probes and Prometheus).
	// The default is loopback: /ui and /debug/pods show pod names.
	OpsListen string `json:"opsListen"`
	// TLSCertFile and TLSKeyFile turn on HTTPS on Listen; ClientCAFile
	// additionally requires and verifies client certificates signed by that
	// CA. All three are re-read when the files change (a cert-manager
	// renewal, a kubelet Secret update), without a restart.
	TLSCertFile  string `json:"tlsCertFile,omitempty"`
	TLSKeyFile   string `json:"tlsKeyFile,omitempty"`
	ClientCAFile string `json:"clientCAFile,omitempty"`
	// AllowUnauthenticatedVerbs lets Listen be a non-loopback address
	// without ClientCAFile: anyone who reaches it may then bind any pending
	// pod with the extender's pods/binding grant. Without it, Validate
	// refuses that configuration.
	AllowUnauthenticatedVerbs bool `json:"allowUnauthenticatedVerbs,omitempty"`
	// MaxBodyBytes bounds a request body (5,000 node names plus a pod fit
	// in well under 1 MiB; preemption arguments are larger).
	MaxBodyBytes int64 `json:"maxBodyBytes"`
	// Profiling serves Go runtime profiles under /debug/pprof/.
	Profiling bool `json:"profiling,omitempty"`
	// ReadTimeout and WriteTimeout bound one HTTP exchange.
	ReadTimeout  time.Duration `json:"readTimeout"`
	WriteTimeout time.Duration `json:"writeTimeout"`
	// ShutdownTimeout bounds the graceful shutdown on SIGTERM.
	ShutdownTimeout time.Duration `json:"shutdownTimeout"`

	// SchedulerNames are the spec.schedulerName values of the pods the
	// extender binds: the scheduler profiles that call it (the chart's
	// second scheduler is rota-scheduler; a control-plane scheduler's
	// default profile is default-scheduler). Bind refuses any other pod.
	SchedulerNames []string `json:"schedulerNames"`

	// Domain names the resources, labels and annotations (contract.NewNames).
	Domain string `json:"domain"`
	// MemoryUnitMiB is the size of one gpu-memory unit: the queue and the
	// preempt guard charge memory shares to quota by it, as rota-admission
	// does. It must be the device plugins' and rota-admission's.
	MemoryUnitMiB int64 `json:"memoryUnitMiB"`
	// RecordsKeyFile holds the key (at least 32 bytes) rota-extender signs
	// its records on pods with (assignment, admission record), and checks
	// them by: a record without its signature was written outside Rota and
	// is not believed. Empty: records are neither signed nor checked (a
	// record changed while no extender ran is then believed at its start).
	RecordsKeyFile string `json:"recordsKeyFile,omitempty"`
	// RecordsSignedSince is when signing began (the key's creation): pods
	// created before it may carry unsigned records. Zero: none may.
	RecordsSignedSince time.Time `json:"recordsSignedSince,omitzero"`
	// TierLabels are the node labels of the topology tiers, narrowest first.
	// Empty means topology.DefaultLabels: <domain>/leaf, then the zone label.
	TierLabels []string `json:"tierLabels,omitempty"`
	// Policy scores nodes: binpack, spread, fragmentation-aware or fgd.
	Policy string `json:"policy"`
	// WorkloadFile lists the pod shapes the fragmentation-aware policies
	// keep room for (LoadWorkload); empty means placement.DefaultWorkload.
	WorkloadFile string `json:"workloadFile,omitempty"`
	// FilterBestOnly makes filter pass only the nodes of the best score class
	// (see scheduling.RankScores), so the placement does not depend on how
	// kube-scheduler weighs the extender's priorities against its plugins.
	FilterBestOnly bool `json:"filterBestOnly,omitempty"`

	// BindTTL is how long a bind's reservation lives before it is
	// committed; GangTTL how long a gang plan holds its slots while members
	// bind (each member's bind extends it).
	BindTTL time.Duration `json:"bindTTL"`
	GangTTL time.Duration `json:"gangTTL"`
	// MaxPreemptibleGangSize: members of larger gangs are never evicted.
	MaxPreemptibleGangSize int `json:"maxPreemptibleGangSize"`
	// DefaultCheckpointInterval is the checkpoint interval assumed for a
	// running pod that declares none, for the work a stop loses
	// (pkg/stopcost); MaxPodMinRuntime is the longest minimum runtime a
	// pod's own annotation may ask (its team's applies anyway).
	DefaultCheckpointInterval time.Duration `json:"defaultCheckpointInterval"`
	MaxPodMinRuntime          time.Duration `json:"maxPodMinRuntime"`
	// DRAGPUDrivers are the Dynamic Resource Allocation drivers whose
	// devices are GPUs: a node with their ResourceSlices takes no GPU work
	// from Rota (pkg/dra).
	DRAGPUDrivers []string `json:"draGPUDrivers"`
	// ExpireInterval is how often reservations are expired; CheckInterval
	// how often the ledger's invariants are checked.
	ExpireInterval time.Duration `json:"expireInterval"`
	CheckInterval  time.Duration `json:"checkInterval"`
	// DebugPods bounds how many pods' recent decisions /debug/pods keeps, and
	// DebugTTL for how long.
	DebugPods int           `json:"debugPods"`
	DebugTTL  time.Duration `json:"debugTTL"`

	// LeaderElection makes two replicas an active-standby pair.
	LeaderElection LeaderElection `json:"leaderElection"`
	// Queue configures the queue controller.
	Queue Queue `json:"queue"`
}

// DefaultSchedulerName is the profile of the chart's second scheduler.
const DefaultSchedulerName = "rota-scheduler"

// Default returns the configuration used when no flag is given.
func Default() Config {
	return Config{
		QPS:                       1000,
		Burst:                     2000,
		APITimeout:                10 * time.Second,
		Listen:                    "127.0.0.1:8888",
		OpsListen:                 "127.0.0.1:8889",
		MaxBodyBytes:              16 << 20,
		ReadTimeout:               30 * time.Second,
		WriteTimeout:              30 * time.Second,
		ShutdownTimeout:           10 * time.Second,
		SchedulerNames:            []string{DefaultSchedulerName},
		Domain:                    contract.DefaultDomain,
		MemoryUnitMiB:             int64(contract.DefaultMemoryUnitMiB),
		Policy:                    placement.DefaultPolicyName,
		BindTTL:                   30 * time.Second,
		GangTTL:                   2 * time.Minute,
		MaxPreemptibleGangSize:    8,
		DefaultCheckpointInterval: 30 * time.Minute,
		DRAGPUDrivers:             []string{"gpu.nvidia.com"},
		ExpireInterval:            time.Second,
		CheckInterval:             30 * time.Second,
		DebugPods:                 10000,
		DebugTTL:                  30 * time.Minute,
		LeaderElection:            DefaultLeaderElection(),
		Queue:                     DefaultQueue(),
	}
}

// Loopback reports whether the host of addr (host:port) is a loopback
// address or localhost, so only processes on the same host reach it. An
// empty host ("":8888) means every interface: not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Names returns the wire names of c.Domain.
func (c Config) Names() (contract.Names, error) { return contract.NewNames(c.Domain) }

// Tiers returns the topology tier labels: TierLabels, or the defaults for names.
func (c Config) Tiers(names contract.Names) topology.Labels {
	if len(c.TierLabels) == 0 {
		return topology.DefaultLabels(names)
	}
	return topology.Labels{Tiers: slices.Clone(c.TierLabels), Pool: topology.PoolLabel(names)}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.QPS <= 0 {
		add("qps: %v is not positive", c.QPS)
	}
	if c.Burst < 1 {
		add("burst: %d is less than 1", c.Burst)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen: %q is not host:port: %w", c.Listen, err)
	} else if c.ClientCAFile == "" && !c.AllowUnauthenticatedVerbs && !Loopback(c.Listen) {
		add("listen: %q is reachable from other hosts, and without client-ca-file anyone who reaches it can bind pods; "+
			"set tls-cert-file, tls-key-file and client-ca-file (kube-scheduler's client certificate CA), "+
			"or allow-unauthenticated-verbs to accept that", c.Listen)
	}
	if _, _, err := net.SplitHostPort(c.OpsListen); err != nil {
		add("ops-listen: %q is not host:port: %w", c.OpsListen, err)
	} else if c.OpsListen == c.Listen {
		add("ops-listen: %q is also listen; the operations endpoints need their own port", c.OpsListen)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		add("tls-cert-file and tls-key-file: set both or neither")
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		add("client-ca-file: needs tls-cert-file and tls-key-file (client certificates need HTTPS)")
	}
	if c.MaxBodyBytes < 1<<10 {
		add("max-body-bytes: %d is below 1 KiB", c.MaxBodyBytes)
	}
	if _, err := contract.NewNames(c.Domain); err != nil {
		add("domain: %w", err)
	}
	if c.MemoryUnitMiB <= 0 {
		add("memory-unit-mib: %d must be positive (1024: one unit is 1 GiB)", c.MemoryUnitMiB)
	}
	if len(c.SchedulerNames) == 0 {
		add("scheduler-names: is empty; name the scheduler profiles whose pods the extender binds")
	}
	for i, n := range c.SchedulerNames {
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			add("scheduler-names[%d]: %q is not a scheduler name: %s", i, n, strings.Join(msgs, "; "))
		}
		if slices.Index(c.SchedulerNames, n) != i {
			add("scheduler-names[%d]: %q is listed twice", i, n)
		}
	}
	for i, l := range c.TierLabels {
		if l == "" {
			add("tier-labels[%d]: is empty", i)
		}
		if slices.Index(c.TierLabels, l) != i {
			add("tier-labels[%d]: %q is listed twice", i, l)
		}
	}
	if !slices.Contains(placement.PolicyNames, c.Policy) {
		add("policy: %q is unknown; use one of %v", c.Policy, placement.PolicyNames)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"api-timeout", c.APITimeout}, {"read-timeout", c.ReadTimeout}, {"write-timeout", c.WriteTimeout},
		{"shutdown-timeout", c.ShutdownTimeout}, {"bind-ttl", c.BindTTL}, {"gang-ttl", c.GangTTL},
		{"expire-interval", c.ExpireInterval}, {"check-interval", c.CheckInterval}, {"debug-ttl", c.DebugTTL},
	} {
		if d.v <= 0 {
			add("%s: %v is not positive", d.name, d.v)
		}
	}
	if c.BindTTL > 0 && c.APITimeout > 0 && c.BindTTL < 2*c.APITimeout {
		add("bind-ttl: %v is shorter than two API calls (2 x api-timeout %v); a bind could outlive its reservation",
			c.BindTTL, c.APITimeout)
	}
	if c.MaxPreemptibleGangSize < 0 {
		add("max-preemptible-gang-size: %d is negative", c.MaxPreemptibleGangSize)
	}
	if c.DefaultCheckpointInterval < 0 {
		add("default-checkpoint-interval: %v is negative", c.DefaultCheckpointInterval)
	}
	if _, err := dra.ParseDrivers(strings.Join(c.DRAGPUDrivers, ",")); err != nil {
		add("dra-gpu-drivers: %w", err)
	}
	if c.MaxPodMinRuntime < 0 {
		add("max-pod-min-runtime: %v is negative", c.MaxPodMinRuntime)
	}
	if c.DebugPods < 0 {
		add("debug-pods: %d is negative", c.DebugPods)
	}
	errs = append(errs, c.LeaderElection.validate()...)
	errs = append(errs, c.Queue.validate()...)
	return errors.Join(errs...)
}
