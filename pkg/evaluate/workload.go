// Package evaluate is the evaluation a platform team runs before adopting
// a GPU scheduler: one seeded job set, the same for every stack it is run
// on (kube-scheduler alone, Kueue, Rota), and the figures computed from what
// the API server recorded about it. It is pure: the stacks, the clock and
// the API server are the caller's (test/evaluate).
package evaluate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Kind is one of the four kinds of work of the evaluation protocol.
type Kind string

// The kinds.
const (
	// Training is distributed training: gangs of whole-GPU pods, long.
	Training Kind = "A"
	// Inference is memory-heavy inference: one long pod asking for a share
	// of one GPU's memory.
	Inference Kind = "B"
	// Short is short work of seconds to minutes: one GPU or a small share
	// (evaluation, notebooks, debugging).
	Short Kind = "C"
	// Preprocess is CPU- and memory-heavy preprocessing without GPUs.
	Preprocess Kind = "D"
)

// Kinds lists the kinds in report order.
var Kinds = []Kind{Training, Inference, Short, Preprocess}

// Describe names a kind in words.
func (k Kind) Describe() string {
	switch k {
	case Training:
		return "A: distributed training (gangs of whole GPUs)"
	case Inference:
		return "B: memory-heavy inference (GPU memory shares)"
	case Short:
		return "C: short tasks (one GPU or a small share)"
	case Preprocess:
		return "D: CPU preprocessing (no GPU)"
	}
	return string(k)
}

// Job is one job of the set: Pods pods that each ask for the same, and run
// for Runtime once all of them have started (a gang) or each on its own.
type Job struct {
	Name string
	Team string
	Kind Kind
	// Pods is the number of pods; a Training job with more than one is a
	// gang (all start together or none).
	Pods int
	// Per pod: whole GPUs, or a share of one GPU's memory (GiB), and host
	// CPU and memory.
	GPUs      int64
	MemoryGiB int64
	CPUMilli  int64
	HostMiB   int64
	// Runtime is how long each pod runs, already compressed.
	Runtime time.Duration
	// High marks the jobs submitted at the high priority.
	High bool
	// Arrival is when the job is submitted, from the scenario's start.
	Arrival time.Duration
	// NeverFits marks a job no stack can ever run whole on the cluster:
	// bigger than it, or a gang bigger than its team's guarantee and the
	// shared pool. It counts as never started, not as a failure (a stack
	// that does not gang may still run its pods one by one).
	NeverFits bool
}

// Gang reports whether the job's pods must start together.
func (j Job) Gang() bool { return j.Kind == Training && j.Pods > 1 }

// TotalGPUs is the whole GPUs the job holds while it runs.
func (j Job) TotalGPUs() int64 { return j.GPUs * int64(j.Pods) }

// Cluster is the simulated cluster every stack gets: Nodes nodes of
// GPUsPerNode GPUs of GPUMemoryGiB each, in racks of RackSize nodes.
type Cluster struct {
	Nodes        int
	GPUsPerNode  int
	GPUMemoryGiB int64
	CPUMilli     int64
	HostMiB      int64
	RackSize     int
}

// GPUs is the cluster's whole GPUs.
func (c Cluster) GPUs() int64 { return int64(c.Nodes * c.GPUsPerNode) }

// Team is a team's guaranteed GPUs (its quota; the rest of the cluster is a
// shared pool that teams may borrow from where the stack supports it).
type Team struct {
	Name string
	GPUs int64
}

// Scenario is a cluster, its teams and a job set.
type Scenario struct {
	Name string
	// About says what the scenario exercises, for the report.
	About   string
	Cluster Cluster
	Teams   []Team
	Jobs    []Job
	// Compression is how many times faster than declared the jobs run
	// (Runtime is already divided by it); the report states it.
	Compression float64
	Seed        uint64
}

// Size picks how big a scenario is: Small for CI, Full for make evaluate.
type Size int

// The sizes.
const (
	Small Size = iota
	Full
)

// Scenarios are the three scenarios of the protocol, by name.
var Scenarios = map[string]func(seed uint64, size Size) Scenario{
	"contention": Contention,
	"mixed":      Mixed,
	"burst":      Burst,
}

// ScenarioNames lists the scenarios in report order.
var ScenarioNames = []string{"contention", "mixed", "burst"}

