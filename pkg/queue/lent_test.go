package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

// lentTree: department dept (no pool) holds group g (pool 2, lends up to 2)
// with projects t and s, and group h (no pool) with project x, which
// borrows. Nothing else lends: no shared pool.
func lentTree() quota.Config {
	return quota.Config{
		Groups: map[string]quota.Group{
			"dept": {},
			"g":    {Parent: "dept", GPUs: 2, Lend: quota.Limits{GPUs: 2}},
			"h":    {Parent: "dept"},
		},
		Teams: map[string]quota.Team{
			"t": {Borrow: quota.Limits{GPUs: 10}, Group: "g"},
			"s": {Borrow: quota.Limits{GPUs: 10}, Group: "g"},
			"x": {Borrow: quota.Limits{GPUs: 10}, Group: "h"},
		},
	}
}

func oneGPU(key, team string, lost float64) Victim {
	return Victim{Key: key, Team: team, Account: quota.Account{Team: team}, Amount: quota.Amount{GPUs: 1},
		Preemptible: true, LostWork: lost, AdmittedAt: t0.Add(-time.Hour)}
}

// A group's pool is its subtree's guarantee: what it lent to a cousin comes
// back when its own project needs it, and the cousin, which only borrowed
// the loan, cannot take it back. A sibling in the group shares the pool
// and is never a victim; nor is anything reclaimed for what the group's
// pool does not hold.
func TestReclaimLentPool(t *testing.T) {
	cfg := lentTree()
	admitted := map[quota.Account]quota.Usage{{Team: "x"}: {Running: quota.Amount{GPUs: 2}}}
	victims := []Victim{oneGPU("x/a", "x", 5), oneGPU("x/b", "x", 1)}
	w := wl("t", "t/want", 1, 0, time.Minute)
	a := quota.Account{Team: "t"}
	if cfg.CheckAccount(a, admitted, w.Need()).Allowed {
		t.Fatal("setup: t's pod passes its quota check while g's pool is lent out")
	}
	got := Reclaim(cfg, admitted, &w, a, victims)
	if len(got) != 1 || got[0].Key != "x/b" {
		t.Fatalf("t reclaims %v, want x/b (the least lost work of the loan's borrower)", got)
	}
	after := map[quota.Account]quota.Usage{{Team: "x"}: {Running: quota.Amount{GPUs: 1}}, a: {Running: quota.Amount{GPUs: 1}}}
	if !cfg.CheckAccount(a, map[quota.Account]quota.Usage{{Team: "x"}: {Running: quota.Amount{GPUs: 1}}}, w.Need()).Allowed {
		t.Error("with x/b gone t's pod still fails its check")
	}
	// x cannot take it back: it was borrowing a loan.
	back := wl("x", "x/again", 1, 0, time.Minute)
	if got := Reclaim(cfg, after, &back, quota.Account{Team: "x"}, []Victim{oneGPU("t/w", "t", 0)}); got != nil {
		t.Errorf("x reclaims %v back from t", got)
	}
	// t wants 3: g's pool holds 2, the rest would be borrowed: nothing.
	w3 := wl("t", "t/three", 3, 0, time.Minute)
	if got := Reclaim(cfg, admitted, &w3, a, victims); got != nil {
		t.Errorf("t reclaims %v for more than its group's pool", got)
	}
	// The pool shared inside the group: s uses it, t is not owed it.
	inGroup := map[quota.Account]quota.Usage{{Team: "s"}: {Running: quota.Amount{GPUs: 2}}}
	if got := Reclaim(cfg, inGroup, &w, a, []Victim{oneGPU("s/a", "s", 0), oneGPU("s/b", "s", 0)}); got != nil {
		t.Errorf("t reclaims %v from its sibling s, which shares g's pool", got)
	}
	// Without the loan (lend 0) x could not have borrowed it; with groups
	// that do not lend, nothing is reclaimed this way.
	noLend := lentTree()
	gg := noLend.Groups["g"]
	gg.Lend = quota.Limits{}
	noLend.Groups["g"] = gg
	if got := Reclaim(noLend, admitted, &w, a, victims); got != nil {
		t.Errorf("no group lends, yet t reclaims %v", got)
	}
}

