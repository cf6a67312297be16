package remediation

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rota-sched/rota/pkg/remediation"
)

// Metrics are the controller's metrics (namespace rota_extender).
type Metrics struct {
	// Quarantined is 1 per quarantined target: rota_extender_quarantined{kind,name}.
	Quarantined *prometheus.GaugeVec
	// Actions counts decisions by mode, action (mark, delete, deferred,
	// quarantine) and cause.
	Actions *prometheus.CounterVec
	// Faults counts faults seen, by cause.
	Faults *prometheus.CounterVec
	// RateLimited counts deletions deferred by the rate limit.
	RateLimited prometheus.Counter
	// FaultToDelete is the time from a fault's first sighting to the
	// deletion of a pod it touched.
	FaultToDelete prometheus.Histogram
}

// NewMetrics builds the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "rota_extender"
	m := &Metrics{
		Quarantined: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "quarantined",
			Help: "GPUs (name = UUID) and nodes out of placement until an admin releases them (1 each)."}, []string{"kind", "name"}),
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "remediation_actions_total",
			Help: "Remediation decisions by mode (dry-run: reported only), action and cause."}, []string{"mode", "action", "cause"}),
		Faults: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "remediation_faults_total",
			Help: "GPU and node faults seen, by cause."}, []string{"cause"}),
		RateLimited: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "remediation_rate_limited_total",
			Help: "Pod deletions deferred by the remediation rate limit."}),
		FaultToDelete: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "remediation_fault_to_delete_seconds",
			Help: "Time from a fault's first sighting to the deletion of a pod it touched.", Buckets: prometheus.ExponentialBuckets(0.1, 2, 12)}),
	}
	if reg != nil {
		reg.MustRegister(m.Quarantined, m.Actions, m.Faults, m.RateLimited, m.FaultToDelete)
	}
	return m
}

func (m *Metrics) setQuarantined(ts []remediation.Target) {
	m.Quarantined.Reset()
	for _, t := range ts {
		m.Quarantined.WithLabelValues(string(t.Kind), t.Name()).Set(1)
	}
}