// cluster is the cluster of a size: 4 nodes of 8 GPUs for Small, 16 for
// Full, 80 GiB GPUs, racks of 4 nodes.
func cluster(size Size) Cluster {
	n := 4
	if size == Full {
		n = 16
	}
	return Cluster{Nodes: n, GPUsPerNode: 8, GPUMemoryGiB: 80, CPUMilli: 96000, HostMiB: 1 << 20, RackSize: 4}
}

// teams splits the cluster: three teams guaranteed a quarter each, a
// quarter left as the shared pool.
func teams(c Cluster) []Team {
	q := c.GPUs() / 4
	return []Team{{"vision", q}, {"nlp", q}, {"speech", q}}
}

// gen draws jobs for a scenario.
type gen struct {
	r     *rand.Rand
	c     Cluster
	teams []Team
	n     int
	jobs  []Job
	// scale converts declared minutes into compressed wall time.
	scale time.Duration
}

func newGen(seed uint64, c Cluster, compression float64) *gen {
	// A seeded generator on purpose: the same job set for every stack.
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), c: c, teams: teams(c), //nolint:gosec // G404: reproducible, not secret
		scale: time.Duration(float64(time.Minute) / compression)}
}

func (g *gen) team() string { return g.teams[g.r.IntN(len(g.teams))].Name }

