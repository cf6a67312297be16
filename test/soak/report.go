package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// QuietPoint is the measurement of every Rota process at rest: no load,
// every fault healed, the jobs drained and removed.
type QuietPoint struct {
	Segment int
	At      float64 // seconds from the start
	Samples []Sample
	Missing []string
}

// The leak bounds. Between two quiet points of one process (same PID),
// the API holds the same objects (the jobs are removed at each), so what
// the process holds should come back: goroutines and open files to within
// a few of the first quiet point's (idle keep-alive connections come and
// go), and the live heap within a floor plus a growth rate. A leak of one
// goroutine, file or 100 KiB per job fails within a few waves.
const (
	goroutineSlack = 25
	fdSlack        = 10
	heapFloorMiB   = 6
	heapPerHourMiB = 16
)

// ProcessVerdict is what the quiet points say of one process.
type ProcessVerdict struct {
	Process string
	// Incarnations is how many PIDs it had (each kill starts a new one);
	// Judged how many of its stints (one incarnation in one role) spanned
	// two quiet points or more.
	Incarnations, Judged int
	// SpanMinutes is the longest judged span; HeapGrowthMiB the live heap's
	// growth over it, HeapMiBPerHour as a rate.
	SpanMinutes, HeapGrowthMiB, HeapMiBPerHour float64
	// GoroutineDelta and FDDelta are the largest excess over the
	// incarnation's first quiet point.
	GoroutineDelta, FDDelta int
}

// judgeLeaks compares each process incarnation's quiet points.
func (r *Result) judgeLeaks() {
	byProc := map[string][]Sample{}
	for _, q := range r.Quiet {
		for _, sm := range q.Samples {
			byProc[sm.Process] = append(byProc[sm.Process], sm)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byProc)) {
		v := ProcessVerdict{Process: name}
		// An incarnation is a PID; within it, samples are compared only
		// with those of the same role (a standby that became the leader
		// holds the queue's state and more goroutines, by design).
		type stint struct {
			pid  int
			role string
		}
		byStint := map[stint][]Sample{}
		pids := map[int]bool{}
		for _, sm := range byProc[name] {
			byStint[stint{sm.PID, sm.Role}] = append(byStint[stint{sm.PID, sm.Role}], sm)
			pids[sm.PID] = true
		}
		v.Incarnations = len(pids)
		keys := slices.SortedFunc(maps.Keys(byStint), func(a, b stint) int {
			if a.pid != b.pid {
				return a.pid - b.pid
			}
			return strings.Compare(a.role, b.role)
		})
		for _, k := range keys {
			pid, ss := k.pid, byStint[k]
			if len(ss) < 2 {
				continue
			}
			v.Judged++
			first, last := ss[0], ss[len(ss)-1]
			span := (last.AtSeconds - first.AtSeconds) / 60
			growth := last.HeapMiB - first.HeapMiB
			if span >= v.SpanMinutes {
				v.SpanMinutes, v.HeapGrowthMiB = span, growth
				if span > 0 {
					v.HeapMiBPerHour = growth / span * 60
				}
			}
			if limit := heapFloorMiB + heapPerHourMiB*span/60; growth > limit {
				r.Leaks = append(r.Leaks, fmt.Sprintf("%s (pid %d): live heap grew %.1f MiB in %.1f min (%.1f to %.1f MiB), over the bound of %.1f MiB",
					name, pid, growth, span, first.HeapMiB, last.HeapMiB, limit))
			}
			for _, sm := range ss[1:] {
				v.GoroutineDelta = max(v.GoroutineDelta, sm.Goroutines-first.Goroutines)
				v.FDDelta = max(v.FDDelta, sm.FDs-first.FDs)
				if d := sm.Goroutines - first.Goroutines; d > goroutineSlack {
					r.Leaks = append(r.Leaks, fmt.Sprintf("%s (pid %d): %d goroutines at rest at %.0fs, %d at its first quiet point",
						name, pid, sm.Goroutines, sm.AtSeconds, first.Goroutines))
				}
				if d := sm.FDs - first.FDs; d > fdSlack {
					r.Leaks = append(r.Leaks, fmt.Sprintf("%s (pid %d): %d open files at rest at %.0fs, %d at its first quiet point",
						name, pid, sm.FDs, sm.AtSeconds, first.FDs))
				}
			}
		}
		if v.Judged == 0 {
			r.Leaks = append(r.Leaks, fmt.Sprintf("%s: no incarnation was measured at two quiet points, so nothing says it does not leak", name))
		}
		r.Processes = append(r.Processes, v)
	}
}

