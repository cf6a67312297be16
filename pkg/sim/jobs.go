package sim

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/rota-sched/rota/pkg/quota"
)

// TraceJobs turns a pod list with creation and deletion times into one-pod
// jobs for RunTimed: each pod arrives at creation_time / compress and runs
// for deletion_time - creation_time seconds, at most maxDuration (0: no
// cap). Durations are not compressed, so compress raises the offered load.
// Pods without both times are left out; the second result counts them.
func TraceJobs(pods []Pod, compress, maxDuration float64) ([]Job, int) {
	compress = max(compress, 1e-9)
	var out []Job
	skipped := 0
	for _, p := range pods {
		if p.Created < 0 || p.Deleted < p.Created {
			skipped++
			continue
		}
		d := float64(p.Deleted - p.Created)
		if maxDuration > 0 {
			d = math.Min(d, maxDuration)
		}
		out = append(out, Job{Name: p.Name, Kind: traceKind(p), Member: p, Size: 1,
			Arrive: float64(p.Created) / compress, Duration: d})
	}
	return out, skipped
}

func traceKind(p Pod) string {
	switch {
	case p.GPUs == 0:
		return "cpu-only"
	case p.GPUMilli < MilliPerGPU:
		return "share"
	case p.GPUs == 1:
		return "1-gpu"
	default:
		return "multi-gpu"
	}
}

