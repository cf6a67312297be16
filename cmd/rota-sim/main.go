// Command rota-sim replays GPU pod lists (Alibaba openb, or the generic CSV
// format in README.md) against a simulated cluster through Rota's placement
// engine and compares placement policies: a table of GPU allocation ratios
// at 100 % arrived GPU request, a CSV of the curves and an SVG chart.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/sim"
)

type options struct {
	pods       string
	nodes      string
	policies   string
	seeds      string
	tune       float64
	out        string
	workers    int
	popularity float64
	check      bool
	progress   string
	// moves: the static mode's move budget (share of arrived pods).
	moves          float64
	movesPerPod    int
	moveCandidates int
	// writeWorkload: write the pod list's shapes as a workload file, and exit.
	writeWorkload string
	// time mode
	mode        string
	workload    string
	load        float64
	maxDuration time.Duration
	jobs        int
	queue       string
	runtimes    string
	copies      int
	quota       bool
	// time mode, reservations
	reserve         bool
	reserveLarge    int64
	reserveMaxAge   time.Duration
	maxHold         time.Duration
	coolOff         time.Duration
	maxReservations int
	reserveSlack    time.Duration
	runtimeFactor   string
	factorMin       float64
	factorMax       float64
	undeclared      float64
	defaultRuntime  time.Duration
	reserveQuota    bool
	// time mode, reclaim
	reclaim      string
	reclaimModes []sim.ReclaimMode
	// reclaimQuotaOnly evicts whatever frees quota, room or not.
	reclaimQuotaOnly bool
	// halfLife adds a drf variant with fair share's memory.
	halfLife time.Duration
	// quotaTree adds a drf variant with the gang mix's quota as a tree.
	quotaTree     bool
	quotaTreeLend float64
	// deadlines gives that share of jobs a deadline; deadlineLead is the
	// lead of the drf variant added to order by them.
	deadlines    float64
	deadlineLead time.Duration
	maxGangSize  int
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rota-sim:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("rota-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.pods, "pods", "testdata/openb/openb_pod_list_default.csv", "pod list CSV files or globs, comma-separated")
	fs.StringVar(&o.nodes, "nodes", "testdata/openb/openb_node_list_gpu_node.csv", "node list CSV")
	fs.StringVar(&o.policies, "policies", strings.Join(sim.DefaultPolicies, ","), "policies, comma-separated; one of "+strings.Join(sim.PolicyNames, ", "))
	fs.StringVar(&o.seeds, "seeds", "42-51", "seeds: a count N (42..42+N-1), a range A-B, or a list A,B,C")
	fs.Float64Var(&o.tune, "tune", sim.DefaultTune, "pods arrive until their GPU request reaches tune x GPU capacity")
	fs.StringVar(&o.out, "out", "", "directory for table.md, results.csv, curves.csv and SVG charts (empty: table on stdout only)")
	fs.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "runs in parallel")
	fs.Float64Var(&o.popularity, "popularity", 0, "keep only the most common pod shapes covering this share of pods in the target workload (0: all)")
	fs.BoolVar(&o.check, "check", false, "run ledger.Check after every placement (slow)")
	fs.StringVar(&o.writeWorkload, "write-workload", "", "write the --pods list's pod shapes (weights = shares of pods) as a rota-extender --workload-file to this path, and exit")
	fs.StringVar(&o.progress, "progress", "auto", "progress display: auto (bar on a terminal, lines otherwise), bar, lines, none")
	fs.Float64Var(&o.moves, "moves", 0, "static mode: a pod that fits no node may move placed pods off one node to make room, at most this share of the pods arrived so far over the run (0: no moves, the FGD protocol)")
	fs.IntVar(&o.movesPerPod, "moves-per-pod", sim.DefaultMaxMovesPerPod, "static mode, --moves: most pods moved for one arriving pod")
	fs.IntVar(&o.moveCandidates, "move-candidates", 0, "static mode, --moves: pods per node a move plan considers (0: the engine's default, 12)")
	fs.StringVar(&o.mode, "mode", "static", "static: the FGD protocol (pods never leave); time: pods arrive, queue, run and leave")
	fs.StringVar(&o.workload, "workload", "gang", "time mode: gang (synthetic teams, gangs and topology) or trace (the --pods lists' creation and deletion times)")
	fs.Float64Var(&o.load, "load", 0.9, "time mode: offered GPU load (GPU-seconds asked per GPU-second of capacity)")
	fs.DurationVar(&o.maxDuration, "max-duration", 7*24*time.Hour, "time mode, trace: cap on a pod's duration")
	fs.IntVar(&o.copies, "copies", 3, "time mode, trace: submit the pod list this many times over")
	fs.IntVar(&o.jobs, "jobs", 2000, "time mode, gang: jobs to generate")
	fs.StringVar(&o.queue, "queue", "fifo,drf", "time mode: queue disciplines, comma-separated: fifo (quota in arrival order, then priority and arrival) and drf (Rota's queue controller, pkg/queue)")
	fs.StringVar(&o.runtimes, "runtimes", "testdata/philly/philly_runtime.csv", "time mode, gang: job runtime sample (CSV column runtime, seconds)")
	fs.BoolVar(&o.quota, "quota", true, "time mode, gang: charge the teams' jobs against their quota (false: every job is admitted at once and waits only for room)")
	fs.BoolVar(&o.reserve, "reserve", false, "time mode: with the drf queue, also run each drf replay with reservation and backfill (pkg/reserve), every --seeds seed, and compare")
	fs.Int64Var(&o.reserveLarge, "reserve-large-gpus", 64, "time mode, --reserve: a job of at least this many GPUs is held for as soon as it waits for room")
	fs.DurationVar(&o.reserveMaxAge, "reserve-max-age", 30*time.Minute, "time mode, --reserve: a smaller job is held for once it has waited this long")
	fs.DurationVar(&o.maxHold, "max-hold", 2*time.Hour, "time mode, --reserve: a hold whose job has not started this long after it was first held is released")
	fs.DurationVar(&o.coolOff, "cool-off", 30*time.Minute, "time mode, --reserve: how long a released job is not held for again")
	fs.IntVar(&o.maxReservations, "max-reservations", 4, "time mode, --reserve: holds at once")
	fs.DurationVar(&o.reserveSlack, "reserve-slack", 15*time.Minute, "time mode, --reserve: how much later than the best domain's the held domain's expected start may be and still be kept")
	fs.StringVar(&o.runtimeFactor, "runtime-factor", "1-3", "time mode, --reserve: declared runtime = real runtime x a factor drawn uniformly from MIN-MAX")
	fs.Float64Var(&o.undeclared, "undeclared-share", 0.2, "time mode, --reserve: share of jobs that declare no runtime")
	fs.BoolVar(&o.reserveQuota, "reserve-quota", false, "time mode, --reserve: a large or old head that waits for its team's quota keeps it; later work of the team backfills only by declared runtime")
	fs.DurationVar(&o.defaultRuntime, "default-runtime", 0, "time mode, --reserve: estimated runtime of a running pod that declared none (0: it never ends as far as reservations go)")
	fs.StringVar(&o.reclaim, "reclaim", "", "time mode, drf queue: reclaim modes to compare, comma-separated, every --seeds seed: off, newest (newest admitted first), lost-work (least work lost since the last checkpoint first); jobs draw checkpoint intervals from the seed")
	fs.Float64Var(&o.deadlines, "deadlines", 0, "time mode: give this share of the jobs (0 to 1) a deadline (arrival + duration x U(1.2, 4); those without a declared runtime declare 1.25 x their duration), and also run each drf variant ordering by them (--deadline-lead)")
	fs.DurationVar(&o.deadlineLead, "deadline-lead", 30*time.Minute, "time mode, --deadlines: the queue's deadline lead, as rota-extender's --deadline-lead")
	fs.BoolVar(&o.quotaTree, "quota-tree", false, "time mode, gang workload: also run each drf variant with the teams' quota as a three-level tree (two departments with pools of their own, sharedPool smaller by as much; sim.GangLoad.TreeQuota)")
	fs.Float64Var(&o.quotaTreeLend, "quota-tree-lend", 0, "time mode, --quota-tree: the share of each department's pool it lends to the other department (0 to 1)")
	fs.DurationVar(&o.halfLife, "fair-share-half-life", 0, "time mode: also run each drf variant with fair share's memory of past use at this half-life (0: not)")
	fs.BoolVar(&o.reclaimQuotaOnly, "reclaim-quota-only", false, "time mode, --reclaim: evict whatever frees the waiting job's quota, even where it would still not fit (the queue controller's rule before it checked room)")
	fs.IntVar(&o.maxGangSize, "max-preemptible-gang-size", 8, "time mode, --reclaim: members of larger gangs are never evicted (0: any gang may be)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	if o.tune <= 0 || o.tune > 10 {
		errs = append(errs, fmt.Errorf("--tune %v: want a ratio in (0, 10]", o.tune))
	}
	if o.workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: want at least 1", o.workers))
	}
	if !(o.moves >= 0 && o.moves <= 1) || o.movesPerPod < 1 || o.moveCandidates < 0 {
		errs = append(errs, fmt.Errorf("--moves %v, --moves-per-pod %d, --move-candidates %d: want a share 0..1, at least 1, 0 or more", o.moves, o.movesPerPod, o.moveCandidates))
	}
	if o.popularity < 0 || o.popularity > 1 {
		errs = append(errs, fmt.Errorf("--popularity %v: want 0..1", o.popularity))
	}
	switch o.mode {
	case "static", "time":
	default:
		errs = append(errs, fmt.Errorf("--mode %q: want static or time", o.mode))
	}
	switch o.workload {
	case "gang", "trace":
	default:
		errs = append(errs, fmt.Errorf("--workload %q: want gang or trace", o.workload))
	}
	if o.load <= 0 || o.load > 10 {
		errs = append(errs, fmt.Errorf("--load %v: want a ratio in (0, 10]", o.load))
	}
	if o.copies < 1 || o.copies > 100 {
		errs = append(errs, fmt.Errorf("--copies %d: want 1..100", o.copies))
	}
	if o.jobs < 1 || o.jobs > 1_000_000 {
		errs = append(errs, fmt.Errorf("--jobs %d: want 1..1000000", o.jobs))
	}
	if o.reserve {
		a, b, ok := strings.Cut(o.runtimeFactor, "-")
		lo, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
		hi, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
		if !ok || err1 != nil || err2 != nil || !(lo > 0) || !(hi >= lo) || hi > 1000 {
			errs = append(errs, fmt.Errorf("--runtime-factor %q: want MIN-MAX with 0 < MIN <= MAX", o.runtimeFactor))
		}
		o.factorMin, o.factorMax = lo, hi
		if !(o.undeclared >= 0 && o.undeclared <= 1) {
			errs = append(errs, fmt.Errorf("--undeclared-share %v: want 0..1", o.undeclared))
		}
		if o.reserveLarge < 1 || o.maxReservations < 1 || o.maxHold <= 0 || o.coolOff <= 0 || o.reserveMaxAge <= 0 ||
			o.reserveSlack <= 0 || o.defaultRuntime < 0 {
			errs = append(errs, errors.New("--reserve-large-gpus, --max-reservations, --max-hold, --cool-off, --reserve-max-age and --reserve-slack: want positive values; --default-runtime: want 0 or more"))
		}
		if !strings.Contains(o.queue, "drf") {
			errs = append(errs, fmt.Errorf("--reserve with --queue %q: reservations need the drf queue", o.queue))
		}
	}
	if o.reclaim != "" {
		for m := range strings.SplitSeq(o.reclaim, ",") {
			switch m = strings.TrimSpace(m); m {
			case "off":
				o.reclaimModes = append(o.reclaimModes, sim.ReclaimOff)
			case string(sim.ReclaimNewest), string(sim.ReclaimLostWork):
				o.reclaimModes = append(o.reclaimModes, sim.ReclaimMode(m))
			default:
				errs = append(errs, fmt.Errorf("--reclaim %q: want off, newest or lost-work, comma-separated", m))
			}
		}
		if o.reserve || !strings.Contains(o.queue, "drf") || o.maxGangSize < 0 {
			errs = append(errs, errors.New("--reclaim: needs the drf queue, no --reserve, and --max-preemptible-gang-size 0 or more"))
		}
	}
	if o.quotaTreeLend < 0 || o.quotaTreeLend > 1 {
		errs = append(errs, fmt.Errorf("--quota-tree-lend %g: want a share from 0 to 1", o.quotaTreeLend))
	}
	switch o.progress {
	case "auto", "bar", "lines", "none":
	default:
		errs = append(errs, fmt.Errorf("--progress %q: want auto, bar, lines or none", o.progress))
	}
	return o, errors.Join(errs...)
}