// between draws uniformly in [lo, hi].
func (g *gen) between(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

// runtime turns declared minutes into compressed time, with a floor so
// that short tasks measure scheduling and not only API latency.
func (g *gen) runtime(minutes float64) time.Duration {
	return max(time.Duration(minutes*float64(g.scale)), 5*time.Second)
}

func (g *gen) add(j Job) {
	g.n++
	j.Name = fmt.Sprintf("%s-%s-%03d", j.Team, kindName(j.Kind), g.n)
	if j.CPUMilli == 0 {
		j.CPUMilli = 1000
	}
	if j.HostMiB == 0 {
		j.HostMiB = 2048
	}
	// A gang above its team's guarantee and the whole shared pool can never
	// be admitted whole where quota is enforced: it never fits either.
	if j.Gang() && j.TotalGPUs() > g.limit(j.Team) {
		j.NeverFits = true
	}
	g.jobs = append(g.jobs, j)
}

// limit is the most a team may hold: its guarantee and the shared pool.
func (g *gen) limit(team string) int64 {
	for _, t := range g.teams {
		if t.Name == team {
			return t.GPUs + pool(g.c, g.teams)
		}
	}
	return pool(g.c, g.teams)
}

// pool is the GPUs no team is guaranteed: the shared pool.
func pool(c Cluster, teams []Team) int64 {
	p := c.GPUs()
	for _, t := range teams {
		p -= t.GPUs
	}
	return max(p, 0)
}

// Pool is the scenario's shared pool: the GPUs no team is guaranteed.
func (s Scenario) Pool() int64 { return pool(s.Cluster, s.Teams) }

func kindName(k Kind) string {
	switch k {
	case Training:
		return "train"
	case Inference:
		return "infer"
	case Short:
		return "short"
	}
	return "prep"
}

// training adds a gang of pods x 8 GPUs.
func (g *gen) training(at time.Duration, pods int, minutes float64) {
	g.add(Job{Team: g.team(), Kind: Training, Pods: pods, GPUs: int64(g.c.GPUsPerNode), CPUMilli: 8000,
		HostMiB: 64 << 10, Runtime: g.runtime(minutes), Arrival: at, High: g.r.IntN(5) == 0})
}

func (g *gen) inference(at time.Duration, minutes float64) {
	g.add(Job{Team: g.team(), Kind: Inference, Pods: 1, MemoryGiB: int64(10 * g.between(1, 6)), CPUMilli: 4000,
		HostMiB: 16 << 10, Runtime: g.runtime(minutes), Arrival: at})
}

func (g *gen) short(at time.Duration) {
	j := Job{Team: g.team(), Kind: Short, Pods: 1, Runtime: g.runtime(0.5 + 4*g.r.Float64()), Arrival: at}
	if g.r.IntN(2) == 0 {
		j.GPUs = 1
	} else {
		j.MemoryGiB = int64(5 * g.between(1, 4))
	}
	g.add(j)
}

func (g *gen) preprocess(at time.Duration) {
	g.add(Job{Team: g.team(), Kind: Preprocess, Pods: 1, CPUMilli: int64(1000 * g.between(4, 16)),
		HostMiB: int64(g.between(8, 64)) << 10, Runtime: g.runtime(2 + 6*g.r.Float64()), Arrival: at})
}

// neverFits adds a gang bigger than the cluster.
func (g *gen) neverFits(at time.Duration) {
	g.add(Job{Team: g.team(), Kind: Training, Pods: g.c.Nodes + 2, GPUs: int64(g.c.GPUsPerNode), CPUMilli: 8000,
		HostMiB: 64 << 10, Runtime: g.runtime(60), Arrival: at, NeverFits: true})
}

func (g *gen) scenario(name, about string, seed uint64, compression float64) Scenario {
	slices.SortStableFunc(g.jobs, func(a, b Job) int { return int(a.Arrival - b.Arrival) })
	return Scenario{Name: name, About: about, Cluster: g.c, Teams: g.teams, Jobs: g.jobs, Compression: compression, Seed: seed}
}

// spread is the arrival of the i-th of n jobs spread over d.
func spread(i, n int, d time.Duration) time.Duration {
	if n <= 1 {
		return 0
	}
	return d * time.Duration(i) / time.Duration(n-1)
}

// Contention: demand two to three times the cluster, three teams, gangs
// of every size up to the whole cluster beside short work: who starts in
// what order, how long each waits, when all is done.
func Contention(seed uint64, size Size) Scenario {
	c := cluster(size)
	const compression = 60 // a declared minute runs a second
	g := newGen(seed, c, compression)
	window := 60 * time.Second
	nTrain, nShort, nInfer, nPrep := 3, 12, 4, 4
	if size == Full {
		nTrain, nShort, nInfer, nPrep = 12, 40, 12, 10
	}
	for i := range nTrain {
		pods := []int{1, 1, 2, 2, 4}[g.r.IntN(5)]
		if i == nTrain/2 {
			// One team's job takes every GPU of the cluster: more than the
			// team's guarantee and the shared pool, so it never fits whole.
			pods = c.Nodes
		}
		g.training(spread(i, nTrain, window), pods, float64(g.between(20, 60)))
	}
	for i := range nShort {
		g.short(spread(i, nShort, window))
	}
	for i := range nInfer {
		g.inference(spread(i, nInfer, window), float64(g.between(30, 90)))
	}
	for i := range nPrep {
		g.preprocess(spread(i, nPrep, window))
	}
	g.neverFits(window / 2)
	return g.scenario("contention", "demand 2-3x capacity from three teams: gangs up to the whole cluster beside short work", seed, compression)
}

// Mixed: long inference pods hold shares of GPUs while bursts of short
// tasks arrive; sharing and backfill decide how many of them run in the
// gaps.
func Mixed(seed uint64, size Size) Scenario {
	c := cluster(size)
	const compression = 60
	g := newGen(seed, c, compression)
	nInfer, bursts, perBurst := 6, 3, 8
	if size == Full {
		nInfer, bursts, perBurst = 24, 4, 24
	}
	for i := range nInfer {
		g.inference(time.Duration(i)*time.Second, float64(g.between(120, 180)))
	}
	for i := range 2 {
		g.training(time.Duration(5+i*20)*time.Second, []int{2, c.Nodes / 2}[i], float64(g.between(20, 40)))
	}
	for b := range bursts {
		at := time.Duration(10+b*25) * time.Second
		for range perBurst {
			g.short(at)
		}
		g.preprocess(at)
	}
	g.neverFits(30 * time.Second)
	return g.scenario("mixed", "long inference shares with bursts of short tasks in their gaps", seed, compression)
}

// Burst: a large burst at once, then nothing: how fast the cluster fills
// and how fast it drains.
func Burst(seed uint64, size Size) Scenario {
	c := cluster(size)
	const compression = 60
	g := newGen(seed, c, compression)
	n := 24
	if size == Full {
		n = 96
	}
	for i := range n {
		switch i % 4 {
		case 0:
			g.training(0, []int{1, 2}[g.r.IntN(2)], float64(g.between(10, 30)))
		case 1:
			g.inference(0, float64(g.between(10, 30)))
		case 2:
			g.short(0)
		default:
			g.preprocess(0)
		}
	}
	g.neverFits(0)
	return g.scenario("burst", "one large burst at once, then silence: fill and drain", seed, compression)
}
