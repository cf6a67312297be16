// Package metrics defines rota-extender's Prometheus metrics on a registry
// of its own (no global registry): per-verb latency, decisions by verb,
// outcome and reason code, gang planning, reservations, and gauges read
// from the ledger at scrape time (GPU memory and whole GPUs used and total,
// fragmentation, reservations, invariant violations).
//
// Metrics is safe for concurrent use.
package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/version"
)

const namespace = "rota_extender"

// Source is what the scrape-time collector reads.
type Source struct {
	// Snapshot returns the ledger's current view.
	Snapshot func() *ledger.Snapshot
	// Workload measures fragmentation (nil: placement.DefaultWorkload).
	Workload placement.Workload
	// Problems returns the cache's problem counters by kind.
	Problems func() map[string]int64
	// GangsWaiting returns how many gangs wait for members or room.
	GangsWaiting func() int
	// Pending returns how many GPU pods wait for a node and how long the
	// oldest has waited.
	Pending func() (int, time.Duration)
	// Pools lists the node pools configured now, with their owners and
	// policies (nil: none).
	Pools func() []nodepool.Pool
}

// Metrics holds every metric the extender exports.
type Metrics struct {
	Registry *prometheus.Registry

	RequestDuration *prometheus.HistogramVec
	Decisions       *prometheus.CounterVec
	HTTPErrors      *prometheus.CounterVec
	BindConflicts   prometheus.Counter
	Expired         *prometheus.CounterVec
	GangPlans       *prometheus.CounterVec
	GangWait        prometheus.Histogram
	Requeues        prometheus.Counter
	Events          prometheus.Counter
	// PodFailures counts GPU pods that ended Failed, by node.
	PodFailures *prometheus.CounterVec

	violations atomic.Int64
}

// New builds the metrics and registers them, with the Go and process
// collectors, on a new registry.
func New(src Source) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "request_duration_seconds",
			Help:    "Time to answer one extender call, by verb (filter, prioritize, bind, preempt).",
			Buckets: []float64{.0005, .001, .002, .003, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"verb"}),
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "decisions_total",
			Help: "Decisions by verb, outcome (fit, nofit, bound, error, ...) and reason code (placement.Code or an error kind).",
		}, []string{"verb", "outcome", "reason"}),
		HTTPErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "request_errors_total",
			Help: "Requests answered with an error before any decision (bad body, too large), by verb.",
		}, []string{"verb", "kind"}),
		BindConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "bind_conflicts_total",
			Help: "Assignment writes that met a newer pod version and were retried.",
		}),
		Expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "reservations_expired_total",
			Help: "Reservations released because their TTL passed, by kind (pod, gang).",
		}, []string{"kind"}),
		GangPlans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "gang_plans_total",
			Help: "Gang planning attempts by outcome (planned, nofit, incomplete, expired, completed).",
		}, []string{"outcome"}),
		GangWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "gang_wait_seconds",
			Help:    "Time from a gang's first filter call to its plan.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}),
		Requeues: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "requeue_touches_total",
			Help: "Pod annotation touches written to make kube-scheduler retry a waiting pod.",
		}),
		Events: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "refusal_events_total",
			Help: "Kubernetes events emitted on pods for refusals (before the recorder's own aggregation).",
		}),
		PodFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "pod_failures_total",
			Help: "Bound pods asking for Rota resources that ended Failed, by node (a node failing many is suspect).",
		}, []string{"node"}),
	}
	bi := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rota_build_info",
		Help: "1, labelled with the binary, its version, VCS revision and Go version."}, version.LabelNames)
	bi.With(version.Labels("rota-extender")).Set(1)
	m.Registry.MustRegister(bi)
	m.Registry.MustRegister(m.RequestDuration, m.Decisions, m.HTTPErrors, m.BindConflicts, m.Expired,
		m.GangPlans, m.GangWait, m.Requeues, m.Events, m.PodFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&ledgerCollector{src: src, m: m})
	return m
}

// SetViolations records the result of the latest ledger.Check.
func (m *Metrics) SetViolations(n int) { m.violations.Store(int64(n)) }