// Random trees with loans: whenever reclaim takes borrowed work for a
// team, the team was refused and passes its check with the victims gone;
// no victim's account ends below its guarantee; every victim is outside
// the subtree of a lending group on the team's path; and no victim's team
// could then reclaim from the work admitted in its place.
func TestReclaimLentPoolProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	found := 0
	for iter := range 400 {
		cfg := randomLendingTree(r)
		teams := make([]string, 0, len(cfg.Teams))
		for name := range cfg.Teams {
			teams = append(teams, name)
		}
		slices.Sort(teams)
		admitted := map[quota.Account]quota.Usage{}
		var victims []Victim
		// Admit random 1-GPU pods while the quota check allows.
		for k := range 40 {
			team := teams[r.IntN(len(teams))]
			acct := quota.Account{Team: team}
			if !cfg.CheckAccount(acct, admitted, quota.Amount{GPUs: 1}).Allowed {
				continue
			}
			u := admitted[acct]
			u.Running = u.Running.Add(quota.Amount{GPUs: 1})
			admitted[acct] = u
			victims = append(victims, oneGPU(fmt.Sprintf("%s/%d", team, k), team, float64(r.IntN(100))))
		}
		team := teams[r.IntN(len(teams))]
		a := quota.Account{Team: team}
		w := wl(team, team+"/want", 1+int64(r.IntN(3)), 0, time.Minute)
		got := Reclaim(cfg, admitted, &w, a, victims)
		g, _, _, _ := cfg.AccountLimits(a)
		if len(got) == 0 || admitted[a].Total().Add(w.Need()).Fits(g) {
			continue // nothing taken, or the flat rule's case
		}
		found++
		if cfg.CheckAccount(a, admitted, w.Need()).Allowed {
			t.Fatalf("iter %d: %s reclaimed %v though its check passed", iter, team, got)
		}
		after := map[quota.Account]quota.Usage{}
		for k, u := range admitted {
			after[k] = u
		}
		for _, v := range got {
			u := after[v.Account]
			u.Running = u.Running.Sub(v.Amount)
			after[v.Account] = u
			vg, _, _, _ := cfg.AccountLimits(v.Account)
			if after[v.Account].Total().GPUs < vg.GPUs {
				t.Fatalf("iter %d: victim team %s ends below its guarantee", iter, v.Team)
			}
			outside := false
			for _, lg := range lendingPath(cfg, team) {
				if !slices.Contains(cfg.Path(v.Team), lg) {
					outside = true
				}
			}
			if !outside {
				t.Fatalf("iter %d: victim %s is inside every lending group of %s's path", iter, v.Key, team)
			}
		}
		if !cfg.CheckAccount(a, after, w.Need()).Allowed {
			t.Fatalf("iter %d: %s still fails its check with %v gone", iter, team, got)
		}
		u := after[a]
		u.Running = u.Running.Add(w.Need())
		after[a] = u
		mine := Victim{Key: "reclaimer", Team: team, Account: a, Amount: w.Need(), Preemptible: true, AdmittedAt: t0}
		for _, v := range got {
			back := wl(v.Team, v.Key+"/back", v.Amount.GPUs, 0, time.Minute)
			if again := Reclaim(cfg, after, &back, v.Account, []Victim{mine}); len(again) > 0 {
				t.Fatalf("iter %d: %s reclaims back from %s what was reclaimed from it\ncfg %+v\nadmitted %v\nwant %v got %v\nafter %v", iter, v.Team, team, cfg, admitted, w.Need(), got, after)
			}
		}
	}
	t.Logf("%d lent-pool reclaims in 400 random trees", found)
	if found < 10 {
		t.Fatalf("only %d lent-pool reclaims in 400 random trees: the test does not exercise the rule", found)
	}
}

// randomLendingTree is a department or two of groups that lend part of
// their pools, with teams that borrow, and a small shared pool.
func randomLendingTree(r *rand.Rand) quota.Config {
	cfg := quota.Config{Groups: map[string]quota.Group{}, Teams: map[string]quota.Team{},
		SharedPool: quota.Limits{GPUs: int64(r.IntN(3))}}
	for d := range 1 + r.IntN(2) {
		dept := fmt.Sprintf("d%d", d)
		cfg.Groups[dept] = quota.Group{GPUs: int64(r.IntN(3))}
		for g := range 2 + r.IntN(2) {
			name := fmt.Sprintf("%s-g%d", dept, g)
			pool := int64(r.IntN(5))
			cfg.Groups[name] = quota.Group{Parent: dept, GPUs: pool, Lend: quota.Limits{GPUs: int64(r.IntN(int(pool) + 1))}}
			for tm := range 1 + r.IntN(2) {
				cfg.Teams[fmt.Sprintf("%s-t%d", name, tm)] = quota.Team{GPUs: int64(r.IntN(2)), Borrow: quota.Limits{GPUs: 10}, Group: name}
			}
		}
	}
	return cfg
}
