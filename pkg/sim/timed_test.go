package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/quota"
)

func timedPolicy(t *testing.T, name string, jobs []Job, nodes []Node) TimedConfig {
	t.Helper()
	var pods []Pod
	for _, j := range jobs {
		pods = append(pods, j.Member)
	}
	p, err := NewPolicy(name, WorkloadOf(pods, WorkloadOptions{}), 1, nodes)
	if err != nil {
		t.Fatalf("NewPolicy(%s): %v", name, err)
	}
	return TimedConfig{Nodes: nodes, Jobs: jobs, Policy: p, Check: true}
}

// TestRunTimedQueue checks queueing, departures, priority order and
// backfill on one 2-GPU node.
func TestRunTimedQueue(t *testing.T) {
	nodes := []Node{{Name: "n0", GPUs: 2, CPUMilli: 32000}}
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	tests := []struct {
		name      string
		giveJobs  []Job
		wantStart map[string]float64 // start = arrive + wait
		wantLost  float64            // GPU-hours
	}{
		{
			name: "a job waits for the one that holds its GPUs",
			giveJobs: []Job{
				{Name: "a", Member: whole(2), Size: 1, Arrive: 0, Duration: 3600},
				{Name: "b", Member: whole(1), Size: 1, Arrive: 600, Duration: 60},
			},
			wantStart: map[string]float64{"a": 0, "b": 3600},
		},
		{
			name: "priority first, then arrival; a small job backfills past a blocked big one",
			giveJobs: []Job{
				{Name: "a", Member: whole(1), Size: 1, Arrive: 0, Duration: 3600},
				{Name: "big", Member: whole(2), Size: 1, Arrive: 10, Duration: 60},
				{Name: "small", Member: whole(1), Size: 1, Arrive: 20, Duration: 60},
				{Name: "low", Member: whole(1), Size: 1, Arrive: 30, Duration: 60, Priority: -1},
				{Name: "high", Member: whole(1), Size: 1, Arrive: 40, Duration: 60, Priority: 5},
			},
			// small backfills at 20 (1 GPU idle); low and high queue behind
			// it; at 80 high (priority 5) goes before low; low at 140; big
			// needs both GPUs, free only once a leaves at 3600.
			wantStart: map[string]float64{"a": 0, "small": 20, "high": 80, "low": 140, "big": 3600},
			// big (2 GPUs) waits from 10 to 3600 with 1 GPU idle except
			// while small, high and low hold it (20..200).
			wantLost: (10 + 3600 - 200) / 3600.0,
		},
	}
	for _, tc := range tests {
		for _, mode := range []QueueMode{QueueFIFO, QueueDRF} {
			t.Run(tc.name+"/"+string(mode), func(t *testing.T) {
				cfg := timedPolicy(t, "fragmentation-aware", tc.giveJobs, nodes)
				cfg.Queue = mode
				r, err := RunTimed(cfg)
				if err != nil {
					t.Fatalf("RunTimed: %v", err)
				}
				if r.GangPartial != 0 {
					t.Errorf("GangPartial = %d", r.GangPartial)
				}
				// Recover each start from its wait: every job is its own kind.
				for i := range tc.giveJobs {
					tc.giveJobs[i].Kind = tc.giveJobs[i].Name
				}
				cfg.Jobs = tc.giveJobs
				r, err = RunTimed(cfg)
				if err != nil {
					t.Fatalf("RunTimed: %v", err)
				}
				arrive := map[string]float64{}
				for _, j := range tc.giveJobs {
					arrive[j.Name] = j.Arrive
				}
				got := map[string]float64{}
				for _, k := range r.Kinds {
					got[k.Group] = arrive[k.Group] + k.Max
				}
				if diff := cmp.Diff(tc.wantStart, got); diff != "" {
					t.Errorf("starts (-want +got):\n%s", diff)
				}
				if r.Placed != len(tc.giveJobs) || r.Unplaced != 0 {
					t.Errorf("placed %d, unplaced %d; want all %d placed", r.Placed, r.Unplaced, len(tc.giveJobs))
				}
				if math.Abs(r.LostGPUHours-tc.wantLost) > 1e-9 {
					t.Errorf("LostGPUHours = %v, want %v", r.LostGPUHours, tc.wantLost)
				}
			})
		}
	}
}

