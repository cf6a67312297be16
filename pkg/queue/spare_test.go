package queue

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/quota"
)

func TestSpared(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"vision": {GPUs: 8}, "nlp": {GPUs: 8},
		"speech": {Models: map[string]quota.ModelQuota{"h100": {GPUs: 4}}},
	}}
	use := func(gpus int64) quota.Usage { return quota.Usage{Running: quota.Amount{GPUs: gpus}} }
	victim := func(team, model string, gpus int64) Victim {
		return Victim{Key: team + "/" + model, Account: quota.Account{Team: team, Model: model}, Amount: quota.Amount{GPUs: gpus}}
	}
	tests := []struct {
		name     string
		admitted map[quota.Account]quota.Usage
		victims  []Victim
		want     []quota.Account
	}{
		{name: "a team above its guarantee gives back what it borrowed",
			admitted: map[quota.Account]quota.Usage{{Team: "nlp"}: use(12)},
			victims:  []Victim{victim("nlp", "", 4)}},
		{name: "never below the guarantee",
			admitted: map[quota.Account]quota.Usage{{Team: "nlp"}: use(12)},
			victims:  []Victim{victim("nlp", "", 4), victim("nlp", "", 1)},
			want:     []quota.Account{{Team: "nlp"}}},
		{name: "a team within its guarantee keeps every pod",
			admitted: map[quota.Account]quota.Usage{{Team: "nlp"}: use(8)},
			victims:  []Victim{victim("nlp", "", 1)},
			want:     []quota.Account{{Team: "nlp"}}},
		{name: "the preemptor's own team is never spared",
			admitted: map[quota.Account]quota.Usage{{Team: "vision"}: use(2)},
			victims:  []Victim{victim("vision", "", 2)}},
		{name: "teams the configuration does not name were promised nothing",
			victims: []Victim{victim("batch", "", 4)}},
		{name: "per-model guarantees count per model",
			admitted: map[quota.Account]quota.Usage{{Team: "speech", Model: "h100"}: use(5), {Team: "nlp"}: use(9)},
			victims:  []Victim{victim("speech", "h100", 2), victim("nlp", "", 1)},
			want:     []quota.Account{{Team: "speech", Model: "h100"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Spared(cfg, tt.admitted, "vision", tt.victims)
			var accts []quota.Account
			for _, s := range got {
				if s.Why == "" {
					t.Errorf("account %s is spared without a reason", s.Account)
				}
				accts = append(accts, s.Account)
			}
			if d := cmp.Diff(tt.want, accts); d != "" {
				t.Errorf("spared accounts (-want +got):\n%s", d)
			}
		})
	}
}

// TestSparedKeepsGuarantees drops the spared accounts' victims as the
// extender does and checks, over random usages and victim sets, that what is
// left never takes another team below its guarantee, and that a team is
// spared only when it would have gone below.
func TestSparedKeepsGuarantees(t *testing.T) {
	teams := []string{"a", "b", "c", "d"}
	cfg := quota.Config{Teams: map[string]quota.Team{}}
	for i, tm := range teams {
		cfg.Teams[tm] = quota.Team{GPUs: int64(2 + 2*i)}
	}
	for seed := range uint64(2000) {
		r := rand.New(rand.NewPCG(seed, 3))
		admitted := map[quota.Account]quota.Usage{}
		for _, tm := range teams {
			admitted[quota.Account{Team: tm}] = quota.Usage{Running: quota.Amount{GPUs: r.Int64N(12)}}
		}
		var victims []Victim
		for range r.IntN(8) {
			tm := teams[r.IntN(len(teams))]
			victims = append(victims, Victim{Account: quota.Account{Team: tm}, Amount: quota.Amount{GPUs: 1 + r.Int64N(3)}})
		}
		preemptor := teams[r.IntN(len(teams))]
		spared := map[quota.Account]bool{}
		for _, s := range Spared(cfg, admitted, preemptor, victims) {
			spared[s.Account] = true
		}
		freed := map[quota.Account]quota.Amount{}
		all := map[quota.Account]quota.Amount{}
		for _, v := range victims {
			all[v.Account] = all[v.Account].Add(v.Amount)
			if !spared[v.Account] {
				freed[v.Account] = freed[v.Account].Add(v.Amount)
			}
		}
		for a, f := range freed {
			g, _, _, _ := cfg.AccountLimits(a)
			if a.Team != preemptor && !g.Fits(admitted[a].Total().Sub(f)) {
				t.Fatalf("seed %d: team %s ends below its guarantee %s: uses %s, evicted %s", seed, a, g, admitted[a].Total(), f)
			}
		}
		for a := range spared {
			g, _, _, _ := cfg.AccountLimits(a)
			if a.Team == preemptor || g.Fits(admitted[a].Total().Sub(all[a])) {
				t.Fatalf("seed %d: team %s spared though evicting all its victims keeps its guarantee", seed, a)
			}
		}
	}
}