// CompressFor is the arrival compression at which the jobs' offered GPU
// load over the compressed arrival window W is load: the sum over jobs of
// GPU request x min(duration, W), over capacity x W. jobs are uncompressed
// (TraceJobs with compress 1); the answer is found by bisection (the load
// grows with the compression) and lies in [1e-3, 1e9].
func CompressFor(jobs []Job, capacityGPUs, load float64) float64 {
	var span float64
	for _, j := range jobs {
		span = max(span, j.Arrive)
	}
	if span == 0 || capacityGPUs == 0 {
		return 1
	}
	offered := func(c float64) float64 {
		w := span / c
		var work float64
		for _, j := range jobs {
			work += float64(j.gpuMilli()) / MilliPerGPU * math.Min(j.Duration, w)
		}
		return work / (capacityGPUs * w)
	}
	lo, hi := math.Log(1e-3), math.Log(1e9)
	for range 100 {
		mid := (lo + hi) / 2
		if offered(math.Exp(mid)) < load {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Exp((lo + hi) / 2)
}

// ReadRuntimes reads a one-column CSV of job runtimes in seconds with a
// header row (the Philly runtime file's format, column "runtime").
// Non-positive runtimes are skipped.
func ReadRuntimes(r io.Reader) ([]float64, error) {
	t, err := newTable(r)
	if err != nil {
		return nil, err
	}
	if err := t.require([]string{"runtime"}); err != nil {
		return nil, err
	}
	var out []float64
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		v, err := strconv.ParseFloat(t.str("runtime"), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("line %d: runtime %q: %w", t.line, t.str("runtime"), ErrBadValue)
		}
		if v > 0 {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no positive runtime: %w", ErrBadValue)
	}
	return out, nil
}

// GangLoad describes a synthetic training cluster and its workload, after
// the seed articles' 10,000-GPU cluster: teams with quota and a shared
// pool, and four kinds of work:
//
//	single      one GPU or a share of one (notebooks, evaluation), < 1 h
//	finetune    4-32 GPUs (one 4-GPU pod, or 1-4 pods of 8), 1 h .. 1 day
//	pretrain    64-1024 GPUs as pods of 8 (a gang), 1-7 days, at most
//	            what the team's quota can reach
//	preprocess  CPU-only, 16-64 cores, < 1 h
//
// Durations are drawn from a runtime sample (the Philly trace) restricted
// to each kind's range. Arrivals are Poisson at the rate that makes the
// offered GPU load Load.
type GangLoad struct {
	Leaves, NodesPerLeaf, GPUsPerNode int
	CPUMilliPerNode                   int64
	Jobs                              int
	Load                              float64
	Seed                              uint64
}

// DefaultGangLoad is 8 leaves x 32 nodes x 8 GPUs (2,048 GPUs), 2,000 jobs
// at offered load 0.9.
func DefaultGangLoad() GangLoad {
	return GangLoad{Leaves: 8, NodesPerLeaf: 32, GPUsPerNode: 8, CPUMilliPerNode: 128000, Jobs: 2000, Load: 0.9, Seed: 42}
}

// Validate reports every problem with g.
func (g GangLoad) Validate() error {
	var errs []error
	if g.Leaves < 1 || g.NodesPerLeaf < 1 || g.GPUsPerNode < 8 {
		errs = append(errs, errors.New("gang load: want at least 1 leaf, 1 node per leaf and 8 GPUs per node"))
	}
	if g.CPUMilliPerNode < 64000 {
		errs = append(errs, errors.New("gang load: want at least 64 cores per node"))
	}
	if g.Jobs < 1 || g.Load <= 0 {
		errs = append(errs, errors.New("gang load: want jobs >= 1 and load > 0"))
	}
	return errors.Join(errs...)
}

// Cluster is the node list: leaf-<l> nodes named n<l>-<i>.
func (g GangLoad) Cluster() []Node {
	var out []Node
	for l := range g.Leaves {
		for i := range g.NodesPerLeaf {
			out = append(out, Node{Name: fmt.Sprintf("n%02d-%03d", l, i), GPUs: g.GPUsPerNode, Model: "H100",
				CPUMilli: g.CPUMilliPerNode, Leaf: fmt.Sprintf("leaf-%02d", l)})
		}
	}
	return out
}

// capacity is the cluster's GPUs.
func (g GangLoad) capacity() int { return g.Leaves * g.NodesPerLeaf * g.GPUsPerNode }

// Quota is the teams' quota: guarantees of 7/16, 3/16, 2/16 and 1/16 of
// the GPUs, a shared pool of 6/16 (quota is oversubscribed 1.25x, so
// admitted work can exceed the cluster and queue for GPUs), and borrow
// limits of 3/8 (foundation) and 1/4 of the GPUs; GPU memory for shares is guaranteed per team at 1/32 of the
// cluster's GPU memory, borrowable as much again.
func (g GangLoad) Quota() quota.Config {
	c := g.capacity()
	frac := func(num, den int) int64 { return int64(c * num / den) }
	memGiB := int64(c) * int64(GPUMemoryMiB) / 1024 / 32
	team := func(gpus, borrow int64) quota.Team {
		return quota.Team{GPUs: gpus, GPUMemoryGiB: memGiB, Borrow: quota.Limits{GPUs: borrow, GPUMemoryGiB: memGiB}}
	}
	return quota.Config{
		Teams: map[string]quota.Team{
			"foundation": team(frac(7, 16), frac(3, 8)),
			"vision":     team(frac(3, 16), frac(1, 4)),
			"speech":     team(frac(2, 16), frac(1, 4)),
			"research":   team(frac(1, 16), frac(1, 4)),
		},
		SharedPool: quota.Limits{GPUs: frac(6, 16), GPUMemoryGiB: 4 * memGiB},
	}
}

// TreeQuota is Quota as a three-level tree (the shared pool, two
// departments, the teams): pretraining (foundation, vision) and applied
// (speech, research) each hold a pool of 2/16 of the GPUs, of which they
// lend the share lend (0 to 1) to the other department when their own
// teams leave it unused, and the shared pool keeps 2/16, so the tree lends
// as much in all as Quota's pool of 6/16, nearest first. Guarantees and
// borrow limits are Quota's.
func (g GangLoad) TreeQuota(lend float64) quota.Config {
	q := g.Quota()
	c := g.capacity()
	pool := int64(c * 2 / 16)
	mem := q.SharedPool.GPUMemoryGiB / 4
	lent := quota.Limits{GPUs: int64(lend * float64(pool)), GPUMemoryGiB: int64(lend * float64(mem))}
	dept := quota.Group{GPUs: pool, GPUMemoryGiB: mem, Lend: lent}
	q.Groups = map[string]quota.Group{"pretraining": dept, "applied": dept}
	for name, dept := range map[string]string{"foundation": "pretraining", "vision": "pretraining", "speech": "applied", "research": "applied"} {
		t := q.Teams[name]
		t.Group = dept
		q.Teams[name] = t
	}
	q.SharedPool = quota.Limits{GPUs: int64(c)*6/16 - 2*pool, GPUMemoryGiB: q.SharedPool.GPUMemoryGiB - 2*mem}
	return q
}

// Generate draws the jobs. runtimes is the duration sample (seconds); each
// kind draws from its range of it (a kind whose range holds no sample uses
// the range's lower end).
func (g GangLoad) Generate(runtimes []float64) ([]Job, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	rt := slices.Clone(runtimes)
	slices.Sort(rt)
	rng := rand.New(rand.NewPCG(g.Seed, 0x67616e67))
	draw := func(lo, hi float64) float64 {
		a, _ := slices.BinarySearch(rt, lo)
		b, _ := slices.BinarySearch(rt, hi)
		if b <= a {
			return lo
		}
		return rt[a+rng.IntN(b-a)]
	}
	const hour, day = 3600.0, 86400.0
	teams := []string{"foundation", "vision", "speech", "research"}
	// Jobs are spread over teams in proportion to their guarantees.
	teamW := []float64{7.0 / 13, 3.0 / 13, 2.0 / 13, 1.0 / 13}
	qc := g.Quota()
	pickTeam := func() string {
		x := rng.Float64()
		for i, w := range teamW {
			if x < w {
				return teams[i]
			}
			x -= w
		}
		return teams[len(teams)-1]
	}
	maxPre := min(1024, g.capacity()/2)
	if r := qc.Reachable("foundation").GPUs; r < int64(maxPre) {
		maxPre = int(r)
	}
	var jobs []Job
	var work float64
	for i := range g.Jobs {
		j := Job{Name: fmt.Sprintf("job-%05d", i), Size: 1, Team: pickTeam()}
		x := rng.Float64()
		switch {
		case x < 0.60:
			j.Kind, j.Priority, j.Duration = "single", 10, draw(60, hour)
			j.Member = Pod{GPUs: 1, GPUMilli: MilliPerGPU, CPUMilli: 8000}
			if rng.Float64() < 0.4 {
				j.Member.GPUMilli = []int{250, 500}[rng.IntN(2)]
				j.Member.CPUMilli = 4000
			}
		case x < 0.85:
			j.Kind, j.Priority, j.Duration = "finetune", 50, draw(hour, day)
			switch gpus := []int{4, 8, 16, 32}[rng.IntN(4)]; gpus {
			case 4:
				j.Member = Pod{GPUs: 4, GPUMilli: MilliPerGPU, CPUMilli: 32000}
			default:
				j.Member, j.Size = Pod{GPUs: 8, GPUMilli: MilliPerGPU, CPUMilli: 64000}, gpus/8
			}
		case x < 0.865 && maxPre >= 64:
			j.Kind, j.Priority, j.Duration = "pretrain", 100, draw(day, 7*day)
			var sizes []int
			for s := 64; s <= min(maxPre, int(qc.Reachable(j.Team).GPUs)); s *= 2 {
				sizes = append(sizes, s)
			}
			if len(sizes) == 0 {
				j.Team, sizes = "foundation", []int{64}
			}
			// Smaller runs are more common: weight 1/2^k.
			k := 0
			for k < len(sizes)-1 && rng.Float64() < 0.5 {
				k++
			}
			j.Member, j.Size = Pod{GPUs: 8, GPUMilli: MilliPerGPU, CPUMilli: 96000}, sizes[k]/8
		default:
			j.Kind, j.Priority, j.Duration, j.Team = "preprocess", 0, draw(60, hour), ""
			j.Member = Pod{CPUMilli: int64(16000 * (1 + rng.IntN(4)))}
		}
		j.Member.Name = j.Name
		work += float64(j.gpuMilli()) / MilliPerGPU * j.Duration
		jobs = append(jobs, j)
	}
	// Poisson arrivals at the rate that offers Load x capacity GPU-seconds
	// per second.
	rate := g.Load * float64(g.capacity()) / math.Max(work/float64(len(jobs)), 1)
	var t float64
	for i := range jobs {
		jobs[i].Arrive = t
		t += rng.ExpFloat64() / rate
	}
	slices.SortStableFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Arrive, b.Arrive) })
	return jobs, nil
}
