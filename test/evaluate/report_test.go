package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/evaluate"
)

// Every row of every table in report.md has as many cells as its header,
// a stack that did not run included.
func TestReportTablesLineUp(t *testing.T) {
	sc := evaluate.Burst(7, evaluate.Small)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	runs := []evaluate.Run{
		{Stack: "stock", Scenario: "burst", Start: t0, End: t0.Add(time.Minute), Cluster: sc.Cluster, Teams: sc.Teams},
		{Stack: "kueue", Scenario: "burst", Skipped: "no binary | here"},
	}
	r := newReport([]evaluate.Scenario{sc}, runs, options{seed: 7, size: evaluate.Small}, time.Minute)
	cells := func(line string) int { return strings.Count(strings.Trim(line, "|"), "|") + 1 }
	want := 0
	for _, line := range strings.Split(r.markdown(), "\n") {
		switch {
		case !strings.HasPrefix(line, "|"):
			want = 0
		case want == 0:
			want = cells(line)
		case strings.Contains(line, "not run:"):
			// A stack that did not run spans the row with its reason.
			if !strings.HasSuffix(line, strings.Repeat("|", want-1)) {
				t.Errorf("%q does not span the %d columns", line, want)
			}
		case cells(line) != want:
			t.Errorf("%q has %d cells; its header has %d", line, cells(line), want)
		}
	}
}

// A report in which no stack ran is still written, with its reasons.
func TestReportWithNothingRun(t *testing.T) {
	sc := evaluate.Burst(7, evaluate.Small)
	r := newReport([]evaluate.Scenario{sc}, []evaluate.Run{{Stack: "staging", Scenario: "burst", Skipped: "namespaces exist"}},
		options{seed: 7, size: evaluate.Small}, time.Minute)
	dir := t.TempDir()
	if err := r.write(dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.markdown(), "not run: namespaces exist") {
		t.Error("the report does not say why the stack did not run")
	}
}
