// Command evaluate is `make evaluate`: the proof of concept a platform team
// runs before adopting a GPU scheduler. The same seeded job set
// (pkg/evaluate: distributed training gangs, memory-heavy inference, short
// tasks, CPU preprocessing; three teams with quotas; jobs that can never
// fit) goes through each stack on a fresh local control plane started from
// the same binaries with the same simulated nodes, one stack after the
// other:
//
//   - stock: kube-scheduler's default profile, whole GPUs only (a memory
//     request becomes one whole GPU), a ResourceQuota per team namespace;
//   - kueue: the Kueue controller manager built at a pinned version beside
//     the default kube-scheduler (whole GPUs);
//   - rota: Rota with the chart's defaults, Jobs queued suspended.
//
// Pods run `sleep <runtime>`; on the simulated nodes a stand-in ends them
// when their sleep is over, so Jobs complete as on a real cluster. The
// figures come from what the API server recorded (pkg/evaluate.Summarize)
// and go to out/evaluate/report.md and results.json.
//
//	go run ./test/evaluate [-size small|full] [-scenarios contention,mixed,burst] [-stacks stock,kueue,rota]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

type options struct {
	size      evaluate.Size
	scenarios []string
	stacks    []string
	seed      uint64
	out       string
	image     string
	deadline  time.Duration
	keep      bool
	// existing, when set, is a cluster the evaluation does not start
	// (-kubeconfig).
	existing *existingStack
}

