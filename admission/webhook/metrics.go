package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts admissions. Build it with NewMetrics.
type Metrics struct {
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	mutations  *prometheus.CounterVec
}

// NewMetrics registers the webhook's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_admission_requests_total",
			Help: "Admission reviews answered, by operation, outcome (allowed, denied, error) and reason.",
		}, []string{"operation", "outcome", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rota_admission_duration_seconds",
			Help:    "Time to answer one admission review, by outcome.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 1},
		}, []string{"outcome"}),
	}
	m.mutations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rota_admission_mutations_total",
		Help: "Pod creations the mutating webhook answered, by outcome (allowed, denied, error) and reason (gated: the queue gate added; already_gated, queueing_off, bound_at_creation, no_gpu: left alone).",
	}, []string{"outcome", "reason"})
	reg.MustRegister(m.admissions, m.latency, m.mutations)
	return m
}
