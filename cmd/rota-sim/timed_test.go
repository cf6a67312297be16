package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRunTimeModeGang(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--mode", "time", "--jobs", "150", "--runtimes", "../../testdata/philly/philly_runtime.csv",
		"--out", t.TempDir()}
	if err := run(args, &out, &errb); err != nil {
		t.Fatalf("run(%v): %v\n%s", args, err, errb.String())
	}
	for _, want := range []string{"| measure | bestfit | bestfit, Rota queue | fgd | fgd, Rota queue | fragmentation-aware | fragmentation-aware, Rota queue |",
		"gangs partly placed | 0 | 0 | 0 | 0 | 0 | 0 |", "Jain's fairness",
		"| pretrain", "| foundation"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunTimeModeFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "later"},
		{"--mode", "time", "--workload", "other"},
		{"--mode", "time", "--load", "0"},
		{"--mode", "time", "--copies", "0"},
		{"--mode", "time", "--jobs", "10", "--queue", "lifo"},
		{"--mode", "time", "--jobs", "10", "--queue", "fifo", "--reserve"},
		{"--mode", "time", "--jobs", "10", "--queue", "drf", "--reserve", "--runtime-factor", "3-1"},
		{"--mode", "time", "--jobs", "10", "--queue", "drf", "--reserve", "--runtime-factor", "2"},
		{"--mode", "time", "--jobs", "10", "--queue", "drf", "--reserve", "--undeclared-share", "1.5"},
		{"--mode", "time", "--jobs", "10", "--queue", "drf", "--reserve", "--max-hold", "0s"},
	} {
		var out, errb bytes.Buffer
		if err := run(args, &out, &errb); err == nil {
			t.Errorf("run(%v): no error", args)
		}
	}
}

// TestRunTimeModeReserve: --reserve adds a reservation column to each drf
// replay, runs every seed and prints the table over the seeds with the goals.
func TestRunTimeModeReserve(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--mode", "time", "--jobs", "150", "--runtimes", "../../testdata/philly/philly_runtime.csv",
		"--queue", "drf", "--policies", "bestfit", "--reserve", "--seeds", "42-43", "--max-hold", "24h", "--default-runtime", "4h"}
	if err := run(args, &out, &errb); err != nil {
		t.Fatalf("run(%v): %v\n%s", args, err, errb.String())
	}
	for _, want := range []string{"| measure | bestfit, Rota queue | bestfit, Rota queue + reservations |",
		"declared runtimes: real x U(1, 3), 20 % declare none",
		"Over 2 seeds (42, 43)", "max hold 24h0m0s", "default runtime 4h0m0s",
		"| wait, 64-1024 GPU gangs |", "| gangs partly placed (all seeds) | 0 | 0 |",
		"| 43 |", "Goals, bestfit, drf queue + reservations against bestfit, drf queue:", "4 runs in"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
