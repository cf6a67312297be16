// Package config holds the device plugin's configuration: one Config value,
// filled from flags in main, defaulted by Default and checked by Validate.
// It imports no CLI framework and no logger.
package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/dra"
)

// Backend names the GPU discovery backend.
type Backend string

const (
	// BackendNVML reads the node's GPUs through libnvidia-ml (dlopen).
	BackendNVML Backend = "nvml"
	// BackendFake reads a small YAML/JSON file describing simulated GPUs.
	BackendFake Backend = "fake"
	// BackendMock serves one of go-nvml's mock DGX servers (tests, demos).
	BackendMock Backend = "mock"
)

// DefaultIgnoredXIDs are application-caused XIDs that do not mark a GPU
// unhealthy: 13 (graphics engine exception), 31 (MMU fault), 43 (GPU stopped
// processing), 45 (preemptive cleanup), 68 (video processor exception),
// 109 (context switch timeout).
var DefaultIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// Config is the whole configuration of rota-device-plugin.
type Config struct {
	// Domain is the resource and annotation domain (contract.NewNames).
	Domain string `json:"domain"`
	// NodeName is the Node this plugin runs on (required).
	NodeName string `json:"nodeName"`
	// Kubeconfig is the kubeconfig path; empty means in-cluster.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// NoAPI skips every API server call: no topology annotation, no pod
	// informer (Allocate then fails for want of assignments). Unit tests only.
	NoAPI bool `json:"noAPI,omitempty"`
	// APIQPS and APIBurst bound the client-go rate limiter.
	APIQPS   float32 `json:"apiQPS"`
	APIBurst int     `json:"apiBurst"`

	// DevicePluginDir holds kubelet.sock and the plugin's own sockets.
	DevicePluginDir string `json:"devicePluginDir"`
	// PodResourcesSocket is the kubelet PodResources API socket; empty or
	// missing disables reconciliation.
	PodResourcesSocket string `json:"podResourcesSocket,omitempty"`
	// MemoryUnitMiB is the size of one gpu-memory device.
	MemoryUnitMiB contract.MiB `json:"memoryUnitMiB"`

	// Backend selects discovery; FakeConfig is the fake backend's file and
	// MockServer the go-nvml mock server (dgxa100, dgxh100, dgxh200, dgxb200).
	Backend    Backend `json:"backend"`
	FakeConfig string  `json:"fakeConfig,omitempty"`
	MockServer string  `json:"mockServer,omitempty"`

	// IgnoredXIDs never mark a GPU unhealthy.
	IgnoredXIDs []uint64 `json:"ignoredXIDs"`
	// HealthInterval is the period of the health re-check.
	HealthInterval time.Duration `json:"healthInterval"`
	// RecoveryQuiet is how long an unhealthy GPU must stay quiet (no new
	// event) and pass a probe before it is healthy again.
	RecoveryQuiet time.Duration `json:"recoveryQuiet"`
	// KubeletPoll is the period of the kubelet socket check.
	KubeletPoll time.Duration `json:"kubeletPoll"`
	// AllocateWait bounds how long Allocate waits for the pod informer to
	// show a matching pod (the kubelet can see a binding before we do).
	AllocateWait time.Duration `json:"allocateWait"`

	// DRAGPUDrivers are the Dynamic Resource Allocation drivers whose
	// devices are GPUs; DRACheck is how often the plugin checks whether
	// DRA manages this node's GPUs (pkg/dra), and while it does, the plugin
	// does not advertise them to the kubelet.
	DRAGPUDrivers []string      `json:"draGPUDrivers"`
	DRACheck      time.Duration `json:"draCheck"`

	// DRAMode publishes the GPUs through Dynamic Resource Allocation
	// instead of the device-plugin API (deviceplugin/dra, docs/dra.md): a
	// kubelet plugin named DRADriver publishes the node's ResourceSlice and
	// prepares claims, writing their CDI specs into CDIDir; KubeletDir is
	// the kubelet's --root-dir (its plugins_registry and plugins folders).
	DRAMode    bool   `json:"draMode,omitempty"`
	DRADriver  string `json:"draDriver,omitempty"`
	CDIDir     string `json:"cdiDir,omitempty"`
	KubeletDir string `json:"kubeletDir,omitempty"`

	// MetricsListen is the Prometheus listen address; empty disables it.
	MetricsListen string `json:"metricsListen,omitempty"`
	// Profiling serves Go runtime profiles under /debug/pprof/ on
	// MetricsListen, beside /metrics; it needs MetricsListen.
	Profiling bool `json:"profiling,omitempty"`

	// MPS runs a CUDA MPS control daemon for every GPU that holds memory
	// shares (deviceplugin/mps); off, shares get the environment only.
	MPS bool `json:"mps,omitempty"`
	// MPSBinary is nvidia-cuda-mps-control (path or name in $PATH).
	MPSBinary string `json:"mpsBinary,omitempty"`
	// MPSRoot is the host folder of the daemons' pipe and log folders; the
	// plugin must see it at the same path.
	MPSRoot string `json:"mpsRoot,omitempty"`
	// MPSContainerPipeDir is where share containers see the pipe folder.
	MPSContainerPipeDir string `json:"mpsContainerPipeDir,omitempty"`
	// MPSShmDir is a host folder mounted at /dev/shm in share containers
	// (and in the plugin's container); empty mounts nothing.
	MPSShmDir string `json:"mpsShmDir,omitempty"`
	// MPSActiveThreadPercentage (1..100) caps each share's SMs; 0 leaves it.
	MPSActiveThreadPercentage int `json:"mpsActiveThreadPercentage,omitempty"`
	// MPSExclusiveMode sets a GPU's compute mode to EXCLUSIVE_PROCESS while
	// its daemon runs (NVML, root), so processes that bypass MPS get no
	// CUDA context; DEFAULT again when the daemon stops.
	MPSExclusiveMode bool `json:"mpsExclusiveMode,omitempty"`

	// DeviceNodes hands /dev/nvidia* as device specs (NVML backend only).
	DeviceNodes bool `json:"deviceNodes,omitempty"`
	// DriverMounts are host paths mounted read-only at the same path.
	DriverMounts []string `json:"driverMounts,omitempty"`
	// CDIKind names GPUs as CDI devices <kind>=<uuid>; empty disables.
	CDIKind string `json:"cdiKind,omitempty"`

	// LeakInterval is the period of the leaked-memory scan (NVML backends);
	// 0 disables it.
	LeakInterval time.Duration `json:"leakInterval,omitempty"`
	// LeakGrace is how long a process must hold memory without an owning
	// assigned pod before it counts as leaked.
	LeakGrace time.Duration `json:"leakGrace,omitempty"`
	// HostPID says the plugin runs in the host's PID namespace (hostPID):
	// PIDs NVML lists that /proc does not show are then leaks.
	HostPID bool `json:"hostPID,omitempty"`
	// ProcRoot is the /proc to read process owners from.
	ProcRoot string `json:"procRoot,omitempty"`

	// UsageInterval is the period of the per-pod GPU utilization sampling
	// (NVML backends; deviceplugin/usage); 0 disables it, and with it the
	// pod utilization metric, annotation and idle marks.
	UsageInterval time.Duration `json:"usageInterval,omitempty"`
	// UsageWindow is how far back a pod's utilization is averaged.
	UsageWindow time.Duration `json:"usageWindow,omitempty"`
	// PublishUtilization writes the gpu-utilization annotation on pods (at
	// most once a minute per pod, on a change of 5 points or more).
	PublishUtilization bool `json:"publishUtilization,omitempty"`
	// IdleUtilization is the utilization ratio (0..1) under which a pod's
	// GPUs count as unused.
	IdleUtilization float64 `json:"idleUtilization,omitempty"`
	// IdleAfter is how long a pod must stay under IdleUtilization on all its
	// GPUs before it is marked idle (idle-since annotation, GPUIdle
	// condition); 0 disables idle marks.
	IdleAfter time.Duration `json:"idleAfter,omitempty"`
}

