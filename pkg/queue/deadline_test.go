package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

func withDeadline(w Workload, latestStart time.Time) Workload {
	w.LatestStart = latestStart
	return w
}

// Inside a team and priority, work whose latest start is within the lead
// goes first, the earliest first; higher priority still goes before it;
// work that can no longer meet its deadline keeps its place, flagged;
// quota still bounds what is admitted.
func TestPlanDeadlines(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 1}}}
	now := t0
	q := []Workload{
		wl("a", "a/old", 1, 0, 3*time.Hour),
		withDeadline(wl("a", "a/soon", 1, 0, time.Hour), now.Add(20*time.Minute)),
		withDeadline(wl("a", "a/sooner", 1, 0, 30*time.Minute), now.Add(10*time.Minute)),
		withDeadline(wl("a", "a/later", 1, 0, 2*time.Hour), now.Add(3*time.Hour)),
		withDeadline(wl("a", "a/missed", 1, 0, 4*time.Hour), now.Add(-time.Minute)),
		wl("a", "a/high", 1, 10, time.Minute),
	}
	in := Input{Config: cfg, Queued: q, Now: now, DeadlineLead: 30 * time.Minute}
	res := Plan(in, &pool{free: 0})
	order := make([]string, len(q))
	for k, st := range res.Waiting {
		order[st.Position-1] = k
	}
	want := []string{"a/high", "a/sooner", "a/soon", "a/missed", "a/old", "a/later"}
	if !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if st := res.Waiting["a/sooner"]; !st.Urgent || st.Late || !strings.Contains(st.Message, "must start by 2026-12-01 12:10 UTC") {
		t.Errorf("a/sooner: %+v", st)
	}
	if st := res.Waiting["a/missed"]; !st.Late || st.Urgent || !strings.Contains(st.Message, "cannot end by its deadline") {
		t.Errorf("a/missed: %+v", st)
	}
	if st := res.Waiting["a/later"]; st.Late || st.Urgent || !strings.Contains(st.Message, "must start by 2026-12-01 15:00 UTC") {
		t.Errorf("a/later: %+v", st)
	}
	// Quota for one: the urgent one after the higher priority is not
	// admitted past it.
	res = Plan(in, &pool{free: 8})
	if got := keys(res.Admitted); !slices.Equal(got, []string{"a/high"}) {
		t.Errorf("admitted %v, want only a/high (quota 1)", got)
	}
	// Without a time, no deadline ordering.
	in.Now = time.Time{}
	res = Plan(in, &pool{free: 0})
	if res.Waiting["a/sooner"].Position != 6 || res.Waiting["a/sooner"].Urgent {
		t.Errorf("without Now: %+v", res.Waiting)
	}
}

// On random queues, positions keep the rules: priority first; inside a
// priority, every urgent workload before every other; urgent ones by
// latest start, the others by creation.
func TestPlanDeadlineOrderProperty(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 5))
		cfg := quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 100}}}
		in := Input{Config: cfg, Now: t0, DeadlineLead: time.Hour}
		n := 2 + r.IntN(20)
		for i := range n {
			w := wl("a", fmt.Sprintf("a/%02d", i), 1, int32(r.IntN(3)), time.Duration(r.IntN(600))*time.Second)
			if r.IntN(2) == 0 {
				w.LatestStart = t0.Add(time.Duration(r.IntN(240)-60) * time.Minute)
			}
			in.Queued = append(in.Queued, w)
		}
		res := Plan(in, &pool{free: 0})
		byPos := make([]*Workload, n)
		for i := range in.Queued {
			byPos[res.Waiting[in.Queued[i].Key].Position-1] = &in.Queued[i]
		}
		for k := 1; k < n; k++ {
			a, b := byPos[k-1], byPos[k]
			ua, ub := in.urgent(a), in.urgent(b)
			switch {
			case a.Priority != b.Priority:
				if a.Priority < b.Priority {
					t.Fatalf("seed %d: %s (priority %d) before %s (%d)", seed, a.Key, a.Priority, b.Key, b.Priority)
				}
			case ua != ub:
				if !ua {
					t.Fatalf("seed %d: %s (not urgent) before urgent %s", seed, a.Key, b.Key)
				}
			case ua:
				if a.LatestStart.After(b.LatestStart) {
					t.Fatalf("seed %d: urgent %s (%s) before %s (%s)", seed, a.Key, a.LatestStart, b.Key, b.LatestStart)
				}
			default:
				if a.Created.After(b.Created) {
					t.Fatalf("seed %d: %s created after %s, but ahead", seed, a.Key, b.Key)
				}
			}
			if ua != res.Waiting[a.Key].Urgent {
				t.Fatalf("seed %d: %s Urgent %v, want %v", seed, a.Key, res.Waiting[a.Key].Urgent, ua)
			}
		}
	}
}
