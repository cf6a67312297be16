package app

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/leak"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/deviceplugin/mps"
	"github.com/rota-sched/rota/deviceplugin/server"
	"github.com/rota-sched/rota/pkg/contract"
)

// nvmlExtras is what the NVML backends (real and mock) offer beyond
// discovery.Backend: process lists, device node numbers, compute mode.
type nvmlExtras interface {
	Processes(uuid string) ([]discovery.Process, error)
	MinorNumber(uuid string) (int, error)
	SetComputeMode(uuid string, exclusive bool) error
}

// containers builds what Allocate hands containers, and the MPS daemons
// (nil when --mps is off).
func containers(cfg config.Config, b discovery.Backend, m *metrics.Metrics) (server.Containers, *mps.Daemons, error) {
	var c server.Containers
	ex, hasExtras := b.(nvmlExtras)
	if cfg.MPS {
		var mode mps.ComputeMode
		if cfg.MPSExclusiveMode {
			if !hasExtras {
				return c, nil, fmt.Errorf("--mps-exclusive-mode needs the nvml backend")
			}
			mode = ex.SetComputeMode
		}
		d, err := mps.New(mps.Config{Binary: cfg.MPSBinary, Root: cfg.MPSRoot, ContainerPipeDir: cfg.MPSContainerPipeDir,
			ShmDir: cfg.MPSShmDir, ActiveThreadPercentage: cfg.MPSActiveThreadPercentage}, mode, m)
		if err != nil {
			return c, nil, err
		}
		c.MPS = d
	}
	if cfg.DeviceNodes {
		if !hasExtras {
			return c, nil, fmt.Errorf("--device-nodes needs the nvml backend")
		}
		c.DeviceNodes, c.Minor = true, map[string]int{}
		for _, g := range b.GPUs() {
			n, err := ex.MinorNumber(g.UUID)
			if err != nil {
				return c, nil, err
			}
			c.Minor[g.UUID] = n
		}
	}
	c.DriverMounts, c.CDIKind = cfg.DriverMounts, cfg.CDIKind
	return c, c.MPS, nil
}

// ensureShareDaemons starts the MPS daemons of the GPUs that hold live
// shares (after a plugin restart their containers are running).
func ensureShareDaemons(ctx context.Context, d *mps.Daemons, matcher *handoff.Matcher) {
	if d == nil || !d.Available() {
		return
	}
	for u, pods := range matcher.GPUPods() {
		for _, p := range pods {
			if !p.Whole {
				if err := d.Ensure(ctx, u); err != nil {
					klog.FromContext(ctx).Error(err, "Starting the MPS daemon of a GPU with live shares", "gpu", u)
				}
				break
			}
		}
	}
}

// runLeaks scans for leaked GPU memory every interval and publishes it in
// the topology document, as metrics, logs and Node events.
func runLeaks(ctx context.Context, cfg config.Config, b discovery.Backend, state *server.State, matcher *handoff.Matcher,
	client kubernetes.Interface, node string, m *metrics.Metrics) {
	ex, ok := b.(nvmlExtras)
	if !ok || cfg.LeakInterval <= 0 {
		return
	}
	logger := klog.FromContext(ctx)
	det := leak.NewDetector(leak.Config{Grace: cfg.LeakGrace, HostPID: cfg.HostPID}, ex.Processes, leak.ProcFS{Root: cfg.ProcRoot}.Owner)
	var uuids []string
	for _, g := range b.GPUs() {
		uuids = append(uuids, g.UUID)
	}
	reported := map[string]string{} // GPU -> summary last reported
	tick := time.NewTicker(cfg.LeakInterval)
	defer tick.Stop()
	for {
		assigned := matcher.GPUPods()
		found, errs := det.Scan(time.Now(), uuids, assigned, matcher.LivePods())
		for _, err := range errs {
			logger.Error(err, "Listing GPU processes failed")
		}
		leaks := map[string]server.Leak{}
		for _, u := range uuids {
			g, ok := found[u]
			if !ok {
				continue
			}
			var floor contract.MiB
			for _, p := range assigned[u] {
				floor += p.MemoryMiB
			}
			leaks[u] = server.Leak{Leaked: g.LeakedMiB, Floor: floor}
			m.Leaked(u, int64(g.LeakedMiB), len(g.Processes))
			sum := g.Summary()
			if sum == reported[u] {
				continue
			}
			reported[u] = sum
			if g.LeakedMiB > 0 {
				logger.Error(nil, "GPU memory held by processes of no pod", "gpu", u, "leakedMiB", int64(g.LeakedMiB), "processes", sum)
				event(ctx, client, node, corev1.EventTypeWarning, "GPUMemoryLeaked",
					fmt.Sprintf("GPU %s: %d MiB held by processes of no pod assigned to it: %s", u, int64(g.LeakedMiB), sum))
			} else {
				logger.Info("Leaked GPU memory freed", "gpu", u)
				event(ctx, client, node, corev1.EventTypeNormal, "GPUMemoryFreed", fmt.Sprintf("GPU %s: leaked memory freed", u))
			}
		}
		state.SetLeaks(leaks)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// event records a Node event (best effort).
func event(ctx context.Context, client kubernetes.Interface, node, typ, reason, msg string) {
	if client == nil {
		return
	}
	if len(msg) > 1024 {
		msg = msg[:1021] + "..."
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: "", APIVersion: "v1"},
		Type:           typ, Reason: reason, Message: msg,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		Source: corev1.EventSource{Component: "rota-device-plugin", Host: node},
	}
	if _, err := client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording a Node event failed", "reason", reason)
	}
}
