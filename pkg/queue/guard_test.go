package queue

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

// TestPlanProtectsAHeadWaitingForQuota: behind a protected head that waits
// for its team's quota, later work of the team that would run past the
// time the quota is expected back waits; work that ends before it
// backfills; other teams are not held back.
func TestPlanProtectsAHeadWaitingForQuota(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"ml": {GPUs: 10}, "cv": {GPUs: 10}}}
	ml := quota.Account{Team: "ml"}
	ends := func(w Workload, d time.Duration) Workload { w.Ends = t0.Add(d); return w }
	in := Input{Config: cfg,
		Admitted: map[quota.Account]quota.Usage{ml: {Running: quota.Amount{GPUs: 8}}},
		Releases: map[quota.Account][]Release{ml: {
			{At: t0.Add(2 * time.Hour), Amount: quota.Amount{GPUs: 4}},
			{At: t0.Add(time.Hour), Amount: quota.Amount{GPUs: 4}},
		}},
		Protected: func(w *Workload) bool { return w.Need().GPUs >= 8 },
		Queued: []Workload{
			wl("ml", "ml/big", 8, 0, 4*time.Hour),
			ends(wl("ml", "ml/long", 2, 0, 3*time.Hour), 3*time.Hour),
			ends(wl("ml", "ml/short", 1, 0, 2*time.Hour), 30*time.Minute),
			wl("ml", "ml/none", 1, 0, time.Hour),
			wl("cv", "cv/any", 2, 0, time.Hour),
		},
	}
	for i := range in.Queued {
		in.Queued[i].Shape = "" // each tried on its own
	}
	res := Plan(in, &pool{free: 100})
	if got := keys(res.Admitted); !slices.Equal(got, []string{"cv/any", "ml/short"}) && !slices.Equal(got, []string{"ml/short", "cv/any"}) {
		t.Fatalf("admitted %v, want ml/short (ends before ml/big's quota is back) and cv/any", got)
	}
	for _, k := range []string{"ml/long", "ml/none"} {
		st := res.Waiting[k]
		if st.Reason != WaitQuota || !strings.Contains(st.Message, "waiting behind ml/big") ||
			!strings.Contains(st.Message, "expected by 2026-12-01 14:00 UTC") {
			t.Errorf("%s: %s %q", k, st.Reason, st.Message)
		}
	}
	// Without protection the first small one takes the quota the head
	// waits for, however long it runs.
	in.Protected = nil
	res = Plan(in, &pool{free: 100})
	if got := keys(res.Admitted); !slices.Contains(got, "ml/long") {
		t.Fatalf("unprotected: admitted %v, want ml/long among them", got)
	}
}

// TestPlanProtectionNeedsKnownRelease: when the admitted work declares no
// ends, the head's quota start is unknown and nothing of its team backfills.
func TestPlanProtectionNeedsKnownRelease(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"ml": {GPUs: 10}}}
	ml := quota.Account{Team: "ml"}
	w := wl("ml", "ml/short", 1, 0, time.Hour)
	w.Ends, w.Shape = t0.Add(time.Minute), ""
	in := Input{Config: cfg, Admitted: map[quota.Account]quota.Usage{ml: {Running: quota.Amount{GPUs: 8}}},
		Protected: func(w *Workload) bool { return w.Need().GPUs >= 8 },
		Queued:    []Workload{wl("ml", "ml/big", 8, 0, 4*time.Hour), w}}
	res := Plan(in, &pool{free: 100})
	if len(res.Admitted) != 0 || !strings.Contains(res.Waiting["ml/short"].Message, "when is not known") {
		t.Fatalf("admitted %v; short: %q", keys(res.Admitted), res.Waiting["ml/short"].Message)
	}
}
