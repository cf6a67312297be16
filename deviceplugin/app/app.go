// Package app wires rota-device-plugin together: discovery backend, health
// tracking, the handoff matcher fed by a pod informer and the kubelet
// PodResources API, the topology publisher, and the kubelet-facing gRPC
// servers. main and the in-process tests call Run.
package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/health"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/deviceplugin/podwatch"
	"github.com/rota-sched/rota/deviceplugin/publish"
	"github.com/rota-sched/rota/deviceplugin/server"
	"github.com/rota-sched/rota/pkg/contract"
)

// Deps are the collaborators Run needs.
type Deps struct {
	Config  config.Config
	Backend discovery.Backend
	// Client is the API client; nil when Config.NoAPI is set.
	Client  kubernetes.Interface
	Metrics *metrics.Metrics
	// ReconcileInterval is the PodResources reconciliation period (default 10 s).
	ReconcileInterval time.Duration
}

// Check validates what can be checked before serving: the names and the
// ListAndWatch message size for the configured memory unit.
func Check(cfg config.Config, b discovery.Backend) (contract.Names, error) {
	names, err := contract.NewNames(cfg.Domain)
	if err != nil {
		return contract.Names{}, err
	}
	if err := server.CheckMessageSize(b.GPUs(), cfg.MemoryUnitMiB); err != nil {
		return contract.Names{}, err
	}
	return names, nil
}

// Run serves until ctx is done. It returns an error when start-up fails.
func Run(ctx context.Context, d Deps) error {
	logger := klog.FromContext(ctx)
	cfg := d.Config
	names, err := Check(cfg, d.Backend)
	if err != nil {
		return err
	}
	gpus := d.Backend.GPUs()
	state := server.NewState(gpus, cfg.MemoryUnitMiB)
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
		logger.Info("GPU", "index", g.Index, "gpu", g.UUID, "model", g.Model, "memoryMiB", int64(g.MemoryMiB),
			"numa", g.NUMA, "island", g.Island, "peers", g.Peers)
	}
	d.Metrics.SetGPUs(len(gpus), 0)
	tracker := health.NewTracker(uuids, cfg.IgnoredXIDs, cfg.RecoveryQuiet)
	matcher := handoff.NewMatcher(cfg.NodeName, names, cfg.MemoryUnitMiB)
	apply := func(c health.Change) {
		if state.Apply(c) {
			logger.Info("GPU health changed", "gpu", c.UUID, "healthy", c.Healthy, "reason", c.Reason)
			d.Metrics.Transition(c.Healthy)
			d.Metrics.SetGPUs(state.Counts())
		}
	}

	conts, daemons, err := containers(cfg, d.Backend, d.Metrics)
	if err != nil {
		return err
	}
	if daemons != nil {
		st := daemons.Status()
		state.SetMPS(&st)
		if !st.Available {
			logger.Error(nil, "MPS is not available: memory shares on this node run without an enforced limit", "reason", st.Reason)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	if daemons != nil {
		wg.Go(func() { daemons.Run(ctx) })
	}

	if !cfg.NoAPI && d.Client == nil {
		return fmt.Errorf("no API client and --no-api not set")
	}
	if cfg.DRAMode {
		if cfg.NoAPI {
			return fmt.Errorf("--dra-mode publishes ResourceSlices and reads claims: it needs the API server, not --no-api")
		}
		publishTopology(ctx, &wg, d, names, state, tracker, apply)
		wg.Go(func() { health.Run(ctx, d.Backend, tracker, cfg.HealthInterval, apply) })
		err := runDRA(ctx, d, state, conts, daemons)
		cancel()
		return err
	}
	if !cfg.NoAPI {
		var watchers []cache.ResourceEventHandler
		usagePub := usagePublisher(cfg, d.Client, names)
		if usagePub != nil {
			watchers = append(watchers, usagePub)
		}
		if err := podwatch.StartPods(ctx, d.Client, cfg.NodeName, matcher, watchers...); err != nil {
			return err
		}
		if sock := cfg.PodResourcesSocket; sock != "" {
			// Tells apart same-shape pods the kubelet admits in one batch.
			matcher.SetPodLister(func(ctx context.Context) ([]handoff.PodDevices, error) { return podwatch.List(ctx, sock) })
			// Reads a pod the kubelet admits before the informer has it.
			matcher.SetPodGetter(func(ctx context.Context, ns, name string) (*corev1.Pod, error) {
				return d.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			})
		}
		ensureShareDaemons(ctx, daemons, matcher)
		wg.Go(func() { runLeaks(ctx, cfg, d.Backend, state, matcher, d.Client, cfg.NodeName, d.Metrics) })
		wg.Go(func() { runUsage(ctx, cfg, d.Backend, matcher, usagePub, d.Metrics) })
		interval := d.ReconcileInterval
		if interval <= 0 {
			interval = 10 * time.Second
		}
		wg.Go(func() { podwatch.Reconcile(ctx, cfg.PodResourcesSocket, interval, matcher, d.Metrics) })
		publishTopology(ctx, &wg, d, names, state, tracker, apply)
	} else {
		logger.Info("Running without the API server: no topology annotation, and Allocate finds no assignments")
	}
	wg.Go(func() { health.Run(ctx, d.Backend, tracker, cfg.HealthInterval, apply) })

	plugins := []*server.Plugin{
		server.NewPlugin(handoff.KindGPU, names.GPU, state, matcher, cfg.AllocateWait, d.Metrics),
		server.NewPlugin(handoff.KindMemory, names.GPUMemory, state, matcher, cfg.AllocateWait, d.Metrics),
	}
	for _, p := range plugins {
		p.SetContainers(conts)
	}
	mgr := server.NewManager(cfg.DevicePluginDir, cfg.KubeletPoll, d.Metrics, plugins...)
	if d.Client != nil {
		err = serveUnlessDRA(ctx, newDRACheck(cfg, d.Client, names, uuids), cfg.DRACheck, mgr.Run)
	} else {
		err = mgr.Run(ctx)
	}
	cancel()
	return err
}

// publishTopology keeps the node's topology annotation up to date, and
// applies the health overrides an operator writes on the Node.
func publishTopology(ctx context.Context, wg *sync.WaitGroup, d Deps, names contract.Names, state *server.State,
	tracker *health.Tracker, apply func(health.Change)) {
	cfg := d.Config
	pub := publish.New(d.Client, cfg.NodeName, names.TopologyAnnotation, d.Metrics)
	wg.Go(func() { pub.Run(ctx, state.Document) })
	wg.Go(func() {
		publish.WatchOverrides(ctx, d.Client, cfg.NodeName, names.GPUHealthAnnotation, func(uuids []string) {
			for _, u := range uuids {
				if c, ok := tracker.Override(u); ok {
					apply(c)
				}
			}
		})
	})
}
