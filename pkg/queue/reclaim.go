package queue

import (
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

// Victim is admitted, running work that reclaim may evict: a pod, or a
// whole gang (evicting one member would break it).
type Victim struct {
	Key     string
	Team    string
	Account quota.Account
	// Amount is what evicting it frees (all members of a gang).
	Amount quota.Amount
	// Preemptible is false for work that must never be evicted; Protected
	// marks members of gangs above the protected size.
	Preemptible, Protected bool
	// AdmittedAt orders victims: the newest admitted goes first.
	AdmittedAt time.Time
}

// Reclaim chooses what to evict so that workload w, charged to account a,
// gets back capacity its team lent: it applies only while a stays within
// its guarantee with w admitted (a team borrowing itself reclaims
// nothing). Victims are preemptible, unprotected work of other accounts on
// the same pool of GPUs (the same model, or both model-agnostic) that are
// above their guarantee, newest admitted first, and never so many that a
// victim's account ends below its own guarantee. It returns nil when the
// eligible victims cannot free w's need.
//
// Because the reclaiming account never goes above its guarantee and every
// victim's account stays at or above its own, two teams can never reclaim
// from each other in turn.
func Reclaim(cfg quota.Config, admitted map[quota.Account]quota.Usage, w *Workload, a quota.Account, victims []Victim) []Victim {
	need := w.Need()
	g, _, _, ok := cfg.AccountLimits(a)
	if !ok || !admitted[a].Total().Add(need).Fits(g) {
		return nil
	}
	cands := make([]Victim, 0, len(victims))
	for _, v := range victims {
		if v.Preemptible && !v.Protected && v.Account.Team != a.Team && v.Account.Model == a.Model {
			cands = append(cands, v)
		}
	}
	slices.SortFunc(cands, func(x, y Victim) int {
		if c := y.AdmittedAt.Compare(x.AdmittedAt); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	left := map[quota.Account]quota.Amount{}
	var chosen []Victim
	var freed quota.Amount
	for _, v := range cands {
		if covers(freed, need) {
			break
		}
		vg, _, _, ok := cfg.AccountLimits(v.Account)
		if !ok {
			continue
		}
		cur, seen := left[v.Account]
		if !seen {
			cur = admitted[v.Account].Total()
		}
		after := cur.Sub(v.Amount)
		if !vg.Fits(after) {
			continue // the victim's team would end below its guarantee
		}
		// Only what is useful: a victim that frees none of what w needs is
		// not evicted.
		if (need.GPUs == 0 || v.Amount.GPUs == 0) && (need.MemoryMiB == 0 || v.Amount.MemoryMiB == 0) {
			continue
		}
		left[v.Account] = after
		chosen = append(chosen, v)
		freed = freed.Add(v.Amount)
	}
	if !covers(freed, need) {
		return nil
	}
	return chosen
}

// covers reports whether freed is at least need in each resource need asks
// for; a whole GPU freed also serves a memory share.
func covers(freed, need quota.Amount) bool {
	if freed.GPUs < need.GPUs {
		return false
	}
	return need.MemoryMiB == 0 || freed.MemoryMiB >= need.MemoryMiB || freed.GPUs > need.GPUs
}
