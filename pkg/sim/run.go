package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

// GPUMemoryMiB and UnitMiB describe every simulated GPU: 1000 MiB with a
// 1 MiB memory unit, so gpu_milli maps to memory units one to one.
const (
	GPUMemoryMiB MiB = MilliPerGPU
	UnitMiB      MiB = 1
)

// DefaultTune is the FGD protocol's arrival target: pods keep arriving until
// their GPU request reaches 1.3 x the cluster's GPU capacity.
const DefaultTune = 1.3

// Config is one replay.
type Config struct {
	Nodes []Node
	Pods  []Pod
	// Policy scores feasible nodes. A policy that keeps state (Random) must
	// not be shared with another concurrent run.
	Policy placement.Policy
	// Seed shuffles and resamples the pod list.
	Seed uint64
	// Tune is the arrival target as a multiple of GPU capacity (0: DefaultTune).
	Tune float64
	// Metric is the workload fragmentation is measured against
	// (nil: WorkloadOf(Pods), FGD's definition).
	Metric placement.Workload
	// Check runs ledger.Check after every placement and stops at the first
	// violation (tests).
	Check bool
	// Progress, when set, is called now and then with pods done and the
	// expected total (the total is an estimate until the run ends).
	Progress func(done, total int)
	// MoveBudget, above 0, lets a pod that fits no node take room that
	// moving placed pods frees (placement.Defrag): the pods of one node go
	// to other nodes as they are, and the arriving pod takes the node. Over
	// the run, moves never exceed MoveBudget x the pods arrived so far.
	// 0: no moves (the FGD protocol).
	MoveBudget float64
	// MaxMovesPerPod bounds the pods moved for one arriving pod (0: 2).
	MaxMovesPerPod int
	// MaxCandidates bounds the pods per node a move plan considers
	// (placement.DefragOptions.MaxCandidates; 0: its default).
	MaxCandidates int
}

// DefaultMaxMovesPerPod is Config.MaxMovesPerPod's default.
const DefaultMaxMovesPerPod = 2

// Point is the state of the cluster at one arrived-demand percentage: the
// mean over every pod arrival whose arrived GPU request, as a percentage of
// GPU capacity, rounds to X. Values are percentages.
type Point struct {
	X int
	// Alloc is allocated GPU capacity / GPU capacity.
	Alloc float64
	// Frag is fragmented GPU capacity / GPU capacity, FragRatio is it over
	// the idle GPU capacity.
	Frag, FragRatio float64
	// N is the number of arrivals averaged (0: no arrival landed here).
	N int
	// Arrived and Moves count the pods arrived and the moves made up to
	// the last arrival that landed here.
	Arrived, Moves int
}

// Result is the outcome of one replay.
type Result struct {
	Policy string
	Seed   uint64
	// Arrived counts pods submitted, Placed those that fit, Failed the rest.
	Arrived, Placed, Failed int
	// Moves counts pods moved to make room (Config.MoveBudget), MovePlans
	// the arriving pods placed thanks to them.
	Moves, MovePlans int
	// CapacityMilli is the cluster's GPU capacity in thousandths of a GPU.
	CapacityMilli int64
	// Curve holds one point per percentage 0..ceil(100 x Tune).
	Curve []Point
}

// At returns the curve point at x percent arrived (zero Point when outside).
func (r Result) At(x int) Point {
	if x < 0 || x >= len(r.Curve) {
		return Point{X: x}
	}
	return r.Curve[x]
}

// Errors of Run; match them with errors.Is.
var (
	ErrNoCapacity = errors.New("cluster has no GPUs")
	ErrNoPods     = errors.New("pod list is empty")
	ErrViolation  = errors.New("ledger invariant violated")
)

