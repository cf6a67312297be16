package queue

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the queue controller's Prometheus metrics.
type Metrics struct {
	Length     *prometheus.GaugeVec
	OldestWait *prometheus.GaugeVec
	Admissions *prometheus.CounterVec
	Wait       *prometheus.HistogramVec
	// PoolWait is Wait by the node pool the admitted pods place on.
	PoolWait        *prometheus.HistogramVec
	Reclaims        *prometheus.CounterVec
	ConditionWrites prometheus.Counter
	// Reservations and ReservedGPUs are the holds for queued jobs now;
	// ReservationsReleased counts holds released at their maximum.
	Reservations         prometheus.Gauge
	ReservedGPUs         prometheus.Gauge
	ReservationsReleased prometheus.Counter
	// Narrowed counts pods admitted narrowed to a few nodes; Requeued those
	// evicted when none of those nodes took them within their hold.
	Narrowed prometheus.Counter
	Requeued prometheus.Counter
	// DisbelievedRecords counts admission records not believed, each once:
	// not signed by Rota, or naming another team or account than the pod's.
	DisbelievedRecords prometheus.Counter
	// Moves counts pods evicted to make room for waiting work when free
	// GPUs were fragmented; MovesBlocked those a disruption budget kept.
	Moves        prometheus.Counter
	MovesBlocked prometheus.Counter
}

// waitBuckets are the queue wait histograms' buckets, 1 s to a day.
var waitBuckets = []float64{1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400}

// NewMetrics registers the metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Length: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rota_queue_length",
			Help: "Pods queued (gated) per team."}, []string{"team"}),
		OldestWait: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rota_queue_oldest_wait_seconds",
			Help: "How long the team's oldest queued workload has waited (0 with none)."}, []string{"team"}),
		Admissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rota_queue_admissions_total",
			Help: "Pods the queue controller admitted, per team."}, []string{"team"}),
		Wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rota_queue_wait_seconds",
			Help:    "Time from a workload's creation to its admission, per team.",
			Buckets: waitBuckets}, []string{"team"}),
		PoolWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rota_queue_node_pool_wait_seconds",
			Help:    `Time from a workload's creation to its admission, per node pool its pods place on ("": the nodes of none).`,
			Buckets: waitBuckets}, []string{"pool"}),
		Reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rota_queue_reclaims_total",
			Help: "Workloads evicted to return a team's guarantee, per team that got the capacity back."}, []string{"team"}),
		ConditionWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_condition_writes_total",
			Help: "Queued condition writes (bounded per pod and cluster-wide)."}),
		Reservations: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rota_queue_reservations",
			Help: "Queued jobs that room is held for (reservations)."}),
		ReservedGPUs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rota_queue_reserved_gpus",
			Help: "GPUs the reservations need on their held nodes."}),
		ReservationsReleased: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_reservations_released_total",
			Help: "Reservations released because their job did not start within the maximum hold."}),
		Narrowed: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_narrowed_total",
			Help: "Pods admitted narrowed to their held node and the next best (a required node affinity by node name)."}),
		Requeued: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_requeued_total",
			Help: "Narrowed pods evicted for their controller to recreate, queued: none of their nodes took them while their room was held."}),
		DisbelievedRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_disbelieved_records_total",
			Help: "Admission records not believed (not signed by Rota, or naming another team or account than the pod's own); the pod is charged to its own team."}),
		Moves: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_moves_total",
			Help: "Pods evicted for their controllers to recreate, to make room for a team's waiting pod where free GPUs were fragmented (defragmentation)."}),
		MovesBlocked: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_queue_moves_blocked_total",
			Help: "Defragmentation evictions refused by a PodDisruptionBudget or held by the API server."}),
	}
	if reg != nil {
		reg.MustRegister(m.Length, m.OldestWait, m.Admissions, m.Wait, m.PoolWait, m.Reclaims, m.ConditionWrites,
			m.Reservations, m.ReservedGPUs, m.ReservationsReleased, m.Narrowed, m.Requeued, m.DisbelievedRecords,
			m.Moves, m.MovesBlocked)
	}
	return m
}
