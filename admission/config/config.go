// Package config holds rota-admission's configuration: the Config the binary
// is started with (flags bind to it in main; flags are the only source), its
// defaults and validation, and the loader of the quota ConfigMap's YAML.
// It does no I/O.
package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// Config is everything rota-admission is started with.
type Config struct {
	// Listen is the HTTPS address (host:port).
	Listen string `json:"listen"`
	// TLSCertFile and TLSKeyFile are the serving certificate; they are
	// re-read when they change on disk.
	TLSCertFile string `json:"tlsCertFile"`
	TLSKeyFile  string `json:"tlsKeyFile"`
	// Kubeconfig is a kubeconfig file; empty means in-cluster.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// KubeQPS and KubeBurst bound requests to the API server.
	KubeQPS   float32 `json:"kubeQPS"`
	KubeBurst int     `json:"kubeBurst"`
	// Namespace holds the quota ConfigMap, and the leader Lease unless
	// LeaseNamespace names another.
	Namespace string `json:"namespace"`
	// ConfigMap names the quota ConfigMap; empty disables quota (every team
	// is unlimited; requests are still validated).
	ConfigMap string `json:"configMap"`
	// ConfigMapKey is the key of the YAML document in the ConfigMap.
	ConfigMapKey string `json:"configMapKey"`
	// Domain is the resource and label domain.
	Domain string `json:"domain"`
	// MemoryUnitMiB is the size of one gpu-memory unit; it must match the
	// device plugins'.
	MemoryUnitMiB int64 `json:"memoryUnitMiB"`
	// InFlightTTL bounds how long an admission is held before the informer
	// shows the pod.
	InFlightTTL time.Duration `json:"inFlightTTL"`
	// LeaderElect makes only the replica holding the Lease admit GPU pods
	// (and report ready); the others fail closed.
	LeaderElect    bool          `json:"leaderElect"`
	LeaseName      string        `json:"leaseName"`
	LeaseNamespace string        `json:"leaseNamespace,omitempty"`
	Identity       string        `json:"identity"`
	LeaseDuration  time.Duration `json:"leaseDuration"`
	RenewDeadline  time.Duration `json:"renewDeadline"`
	RetryPeriod    time.Duration `json:"retryPeriod"`
	// ShutdownTimeout bounds the graceful shutdown of the HTTPS server.
	ShutdownTimeout time.Duration `json:"shutdownTimeout"`
	// Profiling serves Go runtime profiles under /debug/pprof/ on the
	// HTTPS listener, beside /metrics.
	Profiling bool `json:"profiling,omitempty"`
	// SuspendJobs is where top-level GPU Jobs are queued suspended:
	// SuspendJobsLabelled (namespaces labelled <domain>/queueing=suspend)
	// or SuspendJobsAll (every namespace but those labelled
	// <domain>/queueing=gate, off or kueue).
	SuspendJobs string `json:"suspendJobs"`
	// QueueControllers are the users (as the API server authenticates
	// them) that may remove Rota's queue gate from a pod: the queue
	// controller in rota-extender. Empty means the extender's
	// ServiceAccount in Namespace (DefaultQueueController).
	QueueControllers []string `json:"queueControllers,omitempty"`
}

// Where rota-admission queues Jobs suspended (--suspend-jobs).
const (
	SuspendJobsLabelled = "labelled"
	SuspendJobsAll      = "all"
)

// DefaultQueueControllerAccount is the ServiceAccount rota-extender runs as
// in the chart (release "rota").
const DefaultQueueControllerAccount = "rota-extender"

// DefaultQueueController is the user name of the ServiceAccount
// DefaultQueueControllerAccount in namespace.
func DefaultQueueController(namespace string) string {
	return "system:serviceaccount:" + namespace + ":" + DefaultQueueControllerAccount
}