func parseSeeds(s string) ([]uint64, error) {
	s = strings.TrimSpace(s)
	if a, b, ok := strings.Cut(s, "-"); ok {
		lo, err1 := strconv.ParseUint(a, 10, 64)
		hi, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil || hi < lo || hi-lo > 10000 {
			return nil, fmt.Errorf("--seeds %q: want A-B with A <= B", s)
		}
		var out []uint64
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	if !strings.Contains(s, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10000 {
			return nil, fmt.Errorf("--seeds %q: want a count, a range A-B or a list", s)
		}
		out := make([]uint64, n)
		for i := range out {
			out[i] = 42 + uint64(i)
		}
		return out, nil
	}
	var out []uint64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds %q: %q is not a seed", s, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func readFile[T any](path string, read func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func podPaths(spec string) ([]string, error) {
	var out []string
	for p := range strings.SplitSeq(spec, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("--pods %q: %w", p, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("--pods %q: no such file", p)
		}
		out = append(out, m...)
	}
	if len(out) == 0 {
		return nil, errors.New("--pods: no pod list given")
	}
	return out, nil
}

type job struct {
	list, policy int
	seed         uint64
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	seeds, err := parseSeeds(o.seeds)
	if err != nil {
		return err
	}
	if o.mode == "time" {
		return runTimed(o, seeds, stdout)
	}
	paths, err := podPaths(o.pods)
	if err != nil {
		return err
	}
	nodes, err := readFile(o.nodes, sim.ReadNodes)
	if err != nil {
		return err
	}
	var policies []string
	for p := range strings.SplitSeq(o.policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			policies = append(policies, p)
		}
	}
	lists := make([][]sim.Pod, len(paths))
	names := make([]string, len(paths))
	works := make([]placement.Workload, len(paths))
	for i, p := range paths {
		if lists[i], err = readFile(p, sim.ReadPods); err != nil {
			return err
		}
		names[i] = strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "openb_pod_list_"), ".csv")
		works[i] = sim.WorkloadOf(lists[i], sim.WorkloadOptions{Popularity: o.popularity})
		if o.writeWorkload != "" {
			if len(paths) != 1 {
				return fmt.Errorf("--write-workload: give one pod list, not %d", len(paths))
			}
			return writeWorkload(o.writeWorkload, paths[0], works[0], stdout)
		}
		// Validate every policy name before any run starts.
		for _, pol := range policies {
			if _, err := sim.NewPolicy(pol, works[i], 0, nodes); err != nil {
				return err
			}
		}
	}

	var jobs []job
	for li := range paths {
		for pi := range policies {
			for _, s := range seeds {
				jobs = append(jobs, job{li, pi, s})
			}
		}
	}
	results := make([][]sim.Result, len(paths)*len(policies))
	var mu sync.Mutex
	prog := newProgress(stderr, o.progress, len(jobs))
	start := time.Now()
	ch := make(chan job)
	errc := make(chan error, o.workers)
	var wg sync.WaitGroup
	for range min(o.workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				pol, err := sim.NewPolicy(policies[j.policy], works[j.list], j.seed, nodes)
				if err != nil {
					errc <- err
					return
				}
				slot := prog.slot()
				r, err := sim.Run(sim.Config{Nodes: nodes, Pods: lists[j.list], Policy: pol, Seed: j.seed, Tune: o.tune,
					Metric: works[j.list], Check: o.check, Progress: slot,
					MoveBudget: o.moves, MaxMovesPerPod: o.movesPerPod, MaxCandidates: o.moveCandidates})
				if err != nil {
					errc <- fmt.Errorf("%s, %s, seed %d: %w", names[j.list], policies[j.policy], j.seed, err)
					return
				}
				line := fmt.Sprintf("%s %s seed %d: %.2f%% allocated at 100%% arrived", names[j.list], policies[j.policy], j.seed, r.At(100).Alloc)
				if o.moves > 0 {
					p := r.At(100)
					line += fmt.Sprintf(", %d pods moved of %d arrived by then", p.Moves, p.Arrived)
				}
				prog.done(line)
				mu.Lock()
				results[j.list*len(policies)+j.policy] = append(results[j.list*len(policies)+j.policy], r)
				mu.Unlock()
			}
		}()
	}
	var runErr error
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case runErr = <-errc:
			break feed
		}
	}
	close(ch)
	wg.Wait()
	prog.finish()
	if runErr == nil {
		select {
		case runErr = <-errc:
		default:
		}
	}
	if runErr != nil {
		return runErr
	}
	elapsed := time.Since(start)

	var series []sim.Series
	for li := range paths {
		for pi := range policies {
			rs := results[li*len(policies)+pi]
			sortResults(rs)
			series = append(series, sim.Series{Pods: names[li], Policy: policies[pi], Results: rs})
		}
	}
	if err := sim.WriteTable(stdout, series, 100); err != nil {
		return err
	}
	if o.moves > 0 {
		fmt.Fprintf(stdout, "\nMoves (--moves %g, --moves-per-pod %d)\n\n", o.moves, o.movesPerPod)
		if err := sim.WriteMovesTable(stdout, series, 100); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\n%d runs (%d pod lists x %d policies x %d seeds) in %s with %d workers\n",
		len(jobs), len(paths), len(policies), len(seeds), elapsed.Round(time.Millisecond), o.workers)
	if o.out == "" {
		return nil
	}
	return writeOutputs(o.out, names, series)
}

