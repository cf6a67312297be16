package queue

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/quota"
)

// Spared applies reclaim's rule for victims' teams to any other eviction
// of admitted work, such as kube-scheduler's own priority preemption (the
// extender's preempt verb): a team's admitted work may be evicted for
// another team's pod only while the team stays at or above its guarantee,
// so what it lent can be taken back but what it was promised cannot.
// Victims of the preemptor's own team are never spared (priority inside a
// team is the team's business), nor victims of teams the configuration does
// not name (they were promised nothing).
//
// It returns the accounts evicting all of victims would take below their
// guarantee, sorted by name, each with a sentence saying so; the caller
// drops those accounts' victims and chooses again.
func Spared(cfg quota.Config, admitted map[quota.Account]quota.Usage, preemptorTeam string, victims []Victim) []Spare {
	freed := map[quota.Account]quota.Amount{}
	for _, v := range victims {
		if v.Account.Team == preemptorTeam {
			continue
		}
		freed[v.Account] = freed[v.Account].Add(v.Amount)
	}
	var out []Spare
	for a, f := range freed {
		g, _, _, ok := cfg.AccountLimits(a)
		if !ok {
			continue
		}
		use := admitted[a].Total()
		if after := use.Sub(f); belowGuarantee(g, after, f) {
			out = append(out, Spare{Account: a, Why: fmt.Sprintf("team %s uses %s of its %s guarantee; evicting %s would take it below",
				a, use, g, f)})
		}
	}
	slices.SortFunc(out, func(x, y Spare) int { return strings.Compare(x.Account.String(), y.Account.String()) })
	return out
}

// Spare is an account a preemption must leave alone, and why.
type Spare struct {
	Account quota.Account
	Why     string
}