// Cluster builds the simulated nodes: one topology.Node per row, GPUs of
// GPUMemoryMiB with unit UnitMiB, CPU and host memory tracked, Leaf as the
// first topology tier. The result is
// sorted by node name, the order placement.Rank breaks ties in.
func Cluster(nodes []Node) []*topology.Node {
	out := make([]*topology.Node, 0, len(nodes))
	for _, n := range nodes {
		var tiers []string
		if n.Leaf != "" {
			tiers = []string{n.Leaf}
		}
		out = append(out, topology.FromSpec(topology.Spec{
			Name: n.Name, Model: n.Model, Count: n.GPUs, MemoryMiB: GPUMemoryMiB, UnitMiB: UnitMiB,
			CPUMilli: n.CPUMilli, HostMemoryMiB: n.HostMemoryMiB, Tiers: tiers,
		}))
	}
	slices.SortFunc(out, func(a, b *topology.Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Arrivals is the protocol's arrival order for seed: the pod list shuffled,
// then pods drawn from it with replacement until the arrived GPU request
// reaches tune x capacityMilli. Entries are indexes into pods.
func Arrivals(pods []Pod, seed uint64, tune float64, capacityMilli int64) []int {
	rng := rand.New(rand.NewPCG(seed, 0x726f7461))
	order := rng.Perm(len(pods))
	target := int64(math.Ceil(tune * float64(capacityMilli)))
	var sum, any int64
	for i, p := range order {
		sum += pods[p].GPUMilliTotal()
		any += pods[p].GPUMilliTotal()
		if sum >= target {
			return order[:i+1]
		}
	}
	if any == 0 {
		return order
	}
	for sum < target {
		p := rng.IntN(len(pods))
		order = append(order, p)
		sum += pods[p].GPUMilliTotal()
	}
	return order
}

// Run replays cfg: every arriving pod is placed on the best-scoring node that
// fits, or fails for good.
func Run(cfg Config) (Result, error) {
	if len(cfg.Pods) == 0 {
		return Result{}, ErrNoPods
	}
	if cfg.Policy == nil {
		return Result{}, errors.New("no policy")
	}
	tune := cfg.Tune
	if tune <= 0 {
		tune = DefaultTune
	}
	metric := cfg.Metric
	if metric == nil {
		metric = WorkloadOf(cfg.Pods, WorkloadOptions{})
	}
	nodes := Cluster(cfg.Nodes)
	l := newLedger(nodes)
	var capMilli int64
	for _, n := range nodes {
		capMilli += int64(len(n.GPUs)) * MilliPerGPU
	}
	if capMilli == 0 {
		return Result{}, ErrNoCapacity
	}
	order := Arrivals(cfg.Pods, cfg.Seed, tune, capMilli)

	snap := l.Snapshot()
	names := snap.Names()
	s := newSelector(cfg.Policy, len(names))
	// Per-node fragmentation, updated only for the node that changed.
	frag := make([]float64, len(names))
	var fragSum float64
	for i, name := range names {
		frag[i] = metric.NodeFragmentation(snap.Node(name))
		fragSum += frag[i]
	}

	res := Result{Policy: cfg.Policy.Name(), Seed: cfg.Seed, CapacityMilli: capMilli,
		Curve: make([]Point, int(math.Ceil(100*tune))+1)}
	for x := range res.Curve {
		res.Curve[x].X = x
	}
	var mv *mover
	if cfg.MoveBudget > 0 {
		mv = newMover(cfg, names)
	}
	var arrivedMilli, allocMilli int64
	for k, pi := range order {
		if cfg.Progress != nil && k%256 == 0 {
			cfg.Progress(k, len(order))
		}
		p := cfg.Pods[pi]
		r := p.Request("u" + strconv.Itoa(k))
		r.Pod = p.Name
		arrivedMilli += p.GPUMilliTotal()
		res.Arrived++

		best, choice := s.pick(r, snap, names)
		if best < 0 && mv != nil {
			moved, touched, err := mv.tryMoves(l, r, snap, p.GPUMilliTotal(), capMilli-allocMilli, res.Arrived, res.Moves)
			if err != nil {
				return res, fmt.Errorf("pod %d (%s): %w", k, p.Name, err)
			}
			if moved > 0 {
				res.Moves += moved
				res.MovePlans++
				snap = l.Snapshot()
				for _, i := range touched {
					f := metric.NodeFragmentation(snap.Node(names[i]))
					fragSum += f - frag[i]
					frag[i] = f
				}
				if best, choice = s.pick(r, snap, names); best < 0 {
					return res, fmt.Errorf("pod %d (%s): no node fits after its moves", k, p.Name)
				}
			}
		}
		if mv != nil {
			mv.arrived(r, best >= 0)
		}
		if best < 0 {
			res.Failed++
		} else {
			if err := commit(l, r, snap.Node(names[best]), choice); err != nil {
				return res, fmt.Errorf("pod %d (%s): %w", k, p.Name, err)
			}
			res.Placed++
			allocMilli += p.GPUMilliTotal()
			snap = l.Snapshot()
			f := metric.NodeFragmentation(snap.Node(names[best]))
			fragSum += f - frag[best]
			frag[best] = f
			if cfg.Check {
				if errs := l.Check(); len(errs) > 0 {
					return res, fmt.Errorf("after pod %d (%s): %w: %w", k, p.Name, ErrViolation, errors.Join(errs...))
				}
			}
		}
		x := int(math.Round(100 * float64(arrivedMilli) / float64(capMilli)))
		if x >= len(res.Curve) {
			continue
		}
		pt := &res.Curve[x]
		pt.Arrived, pt.Moves = res.Arrived, res.Moves
		idle := float64(capMilli-allocMilli) / MilliPerGPU
		pt.N++
		pt.Alloc += 100 * float64(allocMilli) / float64(capMilli)
		pt.Frag += 100 * fragSum * MilliPerGPU / float64(capMilli)
		if idle > 0 {
			pt.FragRatio += 100 * math.Min(fragSum/idle, 1)
		}
	}
	for x := range res.Curve {
		if n := res.Curve[x].N; n > 0 {
			res.Curve[x].Alloc /= float64(n)
			res.Curve[x].Frag /= float64(n)
			res.Curve[x].FragRatio /= float64(n)
		}
	}
	if cfg.Progress != nil {
		cfg.Progress(len(order), len(order))
	}
	return res, nil
}

func newLedger(nodes []*topology.Node) *ledger.Ledger {
	l := ledger.New()
	for _, n := range nodes {
		l.UpsertNode(n)
	}
	return l
}

// commit records r's choice on ni as the extender does: Reserve, then
// Commit (pods in a replay never expire, so the expiry is irrelevant).
func commit(l *ledger.Ledger, r placement.Request, ni *ledger.NodeInfo, c placement.Choice) error {
	if err := l.Reserve(c.Allocation(r, ni), time.Time{}); err != nil {
		return fmt.Errorf("reserve on %s: %w", ni.Name(), err)
	}
	if err := l.Commit(r.UID); err != nil {
		return fmt.Errorf("commit on %s: %w", ni.Name(), err)
	}
	return nil
}

// Randomized is implemented by policies whose scores are not a function of
// (request, node, choice) alone; the selector never reuses their scores.
type Randomized interface {
	Randomized() bool
}

// selector is the placement loop: Fit every node, score the feasible ones
// with the policy, keep the best (ties: lowest name, as placement.Rank).
// Fit and Score are pure functions of the request's shape and the node's
// immutable ledger.NodeInfo, so results are memoised per shape and reused
// while the node's NodeInfo is the same pointer; only the node that changed
// since a shape was last seen is fitted and scored again.
type selector struct {
	policy  placement.Policy
	reuse   bool
	n       int
	entries map[string][]entry
}

type entry struct {
	ni     *ledger.NodeInfo
	ok     bool
	choice placement.Choice
	score  int64
}

func newSelector(p placement.Policy, n int) *selector {
	reuse := true
	if r, ok := p.(Randomized); ok && r.Randomized() {
		reuse = false
	}
	return &selector{policy: p, reuse: reuse, n: n, entries: map[string][]entry{}}
}

func shapeKey(r placement.Request) string {
	return fmt.Sprintf("%d/%d/%d/%d/%s", r.GPUs, r.MemoryUnits, r.CPUMilli, r.HostMemoryMiB, strings.Join(r.Models, "|"))
}

// pick returns the index of the chosen node in names and its choice, or -1.
func (s *selector) pick(r placement.Request, snap *ledger.Snapshot, names []string) (int, placement.Choice) {
	key := shapeKey(r)
	es := s.entries[key]
	if es == nil {
		es = make([]entry, s.n)
		s.entries[key] = es
	}
	best := -1
	var bestScore int64
	for i, name := range names {
		ni := snap.Node(name)
		e := &es[i]
		// A node a reservation holds room on fits by the pod's job and
		// declared end too, not by its shape alone: never reused.
		if e.ni != ni || ni.Claim != nil {
			c, reason := placement.Fit(r, ni)
			*e = entry{ni: ni, ok: reason == nil, choice: c}
			if e.ok {
				e.score = s.policy.Score(r, ni, c)
			}
		} else if e.ok && !s.reuse {
			e.score = s.policy.Score(r, ni, e.choice)
		}
		if e.ok && (best < 0 || e.score > bestScore) {
			best, bestScore = i, e.score
		}
	}
	if best < 0 {
		return -1, placement.Choice{}
	}
	return best, es[best].choice
}
