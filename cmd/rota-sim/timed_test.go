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
	} {
		var out, errb bytes.Buffer
		if err := run(args, &out, &errb); err == nil {
			t.Errorf("run(%v): no error", args)
		}
	}
}