// TestRunTimedQueueDRF: two teams of equal weight submit more than the
// cluster holds, team a first. Arrival order (FIFO) runs a's jobs first;
// Rota's queue (DRF) shares the GPUs, so Jain's index is near 1 and b's
// jobs do not wait for all of a's.
func TestRunTimedQueueDRF(t *testing.T) {
	nodes := []Node{{Name: "n0", GPUs: 8, CPUMilli: 64000}, {Name: "n1", GPUs: 8, CPUMilli: 64000}}
	one := Pod{GPUs: 1, GPUMilli: MilliPerGPU, CPUMilli: 1000}
	var jobs []Job
	for i := range 64 {
		jobs = append(jobs, Job{Name: fmt.Sprintf("a%02d", i), Team: "a", Kind: "a", Member: one, Size: 1, Arrive: float64(i) / 10, Duration: 200})
	}
	for i := range 64 {
		jobs = append(jobs, Job{Name: fmt.Sprintf("b%02d", i), Team: "b", Kind: "b", Member: one, Size: 1, Arrive: 10 + float64(i)/10, Duration: 200})
	}
	// A late job of no team stretches the sampled window past both backlogs.
	jobs = append(jobs, Job{Name: "tail", Kind: "tail", Member: one, Size: 1, Arrive: 900, Duration: 10})
	// Each team is guaranteed half and may borrow the other half.
	q := &quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 8, Borrow: quota.Limits{GPUs: 8}}, "b": {GPUs: 8, Borrow: quota.Limits{GPUs: 8}}},
		SharedPool: quota.Limits{GPUs: 8}}
	run := func(mode QueueMode) TimedResult {
		cfg := timedPolicy(t, "binpack", jobs, nodes)
		cfg.Quota, cfg.Queue, cfg.Samples = q, mode, 200
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if r.Placed != len(jobs) || r.GangPartial != 0 {
			t.Fatalf("%s: placed %d of %d", mode, r.Placed, len(jobs))
		}
		return r
	}
	fifo, drf := run(QueueFIFO), run(QueueDRF)
	// Both start at 0.5 for the 200 s a's first jobs hold every GPU (the
	// replay does not reclaim); from the first departures DRF splits the
	// cluster, FIFO serves a's backlog first.
	if drf.Jain < 0.85 || drf.Jain < fifo.Jain+0.2 {
		t.Errorf("Jain's index: DRF %.3f, FIFO %.3f; want DRF >= 0.85 and 0.2 above FIFO", drf.Jain, fifo.Jain)
	}
	p50 := func(r TimedResult, kind string) float64 {
		for _, k := range r.Kinds {
			if k.Group == kind {
				return k.P50
			}
		}
		return -1
	}
	if p50(drf, "b") >= p50(fifo, "b") {
		t.Errorf("team b's p50 wait: DRF %.0f s, FIFO %.0f s; want DRF lower", p50(drf, "b"), p50(fifo, "b"))
	}
	if math.Abs(drf.UtilMean-fifo.UtilMean) > 2 {
		t.Errorf("utilization DRF %.1f %% vs FIFO %.1f %%: want within 2 points", drf.UtilMean, fifo.UtilMean)
	}
}

// TestRunTimedNeverFits stops when nothing can ever fit and counts the job
// as unplaced.
func TestRunTimedNeverFits(t *testing.T) {
	nodes := []Node{{Name: "n0", GPUs: 2, CPUMilli: 32000}}
	jobs := []Job{
		{Name: "ok", Kind: "ok", Member: Pod{GPUs: 1, GPUMilli: 500}, Size: 1, Arrive: 0, Duration: 100},
		{Name: "huge", Kind: "huge", Member: Pod{GPUs: 8, GPUMilli: MilliPerGPU}, Size: 1, Arrive: 5, Duration: 100},
	}
	r, err := RunTimed(timedPolicy(t, "bestfit", jobs, nodes))
	if err != nil {
		t.Fatalf("RunTimed: %v", err)
	}
	if r.Placed != 1 || r.Unplaced != 1 || r.End != 100 {
		t.Errorf("placed %d, unplaced %d, end %v; want 1, 1, 100", r.Placed, r.Unplaced, r.End)
	}
}

