package app

import (
	"context"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/leak"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/deviceplugin/usage"
	"github.com/rota-sched/rota/pkg/contract"
)

// usagePublisher is what the per-pod utilization sampling writes on pods;
// nil when it writes nothing.
func usagePublisher(cfg config.Config, client kubernetes.Interface, names contract.Names) *usage.Publisher {
	if cfg.UsageInterval <= 0 || (!cfg.PublishUtilization && cfg.IdleAfter <= 0) {
		return nil
	}
	return usage.NewPublisher(client, names, usage.PublishConfig{Utilization: cfg.PublishUtilization,
		Idle: cfg.IdleAfter > 0, IdleBelow: cfg.IdleUtilization, IdleAfter: cfg.IdleAfter})
}

// runUsage samples per-pod GPU utilization every --usage-interval (NVML
// backends), as metrics and, with pub, on the pods.
func runUsage(ctx context.Context, cfg config.Config, b discovery.Backend, matcher *handoff.Matcher, pub *usage.Publisher, m *metrics.Metrics) {
	src, ok := b.(usage.Source)
	if cfg.UsageInterval <= 0 {
		return
	}
	if !ok {
		if pub != nil {
			klog.FromContext(ctx).Info("Per-pod GPU utilization needs the nvml backend: no utilization annotation or idle marks", "backend", cfg.Backend)
		}
		return
	}
	var uuids []string
	for _, g := range b.GPUs() {
		uuids = append(uuids, g.UUID)
	}
	s := usage.NewSampler(usage.Config{Window: cfg.UsageWindow, IdleBelow: cfg.IdleUtilization, IdleAfter: cfg.IdleAfter},
		src, leak.ProcFS{Root: cfg.ProcRoot}.Owner)
	loop := &usage.Loop{Sampler: s, GPUs: uuids, Assigned: matcher.GPUPods, Publisher: pub, Metrics: m}
	loop.Run(ctx, cfg.UsageInterval)
}
