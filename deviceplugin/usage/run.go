package usage

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/metrics"
)

// Loop is one sampling loop: Sampler, metrics, and (optionally) Publisher.
type Loop struct {
	Sampler  *Sampler
	GPUs     []string
	Assigned func() map[string][]handoff.GPUPod // handoff.Matcher.GPUPods
	// Publisher is nil when nothing is written on pods.
	Publisher *Publisher
	Metrics   *metrics.Metrics

	series map[string][]string // pod (namespace/name) -> GPUs with series
	failed map[string]string   // GPU -> last error logged
}

// Run samples every interval until ctx ends.
func (l *Loop) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		l.Once(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Once samples, records and publishes once at now.
func (l *Loop) Once(ctx context.Context, now time.Time) []Pod {
	logger := klog.FromContext(ctx)
	if l.series == nil {
		l.series, l.failed = map[string][]string{}, map[string]string{}
	}
	pods, errs := l.Sampler.Tick(now, l.GPUs, l.Assigned())
	for _, u := range l.GPUs {
		err, bad := errs[u]
		switch {
		case bad && l.failed[u] != err.Error():
			l.failed[u] = err.Error()
			if errors.Is(err, discovery.ErrUtilizationNotSupported) {
				logger.Error(err, "GPU utilization per process is not available; its pods are never marked idle", "gpu", u)
			} else {
				logger.Error(err, "Sampling GPU utilization failed", "gpu", u)
			}
		case !bad && l.failed[u] != "":
			delete(l.failed, u)
			logger.Info("Sampling GPU utilization works again", "gpu", u)
		}
	}
	seen := map[string]bool{}
	for _, p := range pods {
		ns, name, _ := strings.Cut(p.Pod, "/")
		seen[p.Pod] = true
		var gpus []string
		for _, g := range p.GPUs {
			gpus = append(gpus, g.UUID)
		}
		if old, ok := l.series[p.Pod]; ok && !slices.Equal(old, gpus) {
			l.Metrics.ForgetPod(ns, name)
		}
		l.series[p.Pod] = gpus
		for _, g := range p.GPUs {
			l.Metrics.PodGPU(ns, name, g.UUID, g.SM, int64(g.UsedMiB))
		}
	}
	for pod := range l.series {
		if !seen[pod] {
			ns, name, _ := strings.Cut(pod, "/")
			l.Metrics.ForgetPod(ns, name)
			delete(l.series, pod)
		}
	}
	if l.Publisher != nil {
		l.Publisher.Sync(ctx, now, pods)
	}
	return pods
}