// Summary is the report's text: what was injected, submitted, checked and
// measured.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Soak, seed %d, %s of load in %d segments, %s in all.\n\n", r.Seed, r.Plan.Duration,
		len(r.Plan.Segments), r.Ended.Sub(r.Began).Round(time.Second))
	b.WriteString("| fault | injected | healed (max s) | errors |\n|---|---:|---:|---:|\n")
	for _, k := range Kinds {
		n, errs, worst := 0, 0, 0.0
		for _, f := range r.Faults {
			if f.Kind == k {
				n++
				worst = max(worst, f.HealedSeconds)
				if f.Err != "" {
					errs++
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %d |\n", k, n, worst, errs)
	}
	if len(r.Rolls) > 0 {
		b.WriteString("\nRolling upgrade to the next build (it writes the next version of Rota's documents, with a field this build does not know) and back, under load:\n\n")
		b.WriteString("| step | part | not serving (s) | error |\n|---|---|---:|---|\n")
		for _, rl := range r.Rolls {
			fmt.Fprintf(&b, "| %s | %s | %.1f | %s |\n", rl.Step, rl.Part, rl.DownSeconds, rl.Err)
		}
	}
	j := r.Jobs
	fmt.Fprintf(&b, "\nJobs: %d submitted, %d completed (%d of them queued suspended, the others as gated pods); of those that can never fit, %d queued with a reason and %d refused at creation with a reason; %d failed, %d lost. Job creations retried: %d.\n",
		j.Submitted, j.Completed, j.CompletedSuspended, j.QueuedWithReason, j.Refused, j.Failed, j.Lost, r.CreateRetries)
	if len(r.PodFailures) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.PodFailures)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.PodFailures[k]))
		}
		fmt.Fprintf(&b, "Pods failed (their Jobs retried them or failed): %s.\n", strings.Join(parts, ", "))
	}
	c := r.Checks
	fmt.Fprintf(&b, "Invariant checks: %d run every %s, %d while the API server was away; %d gangs seen partly bound (between two binds), the longest for %.0f s (allowed: %s); violations: %d.\n",
		c.Run, checkEvery, c.Unavailable, c.Transient, c.LongestPartialGang, partialGangGrace, len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "- at %.0fs %s: %s\n", v.AtSeconds, v.What, v.Detail)
	}
	fmt.Fprintf(&b, "\nRota's processes at the %d quiet points (live heap after GC; goroutines and open files against the incarnation's first quiet point; bounds: heap %d MiB + %d MiB/h, goroutines +%d, files +%d):\n\n",
		len(r.Quiet), heapFloorMiB, heapPerHourMiB, goroutineSlack, fdSlack)
	b.WriteString("| process | incarnations | judged | longest span (min) | heap growth (MiB) | MiB/h | goroutines + | files + |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, v := range r.Processes {
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.2f | %.1f | %d | %d |\n", v.Process, v.Incarnations, v.Judged,
			v.SpanMinutes, v.HeapGrowthMiB, v.HeapMiBPerHour, v.GoroutineDelta, v.FDDelta)
	}
	if len(r.Leaks) > 0 {
		b.WriteString("\nLeaks:\n")
		for _, l := range r.Leaks {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	verdict := "PASSED"
	if !r.Passed() {
		verdict = "FAILED: " + r.FailureSummary()
	}
	fmt.Fprintf(&b, "\n%s\n", verdict)
	return b.String()
}

// write saves report.md, result.json and heap.png in dir.
func (r *Result) write(dir string) error {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), raw, 0o644); err != nil {
		return err
	}
	md := "# Rota chaos soak\n\n" + r.Summary() + "\n![live heap of every Rota process](heap.png)\n"
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(md), 0o644); err != nil {
		return err
	}
	return r.heapPlot(filepath.Join(dir, "heap.png"))
}

// heapPlot draws each process's live heap over time, with the quiet points
// and the faults marked.
func (r *Result) heapPlot(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Live heap after GC, every %s (seed %d); grey: quiet points, red: faults", sampleEvery, r.Seed)
	p.X.Label.Text = "minutes from the start"
	p.Y.Label.Text = "MiB"
	byProc := map[string]plotter.XYs{}
	for _, sm := range r.Samples {
		byProc[sm.Process] = append(byProc[sm.Process], plotter.XY{X: sm.AtSeconds / 60, Y: sm.HeapMiB})
	}
	top := 0.0
	for i, name := range slices.Sorted(maps.Keys(byProc)) {
		pts := byProc[name]
		for _, pt := range pts {
			top = max(top, pt.Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		p.Add(l)
		p.Legend.Add(name, l)
	}
	mark := func(x float64, c color.Color, dashed bool) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top * 1.05}})
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(0.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		}
		p.Add(l)
		return nil
	}
	for _, q := range r.Quiet {
		if err := mark(q.At/60, color.Gray{Y: 0x40}, false); err != nil {
			return err
		}
	}
	for _, f := range r.Faults {
		if err := mark(f.StartSeconds/60, color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0x90}, true); err != nil {
			return err
		}
	}
	// Room above the curves for the legend.
	p.Y.Min, p.Y.Max = 0, top*1.8
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Points(2)
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}