func sortResults(rs []sim.Result) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Seed < rs[j-1].Seed; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func writeOutputs(dir string, lists []string, series []sim.Series) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	write := func(name string, f func(io.Writer) error) error {
		path := filepath.Join(dir, name)
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		return fh.Close()
	}
	errs := []error{
		write("table.md", func(w io.Writer) error { return sim.WriteTable(w, series, 100) }),
		write("results.csv", func(w io.Writer) error { return sim.WriteResultsCSV(w, series, 100) }),
		write("curves.csv", func(w io.Writer) error { return sim.WriteCurvesCSV(w, series) }),
	}
	for _, l := range lists {
		var ss []sim.Series
		for _, s := range series {
			if s.Pods == l {
				ss = append(ss, s)
			}
		}
		errs = append(errs, write("alloc_"+l+".svg", func(w io.Writer) error {
			return sim.WriteSVG(w, "GPU allocation vs arrived GPU request: "+l, ss, 0)
		}))
	}
	return errors.Join(errs...)
}

// progress shows runs done: a bar redrawn in place on a terminal, or one
// plain line per finished run otherwise.
type progress struct {
	w     io.Writer
	mode  string
	total int
	mu    sync.Mutex
	fin   int
	// partial holds each running run's fraction done, in 1/1000.
	partial []*atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, mode string, total int) *progress {
	if mode == "auto" {
		mode = "lines"
		if isTerminal(w) {
			mode = "bar"
		}
	}
	p := &progress{w: w, mode: mode, total: total, stop: make(chan struct{})}
	if mode == "bar" {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					p.draw()
					fmt.Fprintln(p.w)
					return
				case <-t.C:
					p.draw()
				}
			}
		}()
	}
	return p
}

