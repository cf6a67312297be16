package ledger_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
)

// claimed is a ledger with node n1 (8 idle GPUs) and a claim on it for gang
// ml/big needing want GPUs, expected to start at start.
func claimed(t *testing.T, want int, start time.Time) *ledger.Ledger {
	t.Helper()
	l := newLedger(t, "n1")
	l.SetClaims([]ledger.Claim{{Job: "ml/big", Gang: true, Node: "n1", GPUs: want, Start: start}})
	return l
}

func idleFor(l *ledger.Ledger, job string, ends time.Time) int {
	return l.Snapshot().Node("n1").For(job, ends).IdleGPUs()
}

func TestClaimViews(t *testing.T) {
	start := t0.Add(time.Hour)
	l := claimed(t, 6, start)
	for _, tc := range []struct {
		name string
		job  string
		ends time.Time
		idle int
	}{
		{"the claim's own job sees every idle GPU", "ml/big", time.Time{}, 8},
		{"a pod with no declared end sees what the claim leaves", "ns/other", time.Time{}, 2},
		{"a pod that ends by the expected start backfills", "ns/short", start, 8},
		{"a pod that ends after it does not", "ns/long", start.Add(time.Second), 2},
	} {
		if got := idleFor(l, tc.job, tc.ends); got != tc.idle {
			t.Errorf("%s: %d idle GPUs, want %d", tc.name, got, tc.idle)
		}
	}
	if got := l.Snapshot().Node("n1").HeldGPUs(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("held GPUs %v, want 0-5", got)
	}
}

func TestClaimUnknownStartAdmitsNoBackfill(t *testing.T) {
	l := claimed(t, 8, time.Time{})
	if got := idleFor(l, "ns/short", t0.Add(time.Minute)); got != 0 {
		t.Errorf("with no expected start a short pod sees %d idle GPUs, want 0", got)
	}
}

func TestClaimReserveRules(t *testing.T) {
	start := t0.Add(time.Hour)
	l := claimed(t, 8, start)
	long := whole("long", "n1", 0)
	if err := l.Reserve(long, expires); !errors.Is(err, ledger.ErrNoCapacity) {
		t.Fatalf("a pod with no end reserved a held GPU: %v", err)
	}
	guess := whole("guess", "n1", 0)
	guess.Ends, guess.EndsEstimated = start.Add(-time.Minute), true
	if err := l.Reserve(guess, expires); !errors.Is(err, ledger.ErrNoCapacity) {
		t.Fatalf("a pod whose end is only estimated backfilled a held GPU: %v", err)
	}
	short := whole("short", "n1", 0)
	short.Ends = start.Add(-time.Minute)
	if err := l.Reserve(short, expires); err != nil {
		t.Fatalf("a backfill pod was refused: %v", err)
	}
	if got := l.Snapshot().Node("n1").HeldGPUs(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		// GPU 0 is busy with a pod that ends before the start: still held,
		// so no other pod can share it.
		t.Errorf("held GPUs %v, want all 8", got)
	}
	if err := l.Reserve(share("sharer", "n1", 0, 1024), expires); !errors.Is(err, ledger.ErrNoCapacity) {
		t.Fatalf("a share with no end landed on a GPU that frees for the claim: %v", err)
	}
	// A running pod read back from the API is never refused by a claim.
	if err := l.Restore(whole("running", "n1", 1)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := l.Snapshot().Node("n1").HeldGPUs(); slices.Contains(got, 1) || len(got) != 7 {
		t.Errorf("held GPUs %v: want 7, without GPU 1 (a pod with no end holds it)", got)
	}
	mine := whole("member", "n1", 2)
	mine.Gang, mine.GangSize = "ml/big", 0
	if err := l.Reserve(mine, expires); err != nil {
		t.Fatalf("the claim's own member was refused: %v", err)
	}
	if errs := l.Check(); len(errs) > 0 {
		t.Fatalf("ledger check: %v", errs)
	}
}

func TestClaimFollowsFreedGPUs(t *testing.T) {
	l := newLedger(t, "n1")
	for i := range 8 {
		if err := l.Restore(whole(string(rune('a'+i)), "n1", i)); err != nil {
			t.Fatal(err)
		}
	}
	start := t0.Add(time.Hour)
	l.SetClaims([]ledger.Claim{{Job: "ml/big", Node: "n1", GPUs: 4, Start: start}})
	if got := l.Snapshot().Node("n1").HeldGPUs(); len(got) != 0 {
		t.Fatalf("held %v while every GPU runs a pod with no end", got)
	}
	l.Release("a")
	l.Release("b")
	if got := l.Snapshot().Node("n1").HeldGPUs(); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("after two pods ended the claim holds %v, want [0 1]", got)
	}
	if got := idleFor(l, "ns/x", time.Time{}); got != 0 {
		t.Errorf("other pods see %d idle GPUs, want 0", got)
	}
	l.SetClaims(nil)
	if got := idleFor(l, "ns/x", time.Time{}); got != 2 {
		t.Errorf("after the claim is dropped other pods see %d idle GPUs, want 2", got)
	}
	if got := l.Claims(); len(got) != 0 {
		t.Errorf("claims left: %v", got)
	}
}

func TestClaimsFor(t *testing.T) {
	allocs := []ledger.Allocation{
		{PodUID: "g-0", Node: "n1", CPUMilli: 1000, HostMemoryMiB: 10, GPUs: []ledger.Share{{Index: 0}, {Index: 1}}},
		{PodUID: "g-1", Node: "n2", CPUMilli: 500, GPUs: []ledger.Share{{Index: 0}, {Index: 1}}},
		{PodUID: "g-2", Node: "n1", CPUMilli: 1000, HostMemoryMiB: 10, GPUs: []ledger.Share{{Index: 2}, {Index: 3}}},
	}
	got := ledger.ClaimsFor("ml/g", true, []string{"H100"}, allocs)
	if len(got) != 2 || got[0].Node != "n1" || got[0].GPUs != 4 || got[0].CPUMilli != 2000 || got[0].HostMemoryMiB != 20 ||
		got[1].Node != "n2" || got[1].GPUs != 2 || got[1].CPUMilli != 500 || !got[0].Gang || got[0].Job != "ml/g" || got[1].Models[0] != "H100" {
		t.Errorf("claims %+v", got)
	}
	if got := ledger.ClaimsFor("ml/p", false, nil, nil); len(got) != 0 {
		t.Errorf("no allocations: %+v", got)
	}
}
