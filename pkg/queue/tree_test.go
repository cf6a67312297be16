package queue

import (
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
	flat := cfg
	flat.Groups = nil
	flat.Teams = map[string]quota.Team{}
	for name, tm := range cfg.Teams {
		tm.Group = ""
		flat.Teams[name] = tm
	}
	if got := keys(Reclaim(flat, admitted, &w, quota.Account{Team: "p2"}, victims)); !slices.Equal(got, []string{"x/a", "x/b"}) {
		t.Errorf("flat: p2 reclaims %v, want x's two pods (no lost work)", got)
	}
}