// slot returns a Progress callback for one run.
func (p *progress) slot() func(done, total int) {
	v := new(atomic.Int64)
	p.mu.Lock()
	p.partial = append(p.partial, v)
	p.mu.Unlock()
	return func(done, total int) {
		if total > 0 {
			v.Store(int64(1000 * done / total))
		}
	}
}

func (p *progress) done(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fin++
	if p.mode == "lines" {
		fmt.Fprintf(p.w, "[%d/%d] %s\n", p.fin, p.total, line)
	}
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum int64
	for _, v := range p.partial {
		sum += v.Load()
	}
	frac := float64(sum) / 1000 / float64(max(p.total, 1))
	const width = 40
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r[%s%s] %5.1f%%  %d/%d runs", strings.Repeat("#", n), strings.Repeat(".", width-n), 100*frac, p.fin, p.total)
}

func (p *progress) finish() {
	if p.mode == "bar" {
		close(p.stop)
		p.wg.Wait()
	}
}

// writeWorkload writes w in the format rota-extender --workload-file reads.
func writeWorkload(path, from string, w placement.Workload, stdout io.Writer) error {
	data, err := yaml.Marshal(w)
	if err != nil {
		return err
	}
	head := fmt.Sprintf("# Pod shapes of %s (rota-sim --write-workload): weight = share of pods.\n"+
		"# Use with: rota-extender --policy=fragmentation-aware --workload-file=%s\n", filepath.Base(from), filepath.Base(path))
	if err := os.WriteFile(path, append([]byte(head), data...), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d pod shapes of %s to %s\n", len(w), from, path)
	return nil
}
