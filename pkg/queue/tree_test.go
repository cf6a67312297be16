package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

// In a tree of groups, reclaim takes back borrowed work nearest in the
// tree first: a sibling's before a cousin's, a cousin's before another
// department's, even where the farther work would lose less; and falls
// back to the farther work when the nearer cannot free enough.
func TestReclaimNearestInTheTree(t *testing.T) {
	cfg := quota.Config{
		Groups: map[string]quota.Group{"dept": {GPUs: 8}, "t": {Parent: "dept", GPUs: 4}, "u": {Parent: "dept"}},
		Teams: map[string]quota.Team{
			"p1": {GPUs: 1, Borrow: quota.Limits{GPUs: 10}, Group: "t"},
			"p2": {GPUs: 4, Group: "t"},
			"q1": {Borrow: quota.Limits{GPUs: 10}, Group: "u"},
			"x":  {Borrow: quota.Limits{GPUs: 10}},
		},
		SharedPool: quota.Limits{GPUs: 8},
	}
	admitted := map[quota.Account]quota.Usage{
		{Team: "p1"}: {Running: quota.Amount{GPUs: 3}},
		{Team: "q1"}: {Running: quota.Amount{GPUs: 2}},
		{Team: "x"}:  {Running: quota.Amount{GPUs: 2}},
	}
	v := func(key, team string, lost float64) Victim {
		return Victim{Key: key, Team: team, Account: quota.Account{Team: team}, Amount: quota.Amount{GPUs: 1},
			Preemptible: true, LostWork: lost, AdmittedAt: t0.Add(-time.Hour)}
	}
	victims := []Victim{v("p1/a", "p1", 900), v("p1/b", "p1", 800), v("q1/a", "q1", 1), v("q1/b", "q1", 2),
		v("x/a", "x", 0), v("x/b", "x", 0)}
	keys := func(vs []Victim) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Key)
		}
		slices.Sort(out)
		return out
	}
	w := wl("p2", "p2/want", 2, 0, time.Minute)
	if got := keys(Reclaim(cfg, admitted, &w, quota.Account{Team: "p2"}, victims)); !slices.Equal(got, []string{"p1/a", "p1/b"}) {
		t.Errorf("p2 (in t) reclaims %v, want its sibling p1's two pods though its cousin's and x's lose less", got)
	}
	// p1 can give only 2 (it keeps its guarantee of 1): for 3, the next
	// level up, dept, holds q1 as well: its least lost work goes with p1's.
	w3 := wl("p2", "p2/want3", 3, 0, time.Minute)
	if got := keys(Reclaim(cfg, admitted, &w3, quota.Account{Team: "p2"}, victims)); !slices.Equal(got, []string{"p1/b", "q1/a", "q1/b"}) {
		t.Errorf("p2 reclaims %v for 3 GPUs, want the dept level's least lost work: p1/b, q1/a, q1/b", got)
	}
	// Without groups, the least lost work anywhere goes first.
	flat := flatten(cfg)
	if got := keys(Reclaim(flat, admitted, &w, quota.Account{Team: "p2"}, victims)); !slices.Equal(got, []string{"x/a", "x/b"}) {
		t.Errorf("flat: p2 reclaims %v, want x's two pods (no lost work)", got)
	}
}

