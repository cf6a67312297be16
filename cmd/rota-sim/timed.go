package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/reserve"
	"github.com/rota-sched/rota/pkg/sim"
)

// timedPolicies is the default policy list of --mode time.
const timedPolicies = "bestfit,fgd,fragmentation-aware"

// world is one seed's cluster and jobs.
type world struct {
	seed  uint64
	nodes []sim.Node
	jobs  []sim.Job
	q     *quota.Config
	// tree is q as a tree of departments (sim.GangLoad.TreeQuota).
	tree  *quota.Config
	title string
	w     placement.Workload
}

// timedWorld builds the cluster and the jobs of one seed: the synthetic
// gang workload or the pod list's creation and deletion times; with
// --reserve, the jobs declare runtimes.
func timedWorld(o options, seed uint64) (world, error) {
	var (
		nodes   []sim.Node
		jobs    []sim.Job
		q, tree *quota.Config
		title   string
		err     error
	)
	switch o.workload {
	case "gang":
		g := sim.DefaultGangLoad()
		g.Jobs, g.Load, g.Seed = o.jobs, o.load, seed
		rt, err := readFile(o.runtimes, func(r io.Reader) ([]float64, error) {
			v, err := sim.ReadRuntimes(r)
			return v, err
		})
		if err != nil {
			return world{}, err
		}
		if jobs, err = g.Generate(rt); err != nil {
			return world{}, err
		}
		nodes = g.Cluster()
		qc, tc := g.Quota(), g.TreeQuota(o.quotaTreeLend)
		q, tree = &qc, &tc
		title = fmt.Sprintf("gang workload: %d jobs, %d nodes (%d leaves x %d) x %d GPUs, offered load %.2f, seed %d",
			len(jobs), len(nodes), g.Leaves, g.NodesPerLeaf, g.GPUsPerNode, g.Load, g.Seed)
		if !o.quota {
			q, tree = nil, nil
			title += ", no quota"
		}
	case "trace":
		paths, err := podPaths(o.pods)
		if err != nil {
			return world{}, err
		}
		if len(paths) != 1 {
			return world{}, errors.New("--mode time --workload trace: give one pod list")
		}
		if nodes, err = readFile(o.nodes, sim.ReadNodes); err != nil {
			return world{}, err
		}
		pods, err := readFile(paths[0], sim.ReadPods)
		if err != nil {
			return world{}, err
		}
		var capGPUs float64
		for _, n := range nodes {
			capGPUs += float64(n.GPUs)
		}
		// The list is submitted o.copies times over (each copy at the same
		// times, names suffixed): one openb list asks for less than the
		// cluster's GPUs in total, so on its own it can never fill it.
		var all []sim.Pod
		for c := range o.copies {
			for _, p := range pods {
				p.Name = fmt.Sprintf("%s-c%d", p.Name, c)
				all = append(all, p)
			}
		}
		raw, skipped := sim.TraceJobs(all, 1, o.maxDuration.Seconds())
		c := sim.CompressFor(raw, capGPUs, o.load)
		jobs, _ = sim.TraceJobs(all, c, o.maxDuration.Seconds())
		title = fmt.Sprintf("trace %s x %d copies: %d pods (%d without times left out), arrivals compressed %.0fx for offered load %.2f, durations capped at %s",
			filepath.Base(paths[0]), o.copies, len(jobs), skipped, c, o.load, o.maxDuration)
	}
	if o.reserve {
		if jobs, err = sim.DeclareRuntimes(jobs, sim.DeclareOptions{FactorMin: o.factorMin, FactorMax: o.factorMax,
			Undeclared: o.undeclared, Seed: seed}); err != nil {
			return world{}, err
		}
		title += fmt.Sprintf("; declared runtimes: real x U(%g, %g), %.0f %% declare none", o.factorMin, o.factorMax, 100*o.undeclared)
	}
	if o.deadlines > 0 {
		jobs = sim.DrawDeadlines(jobs, o.deadlines, seed)
		title += fmt.Sprintf("; %.0f %% of jobs have a deadline", 100*o.deadlines)
	}
	if o.reclaim != "" {
		jobs = sim.DrawCheckpoints(jobs, seed)
		title += fmt.Sprintf("; checkpoint intervals drawn from %v s (0: none declared, %g s assumed)", sim.CheckpointIntervals, sim.DefaultCheckpointInterval)
	}
	var workload []sim.Pod
	for _, j := range jobs {
		for range j.Size {
			workload = append(workload, j.Member)
		}
	}
	return world{seed: seed, nodes: nodes, jobs: jobs, q: q, tree: tree, title: title, w: sim.WorkloadOf(workload, sim.WorkloadOptions{})}, nil
}

