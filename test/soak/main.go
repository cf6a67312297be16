// Command soak is Rota's chaos soak (make soak): the evaluation's mixed
// workload, wave after wave, on a real control plane with Rota's services
// at the chart's defaults (two extender replicas, two webhook replicas,
// device plugins), while a seeded fault plan kills, pauses and restarts
// every part at random: Rota's processes, the nodes' heartbeats,
// kube-scheduler, kube-apiserver and etcd. The invariant checker runs every
// few seconds throughout; at each quiet point between load segments every
// Rota process's live heap, goroutines and open files are measured. It
// fails on any broken invariant, any job lost, and any leak.
//
// Usage:
//
//	go run ./test/soak -duration 30m -out out/soak
//	go run ./test/soak -plan out/soak/plan.json   # the same fault plan again
//
// It needs make build and make k8s-tools (the Makefile target does both).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	duration time.Duration
	seed     uint64
	plan     string
	out      string
	// scale multiplies the generated jobs' runtimes (at least 5 s each),
	// so that waves drain in minutes.
	scale float64
	keep  bool
	// nextBin holds the next build's binaries (make build-next) for the
	// rolling upgrade.
	nextBin string
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the load runs (the drains at the quiet points come on top)")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the fault plan and the workload (printed; pass it again to draw the same plan)")
	flag.StringVar(&o.plan, "plan", "", "run the fault plan of this plan.json (a failed run's) instead of drawing one")
	flag.StringVar(&o.out, "out", "out/soak", "folder for plan.json, report.md, samples.json and the heap plot")
	flag.Float64Var(&o.scale, "runtime-scale", 0.4, "multiplies every job's runtime")
	flag.BoolVar(&o.keep, "keep", false, "keep the control plane's folder (logs of every process)")
	flag.StringVar(&o.nextBin, "next-bin", "bin/next", "the next build's binaries (make build-next: the next version of Rota's documents), for the rolling upgrade and back")
	rerender := flag.String("rerender", "", "write the report again from this result.json into -out, and run nothing")
	flag.Parse()
	if *rerender != "" {
		if err := rewrite(*rerender, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := run(ctx, o, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if !res.Passed() {
		fmt.Fprintln(os.Stderr, "soak: FAILED:", res.FailureSummary())
		os.Exit(1)
	}
	logf("PASSED")
}

// rewrite renders result.json's report again (after a change to the
// report's code, or to look at an old run).
func rewrite(path, out string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return r.write(out)
}

func logf(format string, args ...any) {
	fmt.Printf("%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
