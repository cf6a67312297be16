package usage

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/metrics"
)

// TestLoopMetrics: the per-pod gauges follow the pods, and a pod that
// leaves its GPUs loses its series.
func TestLoopMetrics(t *testing.T) {
	f, s := newFixture(t)
	m := metrics.New()
	assigned := f.assigned
	l := &Loop{Sampler: s, GPUs: f.gpus(), Assigned: func() map[string][]handoff.GPUPod { return assigned }, Metrics: m}
	f.ev.AddUtilization(0, f.sample(100, time.Second, 60))
	l.Once(context.Background(), f.t0.Add(10*time.Second))
	want := map[string]float64{"ns/a " + f.u0: 0.6, "ns/a " + f.u1: 0, "ns/b " + f.u1: 0}
	if diff := cmp.Diff(want, podSeries(t, m)); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
	assigned = map[string][]handoff.GPUPod{f.u1: {{UID: uidB, Pod: "ns/b"}}}
	l.Once(context.Background(), f.t0.Add(20*time.Second))
	want = map[string]float64{"ns/b " + f.u1: 0}
	if diff := cmp.Diff(want, podSeries(t, m)); diff != "" {
		t.Errorf("series after pod a left (-want +got):\n%s", diff)
	}
}

// podSeries reads rota_device_plugin_pod_gpu_utilization_ratio as
// "namespace/pod gpu" -> value.
func podSeries(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "rota_device_plugin_pod_gpu_utilization_ratio" {
			continue
		}
		for _, s := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["namespace"]+"/"+l["pod"]+" "+l["gpu"]] = s.GetGauge().GetValue()
		}
	}
	return out
}