// variant is one column: a policy, a queue discipline, with or without
// reservations.
type variant struct {
	policy  string
	queue   sim.QueueMode
	reserve bool
	reclaim sim.ReclaimMode
	// reclaimOn marks the variants of --reclaim (its "off" included).
	reclaimOn bool
	// halfLife is fair share's memory (--fair-share-half-life).
	halfLife time.Duration
	// lead is the deadline lead (--deadlines, --deadline-lead).
	lead time.Duration
	// tree runs the gang mix's quota as a tree (--quota-tree).
	tree bool
}

// runTimed is --mode time: one replay per policy and queue discipline (in
// parallel), for the first seed; with --reserve also each drf replay with
// reservations, for every seed, and a table over the seeds.
func runTimed(o options, seeds []uint64, stdout io.Writer) error {
	policies := strings.Split(o.policies, ",")
	if o.policies == strings.Join(sim.DefaultPolicies, ",") {
		policies = strings.Split(timedPolicies, ",")
	}
	if !o.reserve && o.reclaim == "" {
		seeds = seeds[:1]
	}
	var variants []variant
	for _, name := range policies {
		for q := range strings.SplitSeq(o.queue, ",") {
			v := variant{policy: strings.TrimSpace(name), queue: sim.QueueMode(strings.TrimSpace(q))}
			if v.queue != sim.QueueFIFO && v.queue != sim.QueueDRF {
				return fmt.Errorf("--queue %q: want fifo, drf or both, comma-separated", v.queue)
			}
			if o.reclaim != "" {
				if v.queue == sim.QueueDRF {
					for _, m := range o.reclaimModes {
						v.reclaim, v.reclaimOn = m, true
						variants = append(variants, v)
						if o.quotaTree {
							tr := v
							tr.tree = true
							variants = append(variants, tr)
						}
					}
				}
				continue
			}
			variants = append(variants, v)
			if o.quotaTree && v.queue == sim.QueueDRF {
				tr := v
				tr.tree = true
				variants = append(variants, tr)
			}
			if o.halfLife > 0 && v.queue == sim.QueueDRF {
				h := v
				h.halfLife = o.halfLife
				variants = append(variants, h)
				if o.quotaTree {
					h.tree = true
					variants = append(variants, h)
				}
			}
			if o.deadlines > 0 && v.queue == sim.QueueDRF {
				d := v
				d.lead = o.deadlineLead
				variants = append(variants, d)
			}
			if o.reserve && v.queue == sim.QueueDRF {
				v.reserve = true
				variants = append(variants, v)
			}
		}
	}
	rsv := &sim.Reservation{Policy: reserve.Policy{LargeGPUs: o.reserveLarge, MaxAge: o.reserveMaxAge, MaxHold: o.maxHold,
		CoolOff: o.coolOff, Max: o.maxReservations, Slack: o.reserveSlack}, DefaultRuntime: o.defaultRuntime.Seconds(), ProtectQuota: o.reserveQuota}
	start := time.Now()
	worlds := make([]world, len(seeds))
	for i, seed := range seeds {
		var err error
		if worlds[i], err = timedWorld(o, seed); err != nil {
			return err
		}
	}
	results := make([][]sim.TimedResult, len(seeds))
	var errs []error
	var mu sync.Mutex
	sem := make(chan struct{}, o.workers)
	var wg sync.WaitGroup
	for si := range worlds {
		wd := &worlds[si]
		results[si] = make([]sim.TimedResult, len(variants))
		for vi, v := range variants {
			pol, err := sim.NewPolicy(v.policy, wd.w, wd.seed, wd.nodes)
			if err != nil {
				return err
			}
			cfg := sim.TimedConfig{Nodes: wd.nodes, Jobs: wd.jobs, Policy: pol, Quota: wd.q, Check: o.check, Queue: v.queue,
				FairShareHalfLife: v.halfLife.Seconds(), DeadlineLead: v.lead.Seconds()}
			if v.reserve {
				cfg.Reserve = rsv
			}
			cfg.Reclaim = v.reclaim
			cfg.ReclaimOptions = sim.ReclaimOptions{MaxPreemptibleGangSize: o.maxGangSize, QuotaOnly: o.reclaimQuotaOnly}
			if v.tree || v.halfLife > 0 || v.lead > 0 {
				cfg.Label = v.String()
			}
			if v.tree {
				if wd.tree == nil {
					return errors.New("--quota-tree needs the gang workload with quota")
				}
				cfg.Quota = wd.tree
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				r, err := sim.RunTimed(cfg)
				results[si][vi] = r
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("seed %d, %s: %w", wd.seed, v, err))
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n\n", worlds[0].title)
	if err := sim.WriteTimedTable(stdout, results[0]); err != nil {
		return err
	}
	if o.reserve {
		if err := writeReserveTable(stdout, o, variants, seeds, results); err != nil {
			return err
		}
	}
	if o.reclaim != "" {
		if err := writeReclaimTable(stdout, variants, seeds, results); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\n%d runs in %s with %d workers\n", len(seeds)*len(variants), time.Since(start).Round(time.Millisecond), o.workers)
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(o.out, "utilization.csv"))
	if err != nil {
		return err
	}
	if err := sim.WriteUtilCSV(f, results[0]); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (v variant) String() string {
	s := v.policy + ", " + string(v.queue) + " queue"
	if v.reserve {
		s += " + reservations"
	}
	if v.reclaimOn {
		s += ", reclaim " + string(cmpOr(v.reclaim, "off"))
	}
	if v.halfLife > 0 {
		s += ", fair-share memory " + v.halfLife.String()
	}
	if v.lead > 0 {
		s += ", deadline lead " + v.lead.String()
	}
	if v.tree {
		s += ", quota tree"
	}
	return s
}

func cmpOr(m sim.ReclaimMode, def sim.ReclaimMode) sim.ReclaimMode {
	if m == "" {
		return def
	}
	return m
}

// meanWait is every job's mean wait in r, seconds.
func meanWait(r sim.TimedResult) float64 {
	if len(r.Waits) == 0 {
		return 0
	}
	var sum float64
	for _, w := range r.Waits {
		sum += w.Wait
	}
	return sum / float64(len(r.Waits))
}

// writeReclaimTable writes one row per (variant, seed) and one per variant
// over the seeds: reclaims, evictions, work lost, the waits of the gangs of
// sim.LargeGangGPUs GPUs or more, and every job's median and mean wait.
func writeReclaimTable(w io.Writer, variants []variant, seeds []uint64, results [][]sim.TimedResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nReclaim over %d seeds (%s); waits in hours, every stretch a job spent queued (after an eviction too)\n\n", len(seeds), seedList(seeds))
	b.WriteString("| variant | seed | reclaims | not made: no room | evictions | lost GPU-hours | gangs of 64+ GPUs | their mean wait | their max wait | p50 wait, all jobs | mean wait, all jobs | mean GPU allocation (%) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for vi, v := range variants {
		var rec, noRoom, ev, lost, gangs, mean, mx, p50, all, util float64
		for si, seed := range seeds {
			r := results[si][vi]
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %.1f | %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", v, seed, r.Reclaims, r.ReclaimsWithoutRoom, len(r.Evictions),
				r.LostWorkGPUHours, r.LargeGangs, r.LargeGangWaitMean/3600, r.LargeGangWaitMax/3600, r.Wait.P50/3600, meanWait(r)/3600, r.UtilMean)
			rec += float64(r.Reclaims)
			noRoom += float64(r.ReclaimsWithoutRoom)
			ev += float64(len(r.Evictions))
			lost += r.LostWorkGPUHours
			gangs += float64(r.LargeGangs)
			mean += r.LargeGangWaitMean
			mx = max(mx, r.LargeGangWaitMax)
			p50 += r.Wait.P50
			all += meanWait(r)
			util += r.UtilMean
		}
		n := float64(len(seeds))
		fmt.Fprintf(&b, "| **%s** | mean (max) | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | (%.2f) | %.2f | %.2f | %.2f |\n", v, rec/n, noRoom/n, ev/n, lost/n, gangs/n,
			mean/n/3600, mx/3600, p50/n/3600, all/n/3600, util/n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