func main() {
	var o options
	size := flag.String("size", "full", "small (CI: 4 nodes) or full (16 nodes)")
	scenarios := flag.String("scenarios", strings.Join(evaluate.ScenarioNames, ","), "scenarios to run")
	stacks := flag.String("stacks", "stock,kueue,rota", "stacks to run each scenario on")
	flag.Uint64Var(&o.seed, "seed", 7, "seed of the job set")
	flag.StringVar(&o.out, "out", "out/evaluate", "where the report goes")
	flag.StringVar(&o.image, "image", "busybox:1.36", "image of the pods (any with sleep)")
	flag.DurationVar(&o.deadline, "deadline", 0, "longest a scenario may run on one stack (default: 150s small, 300s full)")
	flag.BoolVar(&o.keep, "keep", false, "keep each control plane's folder (logs, audit log) after its run")
	kubeconfig := flag.String("kubeconfig", "", "measure the stack of this cluster instead of starting local ones (namespaces <prefix>-<team>, deleted afterwards)")
	prefix := flag.String("namespace-prefix", "rota-eval", "with -kubeconfig: prefix of the namespaces the job set runs in (they must not exist)")
	as := flag.String("as", "whole", "with -kubeconfig: how jobs ask for GPUs: whole (whole GPUs, NVIDIA's device plugin), rota (memory shares, team label, Jobs queued suspended) or kueue (whole GPUs through a LocalQueue per namespace)")
	kueueCQ := flag.String("kueue-cluster-queue", "", "with -as kueue: the ClusterQueue the namespaces' LocalQueues point at")
	domain := flag.String("domain", names.Domain, "resource domain of the GPUs (<domain>/gpu, <domain>/gpu-memory); nvidia.com for NVIDIA's device plugin")
	label := flag.String("stack-name", "existing", "with -kubeconfig: the stack's name in the report")
	from := flag.String("from", "", "render the report again from this results.json (no run)")
	klog.InitFlags(nil)
	flag.Parse()
	switch *size {
	case "small":
		o.size = evaluate.Small
	case "full":
		o.size = evaluate.Full
	default:
		fmt.Fprintf(os.Stderr, "-size %q: want small or full\n", *size)
		os.Exit(2)
	}
	if o.deadline <= 0 {
		o.deadline = map[evaluate.Size]time.Duration{evaluate.Small: 150 * time.Second, evaluate.Full: 300 * time.Second}[o.size]
	}
	o.scenarios = strings.Split(*scenarios, ",")
	o.stacks = strings.Split(*stacks, ",")
	n, err := contract.NewNames(*domain)
	if err != nil {
		fmt.Fprintf(os.Stderr, "-domain: %v\n", err)
		os.Exit(2)
	}
	names = n
	if *kubeconfig != "" {
		if !slices.Contains([]string{"whole", "rota", "kueue"}, *as) || (*as == "kueue") != (*kueueCQ != "") {
			fmt.Fprintln(os.Stderr, "-as: whole, rota or kueue; -kueue-cluster-queue with -as kueue, and only then")
			os.Exit(2)
		}
		o.existing = &existingStack{kubeconfig: *kubeconfig, prefix: *prefix, as: *as, kueueCQ: *kueueCQ, names: n, label: *label}
		o.stacks = []string{*label}
	}
	for _, s := range o.scenarios {
		if evaluate.Scenarios[s] == nil {
			fmt.Fprintf(os.Stderr, "-scenarios: %q is not one of %v\n", s, evaluate.ScenarioNames)
			os.Exit(2)
		}
	}
	for _, s := range o.stacks {
		if o.existing == nil && !slices.Contains([]string{"stock", "kueue", "rota"}, s) {
			fmt.Fprintf(os.Stderr, "-stacks: %q is not one of stock, kueue, rota\n", s)
			os.Exit(2)
		}
	}
	if *from != "" {
		if err := rerender(*from, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "evaluate:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "evaluate:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	root, err := filepath.Abs(".")
	if err != nil {
		return err
	}
	var runs []evaluate.Run
	var scs []evaluate.Scenario
	began := time.Now()
	for _, name := range o.scenarios {
		sc := evaluate.Scenarios[name](o.seed, o.size)
		scs = append(scs, sc)
		for _, stackName := range o.stacks {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logf("== %s on %s: %d jobs, %d nodes x %d GPUs, %d teams", name, stackName, len(sc.Jobs),
				sc.Cluster.Nodes, sc.Cluster.GPUsPerNode, len(sc.Teams))
			st := newStack(stackName, root)
			if o.existing != nil {
				st = o.existing
			}
			r := runOne(ctx, st, sc, o)
			runs = append(runs, r)
			res := evaluate.Summarize(r, sc.Compression)
			if r.Skipped != "" {
				logf("   %s not run: %s", stackName, r.Skipped)
				continue
			}
			logf("   done: %d completed, %d failed, %d never started; makespan %.0fs, mean GPU use %.0f%%",
				res.Completed, res.Failed, res.NeverStarted, res.Makespan, 100*res.MeanUse)
		}
	}
	rep := newReport(scs, runs, o, time.Since(began))
	if err := rep.write(o.out); err != nil {
		return err
	}
	logf("report: %s", filepath.Join(o.out, "report.md"))
	return nil
}

func newStack(name, root string) stack {
	switch name {
	case "stock":
		return &stockStack{}
	case "rota":
		return &rotaStack{}
	}
	return &kueueStack{root: root}
}

// runOne runs one scenario on one stack and records it.
func runOne(ctx context.Context, st stack, sc evaluate.Scenario, o options) (r evaluate.Run) {
	r = evaluate.Run{Stack: stackName(st), Scenario: sc.Name, Cluster: sc.Cluster, Teams: sc.Teams}
	dir, err := os.MkdirTemp("", "rota-evaluate-")
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	if o.keep {
		logf("   folder: %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if err := st.start(ctx, sc, dir); err != nil {
		r.Skipped = "could not start: " + err.Error()
		if serr := st.stop(); serr != nil {
			r.Skipped += "; stopping: " + serr.Error()
		}
		return r
	}
	defer func() {
		if err := st.stop(); err != nil {
			logf("   stopping %s: %v", r.Stack, err)
		}
	}()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := st.client()
	sleeper := cluster.NewSleeper(client, st.playsNode)
	rec := newRecorder(st.shape(), sc.Jobs, sc.Cluster.GPUMemoryGiB)
	if err := sleeper.Start(rctx); err != nil {
		r.Skipped = "container stand-in: " + err.Error()
		return r
	}
	if err := rec.start(rctx, client); err != nil {
		r.Skipped = "recorder: " + err.Error()
		return r
	}
	cpu0 := cpuSeconds(st.pids())
	r.Start = time.Now()
	submitted := make(chan error, 1)
	var refused []evaluate.JobRecord // written before submitted is sent
	go func() {
		var err error
		refused, err = submit(rctx, st, sc, o.image, r.Start)
		submitted <- err
	}()
	jobs := map[string]evaluate.Job{}
	var nss []string
	for _, j := range sc.Jobs {
		jobs[j.Name] = j
	}
	for _, t := range sc.Teams {
		nss = append(nss, st.namespace(t.Name))
	}
	var checks []evaluate.Check
	deadline := time.After(o.deadline)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	submitDone := false
	for done := false; !done; {
		select {
		case <-ctx.Done():
			r.Skipped = "interrupted"
			return r
		case err := <-submitted:
			submitDone = true
			if err != nil {
				checks = append(checks, evaluate.Check{Name: "submission", Violations: []string{err.Error()}})
			}
		case <-deadline:
			logf("   deadline (%s) reached", o.deadline)
			done = true
		case <-tick.C:
			recs, err := jobRecords(ctx, client, jobs, nss)
			if err != nil {
				logf("   reading jobs: %v", err)
				continue
			}
			finished, fitting := 0, 0
			for _, jr := range recs {
				if jr.Job.NeverFits {
					continue
				}
				fitting++
				if !jr.Completed.IsZero() || jr.Failed {
					finished++
				}
			}
			running, gpus := rec.progress()
			logf("   %s/%s %3.0fs: %d/%d fitting jobs done, %d pods running on %.1f of %d GPUs",
				r.Stack, sc.Name, time.Since(r.Start).Seconds(), finished, fitting, running, gpus, sc.Cluster.GPUs())
			if submitDone && fitting > 0 && finished == fitting {
				done = true
			}
		}
	}
	r.End = time.Now()
	cpu1 := cpuSeconds(st.pids())
	for name, s := range cpu1 {
		r.Processes = append(r.Processes, evaluate.Process{Name: name, CPUSeconds: s - cpu0[name]})
	}
	slices.SortFunc(r.Processes, func(a, b evaluate.Process) int { return strings.Compare(a.Name, b.Name) })
	if r.Jobs, err = jobRecords(ctx, client, jobs, nss); err != nil {
		checks = append(checks, evaluate.Check{Name: "reading the jobs", Violations: []string{err.Error()}})
	}
	if submitDone {
		r.Jobs = append(r.Jobs, refused...)
	}
	r.Pods = rec.records()
	r.Checks = append(checks, st.check(ctx)...)
	if _, theirs := st.(*existingStack); !theirs {
		// On a cluster of its own the evaluation knows every node and
		// quota; on someone else's, the nodes and quotas are theirs.
		r.Checks = append(r.Checks, recordChecks(sc, r, st.shape())...)
	}
	files, err := st.auditFiles()
	if err == nil {
		r.APIWrites, err = writesByUser(files)
	}
	if err != nil {
		r.Checks = append(r.Checks, evaluate.Check{Name: "audit log", Violations: []string{err.Error()}})
	}
	return r
}

func stackName(st stack) string {
	switch s := st.(type) {
	case *stockStack:
		return "stock"
	case *rotaStack:
		return "rota"
	case *existingStack:
		return s.label
	}
	return "kueue"
}

// submit creates each job's object at its arrival time. A job that can
// never fit and that the API server refuses (a webhook's answer: Rota
// refuses at creation what can never run) is returned as refused; any
// other job not created is an error.
func submit(ctx context.Context, st stack, sc evaluate.Scenario, image string, start time.Time) (refused []evaluate.JobRecord, err error) {
	client := st.client()
	var errs []string
	for _, j := range sc.Jobs {
		select {
		case <-ctx.Done():
			return refused, ctx.Err()
		case <-time.After(time.Until(start.Add(j.Arrival))):
		}
		obj := evalkit.Object(j, st.namespace(j.Team), st.shape(), image, names)
		_, err := client.BatchV1().Jobs(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
		switch {
		case err == nil:
		case j.NeverFits && apierrors.IsForbidden(err):
			refused = append(refused, evaluate.JobRecord{Job: j, Created: time.Now(), Refused: err.Error()})
		default:
			errs = append(errs, fmt.Sprintf("job %s: %v", j.Name, err))
		}
	}
	if len(errs) > 0 {
		return refused, fmt.Errorf("%d jobs not created: %s", len(errs), strings.Join(errs, "; "))
	}
	return refused, nil
}

func cpuSeconds(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		if d, ok := cluster.CPUTime(pid); ok {
			out[name] = d.Seconds()
		}
	}
	return out
}
