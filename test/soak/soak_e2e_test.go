//go:build e2e

package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestShortSoak is CI's soak: four minutes of load, every fault kind at
// least once, on a fixed seed (make soak draws a new one each run). It
// fails on any broken invariant, lost or failed job, fault not healed, or
// leak.
func TestShortSoak(t *testing.T) {
	if err := harness.CheckBinaries(); errors.Is(err, harness.ErrMissingBinaries) {
		t.Skipf("binaries missing (make build k8s-tools): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	o := options{duration: 4 * time.Minute, seed: 1, out: t.TempDir(), scale: 0.4, nextBin: "../../bin/next"}
	res, err := run(ctx, o, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[Kind]int{}
	for _, f := range res.Faults {
		counts[f.Kind]++
	}
	for _, k := range Kinds {
		if counts[k] == 0 {
			t.Errorf("no %s fault was injected", k)
		}
	}
	if res.Checks.Run-res.Checks.Unavailable < 10 {
		t.Errorf("only %d invariant checks read the cluster", res.Checks.Run-res.Checks.Unavailable)
	}
	if want := 2 * (plugins + 2); len(res.Rolls) != want {
		t.Errorf("%d parts rolled in the upgrade and back, want %d", len(res.Rolls), want)
	}
	if res.Jobs.Completed == 0 {
		t.Error("no job completed")
	}
	// Both ways of queueing ran: some teams queue Jobs suspended, the
	// others' pods gated.
	if s, g := res.Jobs.CompletedSuspended, res.Jobs.Completed-res.Jobs.CompletedSuspended; s == 0 || g == 0 {
		t.Errorf("%d jobs completed queued suspended and %d as gated pods; want both", s, g)
	}
	if !res.Passed() {
		t.Errorf("%s\n%s", res.FailureSummary(), res.Summary())
	}
}