// TestRunTimedGangs runs the synthetic gang workload on a small cluster
// with ledger.Check after every placement: no gang is ever partly placed,
// every job eventually runs, and no team exceeds what its quota reaches.
func TestRunTimedGangs(t *testing.T) {
	g := GangLoad{Leaves: 2, NodesPerLeaf: 8, GPUsPerNode: 8, CPUMilliPerNode: 128000, Jobs: 300, Load: 1.2, Seed: 7}
	runtimes := []float64{30, 120, 900, 3000, 7200, 20000, 50000, 90000, 200000, 400000}
	jobs, err := g.Generate(runtimes)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	q := g.Quota()
	for _, policy := range []string{"fragmentation-aware", "fgd", "bestfit"} {
		t.Run(policy, func(t *testing.T) {
			cfg := timedPolicy(t, policy, jobs, g.Cluster())
			cfg.Quota = &q
			r, err := RunTimed(cfg)
			if err != nil {
				t.Fatalf("RunTimed: %v", err)
			}
			if r.GangPartial != 0 {
				t.Errorf("GangPartial = %d, want 0", r.GangPartial)
			}
			if r.Placed != len(jobs) || r.GangPartial != 0 {
				t.Errorf("placed %d of %d jobs", r.Placed, len(jobs))
			}
			for _, ts := range r.Teams {
				if reach := q.Reachable(ts.Team); ts.PeakGPUs > float64(reach.GPUs)+float64(reach.MemoryMiB)/float64(GPUMemoryMiB)+1e-9 {
					t.Errorf("team %s peaked at %.1f GPUs, beyond its reachable quota %v", ts.Team, ts.PeakGPUs, reach)
				}
			}
			if r.SmallMaxWait < 0 || r.Wait.P99 < r.Wait.P50 {
				t.Errorf("waits out of order: %+v", r.Wait)
			}
		})
	}
}