// Default returns the defaults for every field but NodeName.
func Default() Config {
	return Config{
		Domain:              contract.DefaultDomain,
		APIQPS:              20,
		APIBurst:            40,
		DevicePluginDir:     "/var/lib/kubelet/device-plugins/",
		PodResourcesSocket:  "/var/lib/kubelet/pod-resources/kubelet.sock",
		MemoryUnitMiB:       contract.DefaultMemoryUnitMiB,
		Backend:             BackendNVML,
		IgnoredXIDs:         slices.Clone(DefaultIgnoredXIDs),
		HealthInterval:      5 * time.Second,
		RecoveryQuiet:       5 * time.Minute,
		KubeletPoll:         500 * time.Millisecond,
		AllocateWait:        5 * time.Second,
		DRAGPUDrivers:       []string{"gpu.nvidia.com"},
		DRACheck:            30 * time.Second,
		CDIDir:              "/var/run/cdi",
		KubeletDir:          "/var/lib/kubelet",
		MetricsListen:       "127.0.0.1:9400",
		MPSBinary:           "nvidia-cuda-mps-control",
		MPSRoot:             "/run/rota/mps",
		MPSContainerPipeDir: "/run/nvidia-mps",
		LeakInterval:        30 * time.Second,
		LeakGrace:           2 * time.Minute,
		ProcRoot:            "/proc",
		UsageInterval:       10 * time.Second,
		UsageWindow:         time.Minute,
		IdleUtilization:     0.05,
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if _, err := contract.NewNames(c.Domain); err != nil {
		errs = append(errs, err)
	}
	if c.NodeName == "" {
		add("node-name", "is empty; pass --node-name=$(NODE_NAME) from the downward API")
	}
	if c.DevicePluginDir == "" || !filepath.IsAbs(c.DevicePluginDir) {
		add("device-plugin-dir", "%q is not an absolute path", c.DevicePluginDir)
	}
	if c.MemoryUnitMiB <= 0 {
		add("memory-unit-mib", "%d is not positive; 1024 (1 GiB) is the default", c.MemoryUnitMiB)
	}
	switch c.Backend {
	case BackendNVML:
	case BackendFake:
		if c.FakeConfig == "" {
			add("fake-config", "is empty; the fake backend needs a GPU description file")
		}
	case BackendMock:
		if !slices.Contains([]string{"dgxa100", "dgxh100", "dgxh200", "dgxb200"}, c.MockServer) {
			add("mock-server", "%q is not one of dgxa100, dgxh100, dgxh200, dgxb200", c.MockServer)
		}
	default:
		add("backend", "%q is not one of nvml, fake, mock", c.Backend)
	}
	for name, d := range map[string]time.Duration{
		"health-interval": c.HealthInterval, "kubelet-poll": c.KubeletPoll, "allocate-wait": c.AllocateWait,
		"dra-check": c.DRACheck,
	} {
		if d <= 0 {
			add(name, "%s is not positive", d)
		}
	}
	if _, err := dra.ParseDrivers(strings.Join(c.DRAGPUDrivers, ",")); err != nil {
		add("dra-gpu-drivers", "%v", err)
	}
	if c.DRAMode {
		for name, p := range map[string]string{"cdi-dir": c.CDIDir, "kubelet-dir": c.KubeletDir} {
			if !filepath.IsAbs(p) {
				add(name, "%q is not an absolute path", p)
			}
		}
		if d := c.DRADriverName(); len(validation.IsDNS1123Subdomain(d)) > 0 || !strings.Contains(d, ".") {
			add("dra-driver", "%q is not a DNS subdomain such as gpu.example.com", d)
		}
		if slices.Contains(c.DRAGPUDrivers, c.DRADriverName()) {
			add("dra-driver", "%q is also in dra-gpu-drivers, the drivers whose GPUs the device-plugin mode stays off", c.DRADriverName())
		}
	}
	if c.RecoveryQuiet < 0 {
		add("recovery-quiet", "%s is negative", c.RecoveryQuiet)
	}
	if c.APIQPS <= 0 || c.APIBurst <= 0 {
		add("kube-api-qps/kube-api-burst", "must be positive (got %g/%d)", c.APIQPS, c.APIBurst)
	}
	if c.MPS {
		for name, p := range map[string]string{"mps-root": c.MPSRoot, "mps-container-pipe-dir": c.MPSContainerPipeDir} {
			if !filepath.IsAbs(p) {
				add(name, "%q is not an absolute path", p)
			}
		}
		if c.MPSShmDir != "" && !filepath.IsAbs(c.MPSShmDir) {
			add("mps-shm-dir", "%q is not an absolute path", c.MPSShmDir)
		}
		if c.MPSBinary == "" {
			add("mps-binary", "is empty; nvidia-cuda-mps-control is the default")
		}
	}
	if p := c.MPSActiveThreadPercentage; p < 0 || p > 100 {
		add("mps-active-thread-percentage", "%d is not in 0..100 (0 leaves it unset)", p)
	}
	if (c.MPSExclusiveMode || c.DeviceNodes) && c.Backend != BackendNVML && c.Backend != BackendMock {
		add("mps-exclusive-mode/device-nodes", "need the nvml (or mock) backend, not %q", c.Backend)
	}
	for _, m := range c.DriverMounts {
		if !filepath.IsAbs(m) {
			add("driver-mount", "%q is not an absolute path", m)
		}
	}
	if c.CDIKind != "" && !strings.Contains(c.CDIKind, "/") {
		add("cdi-kind", "%q is not vendor/class, e.g. nvidia.com/gpu", c.CDIKind)
	}
	if c.LeakInterval < 0 || c.LeakGrace < 0 {
		add("leak-interval/leak-grace", "must not be negative (got %s/%s)", c.LeakInterval, c.LeakGrace)
	}
	if c.UsageInterval < 0 || c.UsageWindow < 0 || c.IdleAfter < 0 {
		add("usage-interval/usage-window/idle-after", "must not be negative (got %s/%s/%s)", c.UsageInterval, c.UsageWindow, c.IdleAfter)
	}
	if c.UsageInterval > 0 && c.UsageWindow < c.UsageInterval {
		add("usage-window", "%s is shorter than usage-interval %s", c.UsageWindow, c.UsageInterval)
	}
	if c.IdleUtilization < 0 || c.IdleUtilization > 1 {
		add("idle-utilization", "%g is not a ratio in 0..1 (0.05 is 5%%)", c.IdleUtilization)
	}
	if (c.IdleAfter > 0 || c.PublishUtilization) && c.UsageInterval == 0 {
		add("idle-after/publish-utilization", "need usage-interval > 0")
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			add("metrics-listen", "%q is not host:port", c.MetricsListen)
		}
	}
	if c.Profiling && c.MetricsListen == "" {
		add("profiling", "needs metrics-listen: the profiles are served on its listener")
	}
	return errors.Join(errs...)
}

// DRADriverName is the DRA mode's driver name: DRADriver, or gpu.<domain>.
func (c Config) DRADriverName() string {
	if c.DRADriver != "" {
		return c.DRADriver
	}
	return dra.ModeDriver(c.Domain)
}

// ParseXIDs reads a comma-separated XID list such as "13,31,43".
// An empty string is an empty list.
func ParseXIDs(s string) ([]uint64, error) {
	var out []uint64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("xid %q is not a number: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}