// QueueControllerUsers returns QueueControllers, or the default.
func (c Config) QueueControllerUsers() []string {
	if len(c.QueueControllers) == 0 {
		return []string{DefaultQueueController(c.Namespace)}
	}
	return c.QueueControllers
}

// ParseUsers reads a comma-separated list of user names (spaces around
// names are dropped; "" is an empty list).
func ParseUsers(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Listen:          "127.0.0.1:8443",
		KubeQPS:         50,
		KubeBurst:       100,
		Namespace:       "rota-system",
		ConfigMap:       "rota-quota",
		ConfigMapKey:    "quota.yaml",
		Domain:          contract.DefaultDomain,
		MemoryUnitMiB:   int64(contract.DefaultMemoryUnitMiB),
		InFlightTTL:     30 * time.Second,
		SuspendJobs:     SuspendJobsLabelled,
		LeaderElect:     true,
		LeaseName:       "rota-admission",
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ShutdownTimeout: 10 * time.Second,
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(flag string, v any, why string) {
		errs = append(errs, fmt.Errorf("--%s=%v: %s", flag, v, why))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", c.Listen, "want host:port")
	}
	if c.TLSCertFile == "" || c.TLSKeyFile == "" {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file are required: the API server calls webhooks over HTTPS only"))
	}
	if _, err := contract.NewNames(c.Domain); err != nil {
		bad("domain", c.Domain, err.Error())
	}
	if c.Namespace == "" {
		bad("quota-namespace", c.Namespace, "is empty")
	}
	if c.ConfigMap != "" && c.ConfigMapKey == "" {
		bad("quota-config-map-key", c.ConfigMapKey, "is empty")
	}
	if c.MemoryUnitMiB <= 0 {
		bad("memory-unit-mib", c.MemoryUnitMiB, "must be positive")
	}
	if c.InFlightTTL <= 0 {
		bad("in-flight-ttl", c.InFlightTTL, "must be positive")
	}
	if c.SuspendJobs != SuspendJobsLabelled && c.SuspendJobs != SuspendJobsAll {
		bad("suspend-jobs", c.SuspendJobs, "want "+SuspendJobsLabelled+" or "+SuspendJobsAll)
	}
	if c.KubeQPS <= 0 || c.KubeBurst <= 0 {
		bad("kube-api-qps/--kube-api-burst", fmt.Sprint(c.KubeQPS, "/", c.KubeBurst), "must be positive")
	}
	if c.LeaderElect {
		if c.LeaseName == "" {
			bad("leader-elect-resource-name", c.LeaseName, "is empty")
		}
		if c.Identity == "" {
			bad("identity", c.Identity, "is empty")
		}
		if !(c.RetryPeriod > 0 && c.RetryPeriod < c.RenewDeadline && c.RenewDeadline < c.LeaseDuration) {
			errs = append(errs, fmt.Errorf("want 0 < --leader-elect-retry-period (%v) < --leader-elect-renew-deadline (%v) < --leader-elect-lease-duration (%v)",
				c.RetryPeriod, c.RenewDeadline, c.LeaseDuration))
		}
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown-timeout", c.ShutdownTimeout, "must be positive")
	}
	for _, u := range c.QueueControllers {
		if u == "" || strings.ContainsAny(u, " \t\n,") {
			bad("queue-controller-users", strings.Join(c.QueueControllers, ","),
				"want user names separated by commas, e.g. "+DefaultQueueController("rota-system"))
			break
		}
	}
	return errors.Join(errs...)
}

// ParseQuota reads the quota document from the ConfigMap (YAML or JSON).
// Duplicate keys, unknown fields and invalid values are errors; see
// quota.Config for the format.
func ParseQuota(data []byte) (quota.Config, error) { return quota.ParseYAML(data) }

// LeaseNS is the leader Lease's namespace: LeaseNamespace, else Namespace.
func (c Config) LeaseNS() string {
	if c.LeaseNamespace != "" {
		return c.LeaseNamespace
	}
	return c.Namespace
}