var (
	descMemAllocated = prometheus.NewDesc(namespace+"_gpu_memory_allocated_bytes",
		"GPU memory held by reserved or committed allocations (whole GPUs count in full).", nil, nil)
	descMemTotal = prometheus.NewDesc(namespace+"_gpu_memory_total_bytes",
		"GPU memory of all GPUs in the ledger.", nil, nil)
	descWholeUsed = prometheus.NewDesc(namespace+"_gpus_whole_used",
		"GPUs owned whole by one pod.", nil, nil)
	descGPUsBusy = prometheus.NewDesc(namespace+"_gpus_in_use",
		"GPUs holding at least one allocation (whole or share).", nil, nil)
	descGPUsTotal = prometheus.NewDesc(namespace+"_gpus_total",
		"GPUs in the ledger, by health.", []string{"health"}, nil)
	descNodes = prometheus.NewDesc(namespace+"_nodes",
		"Nodes with a valid GPU topology in the ledger.", nil, nil)
	descFrag = prometheus.NewDesc(namespace+"_fragmentation_gpus",
		"Expected GPU capacity the workload cannot use (FGD measure, summed over nodes), in GPUs.", nil, nil)
	descAllocs = prometheus.NewDesc(namespace+"_allocations",
		"GPU allocations in the ledger by state (reserved, committed); GPU-free pods' CPU and memory not counted.", []string{"state"}, nil)
	descViolations = prometheus.NewDesc(namespace+"_ledger_invariant_violations",
		"Violations found by the latest periodic ledger check (should be 0).", nil, nil)
	descProblems = prometheus.NewDesc(namespace+"_cache_problems_total",
		"Annotations the cache could not account, by kind.", []string{"kind"}, nil)
	descGangsWaiting = prometheus.NewDesc(namespace+"_gangs_waiting",
		"Gangs waiting for members or for room.", nil, nil)
	descPending = prometheus.NewDesc(namespace+"_pending_pods",
		"Pods asking for Rota resources that wait for a node.", nil, nil)
	descPendingOldest = prometheus.NewDesc(namespace+"_pending_pod_oldest_seconds",
		"How long the longest-waiting GPU pod has waited for a node (0 when none waits).", nil, nil)

	// Per node pool, side by side (pool="" is the nodes of none); only
	// while a pool is configured or a node is labelled with one.
	poolLabel    = []string{"pool"}
	descPoolInfo = prometheus.NewDesc(namespace+"_node_pool_info",
		"A configured node pool: its owner (team or group) and the placement policy on its nodes (1).", []string{"pool", "owner", "policy"}, nil)
	descPoolNodes = prometheus.NewDesc(namespace+"_node_pool_nodes", "GPU nodes in the node pool.", poolLabel, nil)
	descPoolGPUs  = prometheus.NewDesc(namespace+"_node_pool_gpus", "GPUs in the node pool.", poolLabel, nil)
	descPoolBusy  = prometheus.NewDesc(namespace+"_node_pool_gpus_in_use",
		"GPUs of the node pool holding at least one allocation.", poolLabel, nil)
	descPoolMemUsed = prometheus.NewDesc(namespace+"_node_pool_gpu_memory_allocated_bytes",
		"GPU memory of the node pool held by allocations (whole GPUs count in full).", poolLabel, nil)
	descPoolMemTotal = prometheus.NewDesc(namespace+"_node_pool_gpu_memory_total_bytes",
		"GPU memory of the node pool.", poolLabel, nil)
	descPoolFrag = prometheus.NewDesc(namespace+"_node_pool_fragmentation_gpus",
		"Expected GPU capacity of the node pool the workload cannot use (the cluster's workload, the same yardstick for every pool), in GPUs.", poolLabel, nil)
)

var poolDescs = []*prometheus.Desc{descPoolInfo, descPoolNodes, descPoolGPUs, descPoolBusy, descPoolMemUsed, descPoolMemTotal, descPoolFrag}

// ledgerCollector reads the gauges from one ledger snapshot per scrape.
type ledgerCollector struct {
	src Source
	m   *Metrics
}

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMemAllocated, descMemTotal, descWholeUsed, descGPUsBusy, descGPUsTotal,
		descNodes, descFrag, descAllocs, descViolations, descProblems, descGangsWaiting, descPending, descPendingOldest} {
		ch <- d
	}
	for _, d := range poolDescs {
		ch <- d
	}
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	const mib = 1 << 20
	if c.src.Snapshot != nil {
		snap := c.src.Snapshot()
		w := c.src.Workload
		if len(w) == 0 {
			w = placement.DefaultWorkload()
		}
		var used, total ledger.MiB
		var whole, busy, healthy, unhealthy, reserved, committed int
		var frag float64
		for _, name := range snap.Names() {
			ni := snap.Node(name)
			for s, g := range ni.Node.GPUs {
				total += g.MemoryMiB
				used += ni.Use[s].UsedMiB
				if ni.Use[s].Exclusive {
					whole++
				}
				if ni.Use[s].Pods > 0 {
					busy++
				}
				if g.Healthy {
					healthy++
				} else {
					unhealthy++
				}
			}
			for _, a := range ni.Allocs {
				if len(a.GPUs) == 0 {
					continue // a GPU-free pod's CPU and memory
				}
				if a.State == ledger.Reserved {
					reserved++
				} else {
					committed++
				}
			}
			frag += w.NodeFragmentation(ni)
		}
		ch <- prometheus.MustNewConstMetric(descMemAllocated, prometheus.GaugeValue, float64(used)*mib)
		ch <- prometheus.MustNewConstMetric(descMemTotal, prometheus.GaugeValue, float64(total)*mib)
		ch <- prometheus.MustNewConstMetric(descWholeUsed, prometheus.GaugeValue, float64(whole))
		ch <- prometheus.MustNewConstMetric(descGPUsBusy, prometheus.GaugeValue, float64(busy))
		ch <- prometheus.MustNewConstMetric(descGPUsTotal, prometheus.GaugeValue, float64(healthy), "healthy")
		ch <- prometheus.MustNewConstMetric(descGPUsTotal, prometheus.GaugeValue, float64(unhealthy), "unhealthy")
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(snap.Len()))
		ch <- prometheus.MustNewConstMetric(descFrag, prometheus.GaugeValue, frag)
		ch <- prometheus.MustNewConstMetric(descAllocs, prometheus.GaugeValue, float64(reserved), "reserved")
		ch <- prometheus.MustNewConstMetric(descAllocs, prometheus.GaugeValue, float64(committed), "committed")
		c.collectPools(ch, snap, w)
	}
	ch <- prometheus.MustNewConstMetric(descViolations, prometheus.GaugeValue, float64(c.m.violations.Load()))
	if c.src.Problems != nil {
		for kind, n := range c.src.Problems() {
			ch <- prometheus.MustNewConstMetric(descProblems, prometheus.CounterValue, float64(n), kind)
		}
	}
	if c.src.GangsWaiting != nil {
		ch <- prometheus.MustNewConstMetric(descGangsWaiting, prometheus.GaugeValue, float64(c.src.GangsWaiting()))
	}
	if c.src.Pending != nil {
		n, oldest := c.src.Pending()
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(descPendingOldest, prometheus.GaugeValue, oldest.Seconds())
	}
}

// collectPools exports each node pool's use beside the others': the
// configured pools (an empty one as zeros) and any pool a node is
// labelled with.
func (c *ledgerCollector) collectPools(ch chan<- prometheus.Metric, snap *ledger.Snapshot, w placement.Workload) {
	const mib = 1 << 20
	var pools []nodepool.Pool
	if c.src.Pools != nil {
		pools = c.src.Pools()
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name
		ch <- prometheus.MustNewConstMetric(descPoolInfo, prometheus.GaugeValue, 1, p.Name, p.Owner, p.Policy)
	}
	for _, u := range placement.PoolsUse(snap, w, names) {
		for d, v := range map[*prometheus.Desc]float64{descPoolNodes: float64(u.Nodes), descPoolGPUs: float64(u.GPUs),
			descPoolBusy: float64(u.Busy), descPoolMemUsed: float64(u.UsedMiB) * mib, descPoolMemTotal: float64(u.MemoryMiB) * mib,
			descPoolFrag: u.FragmentedGPUs} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, u.Pool)
		}
	}
}