// In a tree of groups, fair share picks level by level: department B,
// using less than department A in all, goes before A's lightest team,
// though that team alone uses less than B's. Without groups the lightest
// team goes first. Group weights count as team weights do.
func TestPlanFairShareAmongSiblings(t *testing.T) {
	cfg := quota.Config{
		Groups: map[string]quota.Group{"A": {}, "B": {}},
		Teams: map[string]quota.Team{
			"a1": {Borrow: quota.Limits{GPUs: 100}, Group: "A"},
			"a2": {Borrow: quota.Limits{GPUs: 100}, Group: "A"},
			"b1": {Borrow: quota.Limits{GPUs: 100}, Group: "B"},
		},
		SharedPool: quota.Limits{GPUs: 100},
	}
	in := Input{Config: cfg, Capacity: Capacity{GPUs: 100}, MaxAdmissions: 1,
		TeamUse:  map[string]Use{"a1": {GPUs: 30}, "a2": {GPUs: 5}, "b1": {GPUs: 20}},
		Admitted: map[quota.Account]quota.Usage{{Team: "a1"}: {Running: quota.Amount{GPUs: 30}}, {Team: "a2"}: {Running: quota.Amount{GPUs: 5}}, {Team: "b1"}: {Running: quota.Amount{GPUs: 20}}},
		Queued:   []Workload{wl("a1", "a1/w", 1, 0, time.Hour), wl("a2", "a2/w", 1, 0, time.Hour), wl("b1", "b1/w", 1, 0, time.Hour)},
	}
	first := func(in Input) string {
		res := Plan(in, &pool{free: 100})
		if len(res.Admitted) != 1 {
			t.Fatalf("admitted %v", keys(res.Admitted))
		}
		return res.Admitted[0].Workload.Key
	}
	if got := first(in); got != "b1/w" {
		t.Errorf("first admitted %s, want b1/w: department B (20 %%) is below A (35 %%)", got)
	}
	// A weighs 2: 35/2 < 20, so A goes first, and inside it a2.
	heavy := cfg
	heavy.Groups = map[string]quota.Group{"A": {Weight: 2}, "B": {}}
	in.Config = heavy
	if got := first(in); got != "a2/w" {
		t.Errorf("first admitted %s, want a2/w once A weighs 2", got)
	}
	// Flat: the lightest team.
	flat := flatten(cfg)
	in.Config = flat
	if got := first(in); got != "a2/w" {
		t.Errorf("flat: first admitted %s, want a2/w", got)
	}
}

// TestTreeFairShareConverges: departments A (weight 1: teams a1, a2) and B
// (weight 2: team b1) queue more than a cluster of 24 GPUs holds, jobs of
// random length; over time A holds a third, B two thirds, and A's teams
// share A's third evenly (flat fair share would give each team a third).
func TestTreeFairShareConverges(t *testing.T) {
	const gpus, steps = 24, 2000
	cfg := quota.Config{
		Groups: map[string]quota.Group{"A": {}, "B": {Weight: 2}},
		Teams: map[string]quota.Team{
			"a1": {Borrow: quota.Limits{GPUs: gpus}, Group: "A"},
			"a2": {Borrow: quota.Limits{GPUs: gpus}, Group: "A"},
			"b1": {Borrow: quota.Limits{GPUs: gpus}, Group: "B"},
		},
		SharedPool: quota.Limits{GPUs: gpus},
	}
	teams := []string{"a1", "a2", "b1"}
	r := rand.New(rand.NewPCG(3, 4))
	type job struct{ team, ends int }
	var running []job
	var late [3]float64
	n := 0
	for s := range steps {
		kept := running[:0]
		var use [3]int64
		for _, j := range running {
			if j.ends > s {
				kept = append(kept, j)
				use[j.team]++
			}
		}
		running = kept
		in := Input{Config: cfg, Capacity: Capacity{GPUs: gpus}, Admitted: map[quota.Account]quota.Usage{}, TeamUse: map[string]Use{}}
		for i, tm := range teams {
			in.TeamUse[tm] = Use{GPUs: use[i]}
			in.Admitted[quota.Account{Team: tm}] = quota.Usage{Running: quota.Amount{GPUs: use[i]}}
			for range 4 {
				n++
				in.Queued = append(in.Queued, wl(tm, fmt.Sprintf("%s/%d", tm, n), 1, 0, time.Duration(-s)*time.Minute))
			}
		}
		res := Plan(in, &pool{free: gpus - use[0] - use[1] - use[2]})
		for _, a := range res.Admitted {
			i := slices.Index(teams, a.Workload.Team)
			use[i]++
			running = append(running, job{team: i, ends: s + 1 + r.IntN(30)})
		}
		if s >= steps/2 {
			for i := range late {
				late[i] += float64(use[i]) / gpus / (steps / 2)
			}
		}
	}
	a, b := late[0]+late[1], late[2]
	if math.Abs(a-1.0/3) > 0.05 || math.Abs(b-2.0/3) > 0.05 || math.Abs(late[0]-late[1]) > 0.05 {
		t.Errorf("late shares: a1 %.3f, a2 %.3f (A %.3f), b1 %.3f; want A 1/3 split evenly, B 2/3", late[0], late[1], a, b)
	}
}

// flatten is cfg without its groups: every team under the shared pool.
func flatten(cfg quota.Config) quota.Config {
	flat := cfg
	flat.Groups = nil
	flat.Teams = map[string]quota.Team{}
	for name, tm := range cfg.Teams {
		tm.Group = ""
		flat.Teams[name] = tm
	}
	return flat
}
