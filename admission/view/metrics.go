package view

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports per-team usage against quota, the shared pool and the
// reservations at scrape time, so the numbers are never stale.
type Collector struct {
	v                                    *View
	usage, quotaDesc, pool, reservations *prometheus.Desc
	queued                               *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector for v; register it with a registry.
func NewCollector(v *View) *Collector {
	return &Collector{
		v: v,
		usage: prometheus.NewDesc("rota_team_usage",
			"GPU resources a team uses, by state (running: placed on a node; pending: queued or just admitted). resource is gpus or gpu_memory_mib; team \"\" is namespaces without a team label.",
			[]string{"team", "resource", "state"}, nil),
		quotaDesc: prometheus.NewDesc("rota_team_quota",
			"A team's configured quota, by kind (guarantee or borrow_limit).",
			[]string{"team", "resource", "kind"}, nil),
		pool: prometheus.NewDesc("rota_shared_pool",
			"The shared pool, by kind (size, or used: the sum of every team's use above its guarantee).",
			[]string{"resource", "kind"}, nil),
		reservations: prometheus.NewDesc("rota_admission_reservations",
			"Admissions held until the informer shows the pod, by kind (pod, gang).",
			[]string{"kind"}, nil),
		queued: prometheus.NewDesc("rota_admission_queued_pods",
			"Pods waiting in Rota's queue (carrying the queue gate), per team, as the webhook counts them against maxQueuedPods; they hold no quota. team \"\" is namespaces without a team label.",
			[]string{"team"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.usage
	ch <- c.quotaDesc
	ch <- c.pool
	ch <- c.reservations
	ch <- c.queued
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	usage, cfg, _ := c.v.Usage()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for team, u := range usage {
		g(c.usage, float64(u.Running.GPUs), team, "gpus", "running")
		g(c.usage, float64(u.Pending.GPUs), team, "gpus", "pending")
		g(c.usage, float64(u.Running.MemoryMiB), team, "gpu_memory_mib", "running")
		g(c.usage, float64(u.Pending.MemoryMiB), team, "gpu_memory_mib", "pending")
	}
	for team, t := range cfg.Teams {
		q, b := t.Guarantee(), t.Borrow.Amount()
		g(c.quotaDesc, float64(q.GPUs), team, "gpus", "guarantee")
		g(c.quotaDesc, float64(q.MemoryMiB), team, "gpu_memory_mib", "guarantee")
		g(c.quotaDesc, float64(b.GPUs), team, "gpus", "borrow_limit")
		g(c.quotaDesc, float64(b.MemoryMiB), team, "gpu_memory_mib", "borrow_limit")
	}
	size, used := cfg.SharedPool.Amount(), cfg.PoolUsed(usage)
	g(c.pool, float64(size.GPUs), "gpus", "size")
	g(c.pool, float64(size.MemoryMiB), "gpu_memory_mib", "size")
	g(c.pool, float64(used.GPUs), "gpus", "used")
	g(c.pool, float64(used.MemoryMiB), "gpu_memory_mib", "used")
	pods, gangs := c.v.Reservations()
	g(c.reservations, float64(pods), "pod")
	g(c.reservations, float64(gangs), "gang")
	for team, q := range c.v.Queued() {
		g(c.queued, float64(q.Pods), team)
	}
}
