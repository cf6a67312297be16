// Package metrics defines the device plugin's Prometheus metrics on a
// registry of its own. All methods are safe for concurrent use and do
// nothing on a nil *Metrics.
package metrics

import (
	"github.com/rota-sched/rota/pkg/version"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the plugin's collectors.
type Metrics struct {
	reg           *prometheus.Registry
	gpus          *prometheus.GaugeVec
	transitions   *prometheus.CounterVec
	allocLatency  *prometheus.HistogramVec
	allocFailures *prometheus.CounterVec
	registrations *prometheus.CounterVec
	mismatches    prometheus.Counter
	publishErrors prometheus.Counter
	mpsUp         *prometheus.GaugeVec
	mpsRestarts   *prometheus.CounterVec
	leakedMiB     *prometheus.GaugeVec
	leakedProcs   *prometheus.GaugeVec
	podSM         *prometheus.GaugeVec
	podUsedMiB    *prometheus.GaugeVec
}

// New creates and registers the collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		gpus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rota_device_plugin_gpus", Help: "GPUs on this node by health.",
		}, []string{"health"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_device_plugin_health_transitions_total", Help: "GPU health changes, by the health reached.",
		}, []string{"to"}),
		allocLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rota_device_plugin_allocate_duration_seconds", Help: "Allocate latency, including waiting for the pod informer.",
			Buckets: []float64{0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5},
		}, []string{"resource"}),
		allocFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_device_plugin_allocate_failures_total", Help: "Allocate calls refused, by reason (invalid, no_match, ambiguous, other).",
		}, []string{"resource", "reason"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_device_plugin_registrations_total", Help: "Registrations with the kubelet, by result.",
		}, []string{"resource", "result"}),
		mismatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rota_device_plugin_assignment_mismatches_total",
			Help: "Containers the kubelet PodResources API shows holding devices outside their pod's assignment.",
		}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rota_device_plugin_topology_publish_errors_total", Help: "Failed topology annotation patches.",
		}),
		mpsUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rota_device_plugin_mps_daemon_up",
			Help: "1 while the CUDA MPS control daemon of a GPU that holds memory shares runs, 0 while it is down (being restarted).",
		}, []string{"gpu"}),
		mpsRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_device_plugin_mps_daemon_restarts_total",
			Help: "CUDA MPS control daemons found dead and started again, by GPU.",
		}, []string{"gpu"}),
		leakedMiB: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rota_device_plugin_leaked_memory_mib",
			Help: "GPU memory held past the grace period by processes of no live pod assigned to the GPU, in MiB.",
		}, []string{"gpu"}),
		leakedProcs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rota_device_plugin_leaked_processes",
			Help: "Processes holding GPU memory past the grace period that belong to no live pod assigned to the GPU.",
		}, []string{"gpu"}),
		podSM: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rota_device_plugin_pod_gpu_utilization_ratio",
			Help: "SM utilization (0..1) of a pod's processes on a GPU assigned to it, averaged over the sampling window (NVML per-process samples).",
		}, []string{"namespace", "pod", "gpu"}),
		podUsedMiB: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rota_device_plugin_pod_gpu_memory_used_mib",
			Help: "GPU memory held by a pod's processes on a GPU assigned to it, in MiB.",
		}, []string{"namespace", "pod", "gpu"}),
	}
	bi := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rota_build_info",
		Help: "1, labelled with the binary, its version, VCS revision and Go version."}, version.LabelNames)
	bi.With(version.Labels("rota-device-plugin")).Set(1)
	m.reg.MustRegister(bi)
	m.reg.MustRegister(m.gpus, m.transitions, m.allocLatency, m.allocFailures, m.registrations, m.mismatches,
		m.publishErrors, m.mpsUp, m.mpsRestarts, m.leakedMiB, m.leakedProcs, m.podSM, m.podUsedMiB, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// SetGPUs records the GPU counts by health.
func (m *Metrics) SetGPUs(healthy, unhealthy int) {
	if m == nil {
		return
	}
	m.gpus.WithLabelValues("healthy").Set(float64(healthy))
	m.gpus.WithLabelValues("unhealthy").Set(float64(unhealthy))
}

// Transition counts one health change.
func (m *Metrics) Transition(healthy bool) {
	if m == nil {
		return
	}
	to := "unhealthy"
	if healthy {
		to = "healthy"
	}
	m.transitions.WithLabelValues(to).Inc()
}

// Allocate records one Allocate call; reason is "" on success.
func (m *Metrics) Allocate(resource string, d time.Duration, reason string) {
	if m == nil {
		return
	}
	m.allocLatency.WithLabelValues(resource).Observe(d.Seconds())
	if reason != "" {
		m.allocFailures.WithLabelValues(resource, reason).Inc()
	}
}

// Registration counts one registration attempt.
func (m *Metrics) Registration(resource string, ok bool) {
	if m == nil {
		return
	}
	r := "error"
	if ok {
		r = "ok"
	}
	m.registrations.WithLabelValues(resource, r).Inc()
}

// Mismatch counts containers holding devices outside their assignment.
func (m *Metrics) Mismatch(n int) {
	if m == nil {
		return
	}
	m.mismatches.Add(float64(n))
}

// PublishError counts a failed topology patch.
func (m *Metrics) PublishError() {
	if m == nil {
		return
	}
	m.publishErrors.Inc()
}

// MPSDaemon records whether the MPS control daemon of gpu runs.
func (m *Metrics) MPSDaemon(gpu string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.mpsUp.WithLabelValues(gpu).Set(v)
}

// MPSRestart counts a dead MPS control daemon of gpu started again.
func (m *Metrics) MPSRestart(gpu string) {
	if m == nil {
		return
	}
	m.mpsRestarts.WithLabelValues(gpu).Inc()
}

// Leaked records the leaked memory and process count of gpu.
func (m *Metrics) Leaked(gpu string, mib int64, processes int) {
	if m == nil {
		return
	}
	m.leakedMiB.WithLabelValues(gpu).Set(float64(mib))
	m.leakedProcs.WithLabelValues(gpu).Set(float64(processes))
}

// PodGPU records a pod's SM utilization ratio and memory used on gpu.
func (m *Metrics) PodGPU(namespace, pod, gpu string, ratio float64, usedMiB int64) {
	if m == nil {
		return
	}
	m.podSM.WithLabelValues(namespace, pod, gpu).Set(ratio)
	m.podUsedMiB.WithLabelValues(namespace, pod, gpu).Set(float64(usedMiB))
}

// ForgetPod drops a pod's per-GPU series (the pod went or left its GPUs).
func (m *Metrics) ForgetPod(namespace, pod string) {
	if m == nil {
		return
	}
	l := prometheus.Labels{"namespace": namespace, "pod": pod}
	m.podSM.DeletePartialMatch(l)
	m.podUsedMiB.DeletePartialMatch(l)
}

// Registry returns the registry the metrics are registered on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }
