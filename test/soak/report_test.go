package main

import (
	"strings"
	"testing"
)

func quiet(at float64, samples ...Sample) QuietPoint {
	for i := range samples {
		samples[i].AtSeconds = at
	}
	return QuietPoint{At: at, Samples: samples}
}

// The leak judge fails growth past the bounds, forgives what a change of
// role brings, and fails a process it could not judge at all.
func TestJudgeLeaks(t *testing.T) {
	for _, c := range []struct {
		name  string
		quiet []QuietPoint
		leak  string // a substring of the first leak; "" for none
	}{
		{"steady", []QuietPoint{
			quiet(60, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 60, FDs: 14}),
			quiet(1800, Sample{Process: "p", PID: 1, HeapMiB: 3.5, Goroutines: 62, FDs: 15}),
		}, ""},
		{"goroutines climb", []QuietPoint{
			quiet(60, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 60, FDs: 14}),
			quiet(600, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 200, FDs: 14}),
		}, "goroutines at rest"},
		{"files climb", []QuietPoint{
			quiet(60, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 60, FDs: 14}),
			quiet(600, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 60, FDs: 40}),
		}, "open files"},
		{"heap climbs", []QuietPoint{
			quiet(60, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 60, FDs: 14}),
			quiet(660, Sample{Process: "p", PID: 1, HeapMiB: 30, Goroutines: 60, FDs: 14}),
		}, "live heap grew"},
		{"a standby that became the leader", []QuietPoint{
			quiet(60, Sample{Process: "p", PID: 1, HeapMiB: 2.3, Goroutines: 69, FDs: 14, Role: "standby"}),
			quiet(600, Sample{Process: "p", PID: 1, HeapMiB: 2.4, Goroutines: 69, FDs: 14, Role: "standby"}),
			quiet(900, Sample{Process: "p", PID: 1, HeapMiB: 9.9, Goroutines: 187, FDs: 16, Role: "leader"}),
			quiet(1200, Sample{Process: "p", PID: 1, HeapMiB: 10, Goroutines: 187, FDs: 16, Role: "leader"}),
		}, ""},
		{"killed before it could be judged", []QuietPoint{
			quiet(60, Sample{Process: "p", PID: 1, HeapMiB: 3, Goroutines: 60, FDs: 14}),
			quiet(600, Sample{Process: "p", PID: 2, HeapMiB: 3, Goroutines: 60, FDs: 14}),
		}, "nothing says it does not leak"},
	} {
		r := &Result{Quiet: c.quiet}
		r.judgeLeaks()
		switch {
		case c.leak == "" && len(r.Leaks) > 0:
			t.Errorf("%s: leaks %v", c.name, r.Leaks)
		case c.leak != "" && (len(r.Leaks) == 0 || !strings.Contains(r.Leaks[0], c.leak)):
			t.Errorf("%s: leaks %v, want one saying %q", c.name, r.Leaks, c.leak)
		}
	}
}