func TestGangLoadGenerate(t *testing.T) {
	g := DefaultGangLoad()
	g.Jobs = 3000
	f, err := os.Open("../../testdata/philly/philly_runtime.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rt, err := ReadRuntimes(f)
	if err != nil {
		t.Fatalf("ReadRuntimes: %v", err)
	}
	jobs, err := g.Generate(rt)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	again, _ := g.Generate(rt)
	if diff := cmp.Diff(jobs, again); diff != "" {
		t.Fatalf("Generate is not deterministic (-first +second):\n%s", diff)
	}
	count := map[string]int{}
	for i, j := range jobs {
		count[j.Kind]++
		gpus := j.Size * j.Member.GPUs
		var bad bool
		switch j.Kind {
		case "single":
			bad = gpus != 1 || j.Duration >= 3600
		case "finetune":
			bad = gpus < 4 || gpus > 32 || j.Duration < 3600 || j.Duration >= 86400
		case "pretrain":
			bad = gpus < 64 || gpus > 1024 || j.Member.GPUs != 8 || j.Duration < 86400
		case "preprocess":
			bad = gpus != 0 || j.Member.CPUMilli < 16000 || j.Duration >= 3600
		default:
			bad = true
		}
		if bad {
			t.Errorf("job %s (%s): %d GPUs for %.0f s is outside its kind", j.Name, j.Kind, gpus, j.Duration)
		}
		if i > 0 && j.Arrive < jobs[i-1].Arrive {
			t.Errorf("job %s arrives before its predecessor", j.Name)
		}
	}
	for _, k := range []string{"single", "finetune", "pretrain", "preprocess"} {
		if count[k] == 0 {
			t.Errorf("no %s job in %d", k, len(jobs))
		}
	}
	if err := g.Quota().Validate(); err != nil {
		t.Errorf("Quota().Validate: %v", err)
	}
}

func TestTraceJobsAndCompress(t *testing.T) {
	pods := []Pod{
		{Name: "a", GPUs: 1, GPUMilli: MilliPerGPU, Created: 0, Deleted: 100},
		{Name: "b", GPUs: 2, GPUMilli: MilliPerGPU, Created: 1000, Deleted: 1500},
		{Name: "no-times", GPUs: 1, GPUMilli: MilliPerGPU, Created: -1, Deleted: -1},
	}
	jobs, skipped := TraceJobs(pods, 10, 200)
	if skipped != 1 || len(jobs) != 2 {
		t.Fatalf("TraceJobs: %d jobs, %d skipped; want 2, 1", len(jobs), skipped)
	}
	if jobs[1].Arrive != 100 || jobs[1].Duration != 200 || jobs[1].Kind != "multi-gpu" {
		t.Errorf("job b = %+v; want arrival 100, duration capped at 200", jobs[1])
	}
	raw, _ := TraceJobs(pods, 1, 0)
	c := CompressFor(raw, 2, 0.5)
	// At compression c the window is 1000/c; check the load there.
	w := 1000 / c
	got := (math.Min(100, w) + 2*math.Min(500, w)) / (2 * w)
	if math.Abs(got-0.5) > 1e-6 {
		t.Errorf("CompressFor gave %v: load %v, want 0.5", c, got)
	}
}

func TestReadRuntimes(t *testing.T) {
	got, err := ReadRuntimes(strings.NewReader("runtime\n0.0\n61\n1186.5\n"))
	if err != nil {
		t.Fatalf("ReadRuntimes: %v", err)
	}
	if diff := cmp.Diff([]float64{61, 1186.5}, got); diff != "" {
		t.Errorf("ReadRuntimes (-want +got):\n%s", diff)
	}
	for _, in := range []string{"runtime\nabc\n", "runtime\n0\n", "other\n1\n"} {
		if _, err := ReadRuntimes(strings.NewReader(in)); err == nil {
			t.Errorf("ReadRuntimes(%q): no error", in)
		} else if !errors.Is(err, ErrBadValue) && !errors.Is(err, ErrMissingColumn) {
			t.Errorf("ReadRuntimes(%q): %v", in, err)
		}
	}
}

// TestTreeQuota: the gang mix's quota as a tree lends as much in all as
// the flat pool. Lending whole department pools, it decides as the flat
// configuration does (the same run, job for job); lending none, each
// department's teams borrow at most their pool and the shared pool's.
func TestTreeQuota(t *testing.T) {
	g := GangLoad{Leaves: 2, NodesPerLeaf: 8, GPUsPerNode: 8, CPUMilliPerNode: 128000, Jobs: 300, Load: 1.5, Seed: 11}
	jobs, err := g.Generate([]float64{30, 120, 900, 3000, 7200, 20000, 50000, 90000, 200000, 400000})
	if err != nil {
		t.Fatal(err)
	}
	flat, open, closed := g.Quota(), g.TreeQuota(1), g.TreeQuota(0)
	for _, q := range []quota.Config{open, closed} {
		if err := q.Validate(); err != nil {
			t.Fatal(err)
		}
		pools := q.SharedPool.GPUs
		for _, d := range q.Groups {
			pools += d.GPUs
		}
		if pools != flat.SharedPool.GPUs {
			t.Errorf("the tree's pools hold %d GPUs, the flat pool %d", pools, flat.SharedPool.GPUs)
		}
	}
	run := func(q quota.Config) TimedResult {
		cfg := timedPolicy(t, "bestfit", jobs, g.Cluster())
		cfg.Quota, cfg.Queue = &q, QueueDRF
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a, b := run(flat), run(open)
	if !slices.EqualFunc(a.Waits, b.Waits, func(x, y JobWait) bool { return x.Wait == y.Wait }) {
		t.Error("a tree lending whole department pools waits differently from the flat pool")
	}
	c := run(closed)
	for _, ts := range c.Teams {
		// Whole GPUs: the guarantee, then the department's pool and the
		// shared pool's (the other department lends nothing); memory
		// shares count as fractions of a GPU.
		dept := closed.Groups[closed.Teams[ts.Team].Group]
		tm := closed.Teams[ts.Team]
		reach := closed.Reachable(ts.Team)
		if reach.GPUs != tm.GPUs+min(tm.Borrow.GPUs, dept.GPUs+closed.SharedPool.GPUs) {
			t.Errorf("team %s reaches %d GPUs in the isolated tree", ts.Team, reach.GPUs)
		}
		if most := float64(reach.GPUs) + float64(reach.MemoryMiB)/float64(GPUMemoryMiB); ts.PeakGPUs > most+1e-9 {
			t.Errorf("team %s peaked at %.1f GPUs in the isolated tree, more than it reaches (%v)", ts.Team, ts.PeakGPUs, reach)
		}
	}
	if slices.EqualFunc(a.Waits, c.Waits, func(x, y JobWait) bool { return x.Wait == y.Wait }) {
		t.Error("isolated departments wait exactly as the flat pool: the tree made no difference in this run")
	}
}
