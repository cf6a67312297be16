package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/internal/profiling"
	"github.com/rota-sched/rota/pkg/version"
)

// Exit codes of rota-device-plugin (Main).
const (
	// ExitOK: a clean shutdown (ctx ended: SIGTERM, SIGINT).
	ExitOK = 0
	// ExitRuntime: a failure while running.
	ExitRuntime = 1
	// ExitConfig: bad flags or configuration (including a memory unit that
	// would overflow the kubelet's 4 MiB message).
	ExitConfig = 2
	// ExitNoDriver: no NVIDIA driver or libnvidia-ml on the node.
	ExitNoDriver = 3
)

// Main is rota-device-plugin from a validated configuration to its exit
// code: it opens the GPU backend, checks the configuration against it,
// builds the API client, serves /metrics and runs the plugin until ctx
// ends.
func Main(ctx context.Context, cfg config.Config) int {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	backend, err := openBackend(cfg)
	if errors.Is(err, discovery.ErrNoDriver) {
		logger.Error(err, "No NVIDIA driver on this node; use --backend=fake or --backend=mock to simulate GPUs")
		return ExitNoDriver
	}
	if err != nil {
		logger.Error(err, "GPU discovery failed")
		return ExitRuntime
	}
	defer backend.Close()
	if _, err := Check(cfg, backend); err != nil {
		logger.Error(err, "Refusing to start")
		return ExitConfig
	}

	var client kubernetes.Interface
	if !cfg.NoAPI {
		rc, err := restConfig(cfg)
		if err != nil {
			logger.Error(err, "Kubernetes client configuration failed")
			return ExitConfig
		}
		rc.QPS, rc.Burst, rc.UserAgent = cfg.APIQPS, cfg.APIBurst, "rota-device-plugin/"+cfg.NodeName
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			logger.Error(err, "Kubernetes client creation failed")
			return ExitConfig
		}
	}

	m := metrics.New()
	if cfg.MetricsListen != "" {
		lis, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			logger.Error(err, "Metrics listener failed", "address", cfg.MetricsListen)
			return ExitRuntime
		}
		srv := &http.Server{Handler: MetricsRoutes(cfg, m), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Metrics server stopped")
			}
		}()
		defer srv.Close()
		logger.Info("Serving metrics", "address", lis.Addr().String(), "profiling", cfg.Profiling)
	}

	logger.Info("Starting rota-device-plugin", "version", version.Version, "backend", cfg.Backend, "domain", cfg.Domain,
		"memoryUnitMiB", int64(cfg.MemoryUnitMiB), "devicePluginDir", cfg.DevicePluginDir, "noAPI", cfg.NoAPI)
	if err := Run(ctx, Deps{Config: cfg, Backend: backend, Client: client, Metrics: m}); err != nil {
		logger.Error(err, "Device plugin failed")
		return ExitRuntime
	}
	logger.Info("Device plugin stopped")
	return ExitOK
}

// MetricsRoutes are the routes of the --metrics-listen listener: /metrics
// and, with cfg.Profiling, Go's runtime profiles under /debug/pprof/.
func MetricsRoutes(cfg config.Config, m *metrics.Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	if cfg.Profiling {
		mux.Handle("GET "+profiling.Prefix, profiling.Handler())
	}
	return mux
}

func openBackend(cfg config.Config) (discovery.Backend, error) {
	switch cfg.Backend {
	case config.BackendFake:
		return discovery.OpenFake(cfg.FakeConfig, cfg.NodeName)
	case config.BackendMock:
		b, _, err := discovery.OpenMock(cfg.MockServer, discovery.MockOptions{})
		return b, err
	default:
		return discovery.OpenNVML()
	}
}

func restConfig(cfg config.Config) (*rest.Config, error) {
	if cfg.Kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
}
