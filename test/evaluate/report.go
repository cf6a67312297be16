package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/evaluate"
)

// report is the evaluation's results: the scenarios, each run and its
// figures.
type report struct {
	Date      time.Time
	Machine   string
	Seed      uint64
	Size      string
	Took      time.Duration
	Scenarios []evaluate.Scenario `json:"-"`
	// Runs are the records every figure comes from (-from renders the
	// report again from them).
	Runs    []evaluate.Run
	Results []evaluate.Result
}

func newReport(scs []evaluate.Scenario, runs []evaluate.Run, o options, took time.Duration) *report {
	r := &report{Date: time.Now().UTC(), Machine: machine(), Seed: o.seed, Size: map[evaluate.Size]string{evaluate.Small: "small", evaluate.Full: "full"}[o.size],
		Took: took.Round(time.Second), Scenarios: scs, Runs: runs}
	comp := map[string]float64{}
	for _, sc := range scs {
		comp[sc.Name] = sc.Compression
	}
	for _, run := range runs {
		r.Results = append(r.Results, evaluate.Summarize(run, comp[run.Scenario]))
	}
	return r
}

// rerender writes the report again from a results.json: the figures
// computed again from its runs where it keeps them, else as it holds them.
func rerender(path, dir string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	size := map[string]evaluate.Size{"small": evaluate.Small, "full": evaluate.Full}[r.Size]
	names := map[string]bool{}
	for _, res := range r.Results {
		if !names[res.Scenario] {
			names[res.Scenario] = true
			r.Scenarios = append(r.Scenarios, evaluate.Scenarios[res.Scenario](r.Seed, size))
		}
	}
	if len(r.Runs) > 0 {
		r.Results = nil
		comp := map[string]float64{}
		for _, sc := range r.Scenarios {
			comp[sc.Name] = sc.Compression
		}
		for _, run := range r.Runs {
			r.Results = append(r.Results, evaluate.Summarize(run, comp[run.Scenario]))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return r.write(dir)
}

// machine names the machine: CPUs and model, as /proc/cpuinfo says.
func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs %s, %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}

func (r *report) write(dir string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return r.writeHTML(dir)
}

func secs(v float64) string {
	if v == 0 {
		return "0"
	}
	if v < 10 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func waits(w evaluate.Waits) string {
	if w.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s / %s (%d)", secs(w.P50), secs(w.P95), secs(w.Max), w.N)
}

func (r *report) markdown() string {
	var b strings.Builder
	b.WriteString(r.markdownHeader())
	for _, sc := range r.Scenarios {
		fmt.Fprintf(&b, "## %s: %s\n\n", sc.Name, sc.About)
		b.WriteString(r.scenarioMarkdown(sc))
	}
	return b.String()
}

// markdownHeader is what the report says before the scenarios.
func (r *report) markdownHeader() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Rota evaluation: the same jobs through each stack\n\n")
	fmt.Fprintf(&b, "%s, %s, seed %d, size %s, %s in all. Command: `make evaluate` (`go run ./test/evaluate -size %s`).\n\n",
		r.Date.Format("2006-01-02 15:04 MST"), r.Machine, r.Seed, r.Size, r.Took, r.Size)
	b.WriteString("Times are wall seconds of the compressed run; job runtimes are compressed by the factor each scenario " +
		"names. Not compressed: the Job controller's back-off, Kueue's requeueing, Rota's hold and bind TTLs, lease " +
		"durations, the API server's and the schedulers' own latencies. Waits are job creation to the start of its " +
		"last pod (p50 / p95 / max, count). GPUs allocated are what the stack held for the running pods: whole GPUs plus " +
		"shares (a 40 GiB share of an 80 GiB GPU counts 0.5), a share counted as a whole GPU where the stack has no shares; " +
		"work served is what those pods asked for, the same on every stack; both over the cluster's GPUs. Fairness is Jain's index over each team's GPU-seconds against its guarantee.\n\n")
	b.WriteString("Checks: every run is checked from its own record, the same way for every stack (no node over its GPUs, " +
		"no team over its guarantee and the shared pool); Rota's runs also by its invariant checker and for whole gangs. " +
		"Whole gangs are not checked for stock (kube-scheduler places a Job's pods one by one) nor for Kueue (it admits a " +
		"Job's quota whole, its topology-aware scheduling picks every pod's node, and waitForPodsReady evicts a Job whose pods " +
		"do not all start; the record does not show a gang's pods as one unit to check).\n\n")
	return b.String()
}

// scenarioMarkdown is one scenario's tables.
func (r *report) scenarioMarkdown(sc evaluate.Scenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d nodes x %d GPUs (%d GiB each), racks of %d; teams %s with %d GPUs guaranteed each, %d in the shared pool; "+
		"%d jobs (%s); runtimes compressed %gx.\n\n", sc.Cluster.Nodes, sc.Cluster.GPUsPerNode, sc.Cluster.GPUMemoryGiB,
		sc.Cluster.RackSize, teamNames(sc), sc.Teams[0].GPUs, sc.Pool(), len(sc.Jobs), jobMix(sc), sc.Compression)
	results := r.resultsOf(sc.Name)
	b.WriteString("| stack | completed | failed | never started (could fit; refused at creation) | makespan s | GPUs allocated, mean / peak | work served, mean | fairness (Jain) | disrupted pods (GPU-h lost) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range results {
		if res.Skipped != "" {
			fmt.Fprintf(&b, "| %s | not run: %s ||||||||\n", res.Stack, oneLine(res.Skipped))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d (%d; %d) | %s | %.0f%% / %.0f%% | %.0f%% | %.2f | %d (%.2f) |\n", res.Stack, res.Completed, res.Failed,
			res.NeverStarted, res.NeverStartedFits, res.Refused, secs(res.Makespan), 100*res.MeanUse, 100*res.PeakUse, 100*res.MeanServed, res.Jain,
			res.Disrupted, res.LostGPUHours)
	}
	b.WriteString("\nQueue wait, seconds (p50 / p95 / max (jobs)):\n\n| stack | A training | A gangs of half the cluster or more | B inference | C short | D preprocessing |\n|---|---|---|---|---|---|\n")
	for _, res := range results {
		if res.Skipped != "" {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", res.Stack, waits(res.Wait["A"]), waits(res.Wait["big"]),
			waits(res.Wait["B"]), waits(res.Wait["C"]), waits(res.Wait["D"]))
	}
	b.WriteString("\nControl-plane cost per admitted pod (CPU seconds; API writes by user):\n\n")
	for _, res := range results {
		if res.Skipped != "" {
			continue
		}
		fmt.Fprintf(&b, "- %s (%d pods started): CPU %s; writes %s\n", res.Stack, res.AdmittedPods,
			perPod(res.CPUSecondsPerPod, "%.3f"), perPod(res.APIWritesPerPod, "%.1f"))
	}
	for _, res := range results {
		if len(res.Failures) == 0 {
			continue
		}
		reasons := slices.Sorted(maps.Keys(res.Failures))
		fmt.Fprintf(&b, "\nFailed jobs on %s, by the reason of their Failed condition:\n\n", res.Stack)
		for _, r := range reasons {
			fmt.Fprintf(&b, "- %d: %s\n", res.Failures[r], oneLine(r))
		}
	}
	b.WriteString("\nChecks:\n\n")
	for _, res := range results {
		if res.Skipped != "" {
			continue
		}
		for _, c := range res.Checks {
			verdict := "passed"
			if len(c.Violations) > 0 {
				verdict = fmt.Sprintf("**%d violations**: %s", len(c.Violations), strings.Join(c.Violations, "; "))
			}
			fmt.Fprintf(&b, "- %s, %s: %s\n", res.Stack, c.Name, verdict)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func (r *report) resultsOf(scenario string) []evaluate.Result {
	var out []evaluate.Result
	for _, res := range r.Results {
		if res.Scenario == scenario {
			out = append(out, res)
		}
	}
	return out
}

func teamNames(sc evaluate.Scenario) string {
	var out []string
	for _, t := range sc.Teams {
		out = append(out, t.Name)
	}
	return strings.Join(out, ", ")
}

func jobMix(sc evaluate.Scenario) string {
	n := map[evaluate.Kind]int{}
	never := 0
	for _, j := range sc.Jobs {
		if j.NeverFits {
			never++
			continue
		}
		n[j.Kind]++
	}
	var parts []string
	for _, k := range evaluate.Kinds {
		parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(", %d that can never fit", never)
}

func perPod(m map[string]float64, format string) string {
	if len(m) == 0 {
		return "not measured (a cluster this evaluation did not start)"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+fmt.Sprintf(format, m[k]))
	}
	return strings.Join(parts, ", ")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
