// Command rota-device-plugin advertises a node's GPUs to the kubelet as
// <domain>/gpu and <domain>/gpu-memory, publishes their topology and health
// on the Node, and hands each container the GPUs the Rota extender chose.
//
// Exit codes: 0 clean shutdown (SIGTERM/SIGINT); 1 runtime failure;
// 2 bad flags or configuration (including a memory unit that would overflow
// the kubelet's 4 MiB message); 3 NVIDIA driver or libnvidia-ml not found.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/app"
	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/pkg/version"
)

func main() {
	klog.InitFlags(nil)
	cfg, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "rota-device-plugin:", err)
		os.Exit(app.ExitConfig)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := app.Main(ctx, cfg)
	stop()
	klog.FlushAndExit(klog.ExitFlushTimeout, code)
}

// parseFlags binds the flags to a Config and validates it.
func parseFlags(fs *flag.FlagSet, args []string) (config.Config, error) {
	version.AddFlag(fs, "rota-device-plugin")
	c := config.Default()
	unit := int64(c.MemoryUnitMiB)
	xids := joinXIDs(c.IgnoredXIDs)
	qps := float64(c.APIQPS)
	fs.StringVar(&c.Domain, "domain", c.Domain, "resource and annotation domain")
	fs.StringVar(&c.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig path; empty means in-cluster")
	fs.BoolVar(&c.NoAPI, "no-api", c.NoAPI, "do not talk to the API server (tests only: Allocate then always fails)")
	fs.Float64Var(&qps, "kube-api-qps", qps, "client-go QPS")
	fs.IntVar(&c.APIBurst, "kube-api-burst", c.APIBurst, "client-go burst")
	fs.StringVar(&c.DevicePluginDir, "device-plugin-dir", c.DevicePluginDir, "folder of kubelet.sock and the plugin sockets")
	fs.StringVar(&c.PodResourcesSocket, "pod-resources-socket", c.PodResourcesSocket, "kubelet PodResources API socket; empty disables reconciliation")
	fs.Int64Var(&unit, "memory-unit-mib", unit, "size of one gpu-memory device in MiB")
	fs.StringVar((*string)(&c.Backend), "backend", string(c.Backend), "GPU discovery: nvml, fake or mock")
	fs.StringVar(&c.FakeConfig, "fake-config", c.FakeConfig, "fake backend GPU file (YAML/JSON); faults go in the 'health' file next to it")
	fs.StringVar(&c.MockServer, "mock-server", c.MockServer, "mock backend: dgxa100, dgxh100, dgxh200 or dgxb200")
	fs.StringVar(&xids, "ignored-xids", xids, "comma-separated XIDs that never mark a GPU unhealthy")
	fs.DurationVar(&c.HealthInterval, "health-interval", c.HealthInterval, "period of the GPU health probe")
	fs.DurationVar(&c.RecoveryQuiet, "recovery-quiet", c.RecoveryQuiet, "quiet time before an unhealthy GPU that probes fine is healthy again")
	fs.DurationVar(&c.KubeletPoll, "kubelet-poll", c.KubeletPoll, "period of the kubelet socket check (restart detection)")
	fs.DurationVar(&c.AllocateWait, "allocate-wait", c.AllocateWait, "how long Allocate waits for the pod informer to show the pod")
	fs.Func("dra-gpu-drivers", "comma-separated DRA drivers whose devices are GPUs (default gpu.nvidia.com): while this node has their ResourceSlices, its GPUs are not advertised", func(v string) error {
		ds, err := dra.ParseDrivers(v)
		c.DRAGPUDrivers = ds
		return err
	})
	fs.DurationVar(&c.DRACheck, "dra-check", c.DRACheck, "how often to check whether DRA manages this node's GPUs")
	fs.BoolVar(&c.DRAMode, "dra-mode", false, "publish the GPUs through Dynamic Resource Allocation (ResourceSlices, claims prepared with CDI) instead of the device-plugin API (docs/dra.md)")
	fs.StringVar(&c.DRADriver, "dra-driver", "", "the DRA mode's driver name (default gpu.<domain>)")
	fs.StringVar(&c.CDIDir, "cdi-dir", c.CDIDir, "the DRA mode writes each prepared claim's CDI spec here; the container runtime must read specs from it")
	fs.StringVar(&c.KubeletDir, "kubelet-dir", c.KubeletDir, "the kubelet's --root-dir: the DRA mode registers in its plugins_registry folder")
	fs.StringVar(&c.MetricsListen, "metrics-listen", c.MetricsListen, "Prometheus listen address; empty disables")
	fs.BoolVar(&c.Profiling, "profiling", c.Profiling, "serve Go runtime profiles under /debug/pprof/ on --metrics-listen, beside /metrics (needs --metrics-listen)")
	fs.BoolVar(&c.MPS, "mps", c.MPS, "run a CUDA MPS control daemon for every GPU that holds memory shares (enforces their memory limit)")
	fs.StringVar(&c.MPSBinary, "mps-binary", c.MPSBinary, "nvidia-cuda-mps-control, a path or a name in $PATH")
	fs.StringVar(&c.MPSRoot, "mps-root", c.MPSRoot, "host folder of the MPS daemons' pipe and log folders (mounted at the same path)")
	fs.StringVar(&c.MPSContainerPipeDir, "mps-container-pipe-dir", c.MPSContainerPipeDir, "where share containers see their GPU's MPS pipe folder")
	fs.StringVar(&c.MPSShmDir, "mps-shm-dir", c.MPSShmDir, "host folder mounted at /dev/shm in share containers (and the plugin's); empty mounts none")
	fs.IntVar(&c.MPSActiveThreadPercentage, "mps-active-thread-percentage", c.MPSActiveThreadPercentage, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for shares, 1..100; 0 leaves it unset")
	fs.BoolVar(&c.MPSExclusiveMode, "mps-exclusive-mode", c.MPSExclusiveMode, "set EXCLUSIVE_PROCESS compute mode on a GPU while its MPS daemon runs")
	fs.BoolVar(&c.DeviceNodes, "device-nodes", c.DeviceNodes, "hand /dev/nvidia* device nodes to containers (no NVIDIA runtime needed for them)")
	var driverMounts, cdiKind string
	fs.StringVar(&driverMounts, "driver-mounts", "", "comma-separated host paths mounted read-only at the same path in GPU containers")
	fs.StringVar(&cdiKind, "cdi-kind", "", "name each GPU as the CDI device <kind>=<uuid>, e.g. nvidia.com/gpu; empty disables")
	fs.DurationVar(&c.LeakInterval, "leak-interval", c.LeakInterval, "period of the leaked GPU memory scan (NVML); 0 disables")
	fs.DurationVar(&c.LeakGrace, "leak-grace", c.LeakGrace, "how long a process holds GPU memory without an owning pod before it is a leak")
	fs.BoolVar(&c.HostPID, "host-pid", c.HostPID, "the plugin runs with hostPID: PIDs NVML lists and /proc does not show are leaks")
	fs.StringVar(&c.ProcRoot, "proc-root", c.ProcRoot, "the /proc to read process owners from")
	fs.DurationVar(&c.UsageInterval, "usage-interval", c.UsageInterval, "period of the per-pod GPU utilization sampling (NVML); 0 disables it")
	fs.DurationVar(&c.UsageWindow, "usage-window", c.UsageWindow, "how far back a pod's GPU utilization is averaged")
	fs.BoolVar(&c.PublishUtilization, "publish-utilization", c.PublishUtilization, "write the gpu-utilization annotation on pods (at most once a minute, on a 5-point change)")
	fs.Float64Var(&c.IdleUtilization, "idle-utilization", c.IdleUtilization, "utilization ratio (0..1) under which a pod's GPUs count as unused")
	fs.DurationVar(&c.IdleAfter, "idle-after", c.IdleAfter, "mark pods idle (idle-since annotation, GPUIdle condition) after this long under --idle-utilization; 0 disables")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for m := range strings.SplitSeq(driverMounts, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.DriverMounts = append(c.DriverMounts, m)
		}
	}
	c.CDIKind = cdiKind
	c.MemoryUnitMiB = contract.MiB(unit)
	c.APIQPS = float32(qps)
	var err error
	if c.IgnoredXIDs, err = config.ParseXIDs(xids); err != nil {
		return c, fmt.Errorf("--ignored-xids: %w", err)
	}
	return c, c.Validate()
}

func joinXIDs(x []uint64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ",")
}
