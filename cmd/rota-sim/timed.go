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

	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/sim"
)

// timedPolicies is the default policy list of --mode time.
const timedPolicies = "bestfit,fgd,fragmentation-aware"

// runTimed is --mode time: one replay per policy (in parallel), for the
// first seed, of either the synthetic gang workload or the pod lists'
// creation and deletion times.
func runTimed(o options, seeds []uint64, stdout io.Writer) error {
	policies := strings.Split(o.policies, ",")
	if o.policies == strings.Join(sim.DefaultPolicies, ",") {
		policies = strings.Split(timedPolicies, ",")
	}
	var (
		nodes []sim.Node
		jobs  []sim.Job
		q     *quota.Config
		title string
		err   error
	)
	switch o.workload {
	case "gang":
		g := sim.DefaultGangLoad()
		g.Jobs, g.Load, g.Seed = o.jobs, o.load, seeds[0]
		rt, err := readFile(o.runtimes, func(r io.Reader) ([]float64, error) {
			v, err := sim.ReadRuntimes(r)
			return v, err
		})
		if err != nil {
			return err
		}
		if jobs, err = g.Generate(rt); err != nil {
			return err
		}
		nodes = g.Cluster()
		qc := g.Quota()
		q = &qc
		title = fmt.Sprintf("gang workload: %d jobs, %d nodes (%d leaves x %d) x %d GPUs, offered load %.2f, seed %d",
			len(jobs), len(nodes), g.Leaves, g.NodesPerLeaf, g.GPUsPerNode, g.Load, g.Seed)
	case "trace":
		paths, err := podPaths(o.pods)
		if err != nil {
			return err
		}
		if len(paths) != 1 {
			return errors.New("--mode time --workload trace: give one pod list")
		}
		if nodes, err = readFile(o.nodes, sim.ReadNodes); err != nil {
			return err
		}
		pods, err := readFile(paths[0], sim.ReadPods)
		if err != nil {
			return err
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
	var workload []sim.Pod
	for _, j := range jobs {
		for range j.Size {
			workload = append(workload, j.Member)
		}
	}
	w := sim.WorkloadOf(workload, sim.WorkloadOptions{})
	start := time.Now()
	type run struct {
		policy string
		queue  sim.QueueMode
	}
	var runs []run
	for _, name := range policies {
		for q := range strings.SplitSeq(o.queue, ",") {
			runs = append(runs, run{strings.TrimSpace(name), sim.QueueMode(strings.TrimSpace(q))})
		}
	}
	results := make([]sim.TimedResult, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, o.workers)
	var wg sync.WaitGroup
	for i, r := range runs {
		if r.queue != sim.QueueFIFO && r.queue != sim.QueueDRF {
			return fmt.Errorf("--queue %q: want fifo, drf or both, comma-separated", r.queue)
		}
		pol, err := sim.NewPolicy(r.policy, w, seeds[0], nodes)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = sim.RunTimed(sim.TimedConfig{Nodes: nodes, Jobs: jobs, Policy: pol, Quota: q, Check: o.check, Queue: r.queue})
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s, %s queue: %w", r.policy, r.queue, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n\n", title)
	if err := sim.WriteTimedTable(stdout, results); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d runs in %s with %d workers\n", len(runs), time.Since(start).Round(time.Millisecond), o.workers)
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
	if err := sim.WriteUtilCSV(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
