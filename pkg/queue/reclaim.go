package queue

import (
	"cmp"
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
	// AdmittedAt breaks ties: the newest admitted goes first.
	AdmittedAt time.Time
	// LostWork is what evicting it now loses, in GPU-seconds since its
	// members' last checkpoints (pkg/stopcost): the least goes first.
	LostWork float64
	// Young marks work inside its minimum runtime (pkg/stopcost.Young); it
	// is never a victim. The caller leaves it false when the reclaiming
	// workload is urgent.
	Young bool
	// YoungUntil is when young work leaves its minimum runtime (its latest
	// member's, pkg/stopcost.YoungUntil); zero when unknown.
	YoungUntil time.Time
}

// ReclaimableAt is, for a workload Reclaim finds no victims for now, the
// earliest time at which it would, counting young work as a victim from
// its YoungUntil on, with nothing else changed: the expected start of
// reclaim once minimum runtimes pass. Zero when no known time helps. It
// tries at most maxTimes distinct times, the earliest first.
func ReclaimableAt(cfg quota.Config, admitted map[quota.Account]quota.Usage, w *Workload, a quota.Account, victims []Victim, maxTimes int) time.Time {
	var times []time.Time
	for _, v := range victims {
		if v.Young && !v.YoungUntil.IsZero() {
			times = append(times, v.YoungUntil)
		}
	}
	if len(times) == 0 {
		return time.Time{}
	}
	slices.SortFunc(times, time.Time.Compare)
	times = slices.CompactFunc(times, time.Time.Equal)
	vs := slices.Clone(victims)
	for i, t := range times {
		if i >= maxTimes {
			break
		}
		for j := range vs {
			if vs[j].Young && !vs[j].YoungUntil.IsZero() && !vs[j].YoungUntil.After(t) {
				vs[j].Young = false
			}
		}
		if len(Reclaim(cfg, admitted, w, a, vs)) > 0 {
			return t
		}
	}
	return time.Time{}
}

// Reclaim chooses what to evict so that workload w, charged to account a,
// gets back capacity its team lent: it applies only while a stays within
// its guarantee with w admitted (a team borrowing itself reclaims
// nothing). Victims are preemptible, unprotected work of other accounts on
// the same pool of GPUs (the same model, or both model-agnostic) that are
// above their guarantee and past their minimum runtime, never so many that
// a victim's account ends below its own guarantee, and each frees some of
// what w needs. Among the sets of such victims that free w's need and hold
// no victim they could do without, Reclaim takes the one that loses the
// least work (GPU-seconds since the victims' checkpoints); between sets
// that lose the same, the newest admitted work goes first, as before lost
// work counted. It returns nil when no such set exists.
//
// Up to exactLimit candidates the search is exact; beyond, it is greedy in
// the same order (least lost work, then newest), then gives back any victim
// the others make unnecessary, most costly first.
//
// In a tree of groups (quota.Group), the work nearest in the tree goes
// first: the victims in w's group's subtree, if they can free w's need,
// then those in its parent's, up to all (treeLevels).
//
// Because the reclaiming account never goes above its guarantee and every
// victim's account stays at or above its own, two teams can never reclaim
// from each other in turn.
func Reclaim(cfg quota.Config, admitted map[quota.Account]quota.Usage, w *Workload, a quota.Account, victims []Victim) []Victim {
	need := w.Need()
	g, _, _, ok := cfg.AccountLimits(a)
	if !ok {
		return nil
	}
	if !admitted[a].Total().Add(need).Fits(g) {
		return reclaimLent(cfg, admitted, need, a, victims)
	}
	cands := make([]Victim, 0, len(victims))
	for _, v := range victims {
		if !mayTake(v, a) {
			continue
		}
		// Only what is useful: a victim that frees none of what w needs is
		// not evicted.
		if (need.GPUs == 0 || v.Amount.GPUs == 0) && (need.MemoryMiB == 0 || v.Amount.MemoryMiB == 0) {
			continue
		}
		if _, _, _, ok := cfg.AccountLimits(v.Account); !ok {
			continue
		}
		cands = append(cands, v)
	}
	slices.SortFunc(cands, victimLess)
	// In a tree of groups, borrowed work nearest in the tree goes first:
	// the search runs on the victims in w's own group's subtree, then its
	// parent's, up to all, and the first level that frees w's need wins.
	for _, level := range treeLevels(cfg, a, cands) {
		r := reclaimSearch{cfg: cfg, admitted: admitted, need: need, cands: level, left: map[quota.Account]quota.Amount{}}
		if set := r.run(); set != nil {
			return set
		}
	}
	return nil
}

// mayTake reports whether reclaim for account a may evict v at all:
// preemptible, unprotected work past its minimum runtime, of another team,
// on the same pool of GPUs (the same model, or both model-agnostic).
func mayTake(v Victim, a quota.Account) bool {
	return v.Preemptible && !v.Protected && !v.Young && v.Account.Team != a.Team && v.Account.Model == a.Model
}

// run searches r's candidates: exactly up to exactLimit of them, else
// greedily.
func (r *reclaimSearch) run() []Victim {
	if len(r.cands) <= exactLimit {
		r.exact(0, nil, quota.Amount{}, 0)
		return r.best
	}
	return r.greedy()
}

// treeLevels splits reclaim's candidates for account a by their place in
// the tree of groups (quota.Config.Path): those in a's group's subtree,
// then in its parent's, and so on, then all of them; each level holds the
// one before. Without groups, or for a per-model account, one level: all.
func treeLevels(cfg quota.Config, a quota.Account, cands []Victim) [][]Victim {
	path := cfg.Path(a.Team)
	if !cfg.Nested() || a.Model != "" || len(path) == 0 {
		return [][]Victim{cands}
	}
	var levels [][]Victim
	for _, g := range path {
		var in []Victim
		for _, v := range cands {
			if v.Account.Model == "" && slices.Contains(cfg.Path(v.Team), g) {
				in = append(in, v)
			}
		}
		if len(in) > 0 && (len(levels) == 0 || len(in) > len(levels[len(levels)-1])) {
			levels = append(levels, in)
		}
	}
	if len(levels) == 0 || len(cands) > len(levels[len(levels)-1]) {
		levels = append(levels, cands)
	}
	return levels
}

// exactLimit bounds the exact search (2^n sets at worst, pruned by lost
// work).
const exactLimit = 16

// victimLess orders victims: least lost work, then newest admitted.
func victimLess(x, y Victim) int {
	if c := cmp.Compare(x.LostWork, y.LostWork); c != 0 {
		return c
	}
	if c := y.AdmittedAt.Compare(x.AdmittedAt); c != 0 {
		return c
	}
	return strings.Compare(x.Key, y.Key)
}

type reclaimSearch struct {
	cfg      quota.Config
	admitted map[quota.Account]quota.Usage
	need     quota.Amount
	cands    []Victim
	// left is each victim account's use with the chosen victims gone.
	left     map[quota.Account]quota.Amount
	best     []Victim
	bestLost float64
}

// take tries to add v: false when its account would end below its
// guarantee.
func (r *reclaimSearch) take(v Victim) bool {
	vg, _, _, _ := r.cfg.AccountLimits(v.Account)
	cur, seen := r.left[v.Account]
	if !seen {
		cur = r.admitted[v.Account].Total()
	}
	after := cur.Sub(v.Amount)
	if belowGuarantee(vg, after, v.Amount) {
		return false
	}
	r.left[v.Account] = after
	return true
}

func (r *reclaimSearch) give(v Victim) {
	r.left[v.Account] = r.left[v.Account].Add(v.Amount)
}

// exact searches the sets of candidates from i on, added to chosen.
func (r *reclaimSearch) exact(i int, chosen []Victim, freed quota.Amount, lost float64) {
	if r.best != nil && lost > r.bestLost {
		return
	}
	if covers(freed, r.need) {
		if minimal(chosen, r.need) && (r.best == nil || betterSet(chosen, lost, r.best, r.bestLost)) {
			r.best, r.bestLost = slices.Clone(chosen), lost
		}
		return // adding more would not be minimal
	}
	for j := i; j < len(r.cands); j++ {
		v := r.cands[j]
		if !r.take(v) {
			continue
		}
		r.exact(j+1, append(chosen, v), freed.Add(v.Amount), lost+v.LostWork)
		r.give(v)
	}
}

func (r *reclaimSearch) greedy() []Victim {
	var chosen []Victim
	var freed quota.Amount
	for _, v := range r.cands {
		if covers(freed, r.need) {
			break
		}
		if r.take(v) {
			chosen = append(chosen, v)
			freed = freed.Add(v.Amount)
		}
	}
	if !covers(freed, r.need) {
		return nil
	}
	// Give back what the others make unnecessary, most costly first.
	for i := len(chosen) - 1; i >= 0; i-- {
		if covers(freed.Sub(chosen[i].Amount), r.need) {
			freed = freed.Sub(chosen[i].Amount)
			chosen = slices.Delete(chosen, i, i+1)
		}
	}
	return chosen
}

// minimal reports whether no victim of set can be left out with the rest
// still freeing need.
func minimal(set []Victim, need quota.Amount) bool {
	var freed quota.Amount
	for _, v := range set {
		freed = freed.Add(v.Amount)
	}
	for _, v := range set {
		if covers(freed.Sub(v.Amount), need) {
			return false
		}
	}
	return true
}

// betterSet prefers less lost work, then the newer victims (compared newest
// first, as the greedy order before lost work took them), then fewer.
func betterSet(a []Victim, lostA float64, b []Victim, lostB float64) bool {
	if lostA != lostB {
		return lostA < lostB
	}
	x, y := newestFirst(a), newestFirst(b)
	for i := range min(len(x), len(y)) {
		if c := x[i].AdmittedAt.Compare(y[i].AdmittedAt); c != 0 {
			return c > 0
		}
		if c := strings.Compare(x[i].Key, y[i].Key); c != 0 {
			return c < 0
		}
	}
	return len(x) < len(y)
}

func newestFirst(vs []Victim) []Victim {
	out := slices.Clone(vs)
	slices.SortFunc(out, func(x, y Victim) int {
		if c := y.AdmittedAt.Compare(x.AdmittedAt); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	return out
}

// covers reports whether freed is at least need in each resource need asks
// for; a whole GPU freed also serves a memory share.
func covers(freed, need quota.Amount) bool {
	if freed.GPUs < need.GPUs {
		return false
	}
	return need.MemoryMiB == 0 || freed.MemoryMiB >= need.MemoryMiB || freed.GPUs > need.GPUs
}

// belowGuarantee reports whether use after an eviction that freed freed is
// below guarantee g in a resource the eviction took from. A resource the
// eviction leaves alone does not count: a team that borrows whole GPUs
// stays open to reclaim while it uses less GPU memory (for shares) than it
// is guaranteed.
func belowGuarantee(g, after, freed quota.Amount) bool {
	return (freed.GPUs > 0 && after.GPUs < g.GPUs) || (freed.MemoryMiB > 0 && after.MemoryMiB < g.MemoryMiB)
}

// reclaimLent is Reclaim for a team of a tree whose own groups' pools would
// hold w, but part of them is lent (quota.Group.Lend) to work outside the
// lending group's subtree: a group's pool is its guarantee to its subtree,
// so what it lent comes back to it as a guarantee does. It applies only
// while admitting w fails its quota check, and would pass it if no group
// lent and there were no shared pool (w needs nothing but its own groups'
// pools, beside what its own subtrees use). The victims are borrowed work
// outside the subtree of a lending group on the team's path (the only work
// its loan can serve), nearest lending group first, never taking a
// victim's account below its guarantee; the set is the smallest, in the
// order of least lost work, after which w passes the real check. Its
// victims were borrowing a loan, so, with the loan returned, they are not
// entitled to reclaim it back (their own pools did not hold them).
func reclaimLent(cfg quota.Config, admitted map[quota.Account]quota.Usage, need quota.Amount, a quota.Account, victims []Victim) []Victim {
	if !cfg.Nested() || a.Model != "" {
		return nil
	}
	lenders := lendingPath(cfg, a.Team)
	if len(lenders) == 0 || cfg.CheckAccount(a, admitted, need).Allowed {
		return nil
	}
	own := withoutLoans(cfg)
	if !own.CheckAccount(a, admitted, need).Allowed {
		return nil
	}
	// What each group's subtree takes past all the pools inside it, were
	// nothing lent: the part that lives on loans (or the shared pool).
	flows, _, _ := own.GroupFlows(admitted)
	for _, g := range lenders {
		parent := cfg.Groups[g].Parent
		var cands []Victim
		for _, v := range victims {
			if !mayTake(v, a) {
				continue
			}
			if _, _, pool, ok := cfg.AccountLimits(v.Account); !ok || pool != "" || !onLoan(cfg, flows, v.Team, g, parent) {
				continue
			}
			cands = append(cands, v)
		}
		slices.SortFunc(cands, victimLess)
		if set := lentSet(cfg, admitted, need, a, cands); set != nil {
			return set
		}
	}
	return nil
}

// lendingPath is the groups above team that lend part of their pool,
// nearest first.
func lendingPath(cfg quota.Config, team string) []string {
	var out []string
	for _, g := range cfg.Path(team) {
		if l := cfg.Groups[g].Lend; l.GPUs > 0 || l.GPUMemoryGiB > 0 {
			out = append(out, g)
		}
	}
	return out
}

// withoutLoans is cfg with no group lending and no shared pool: a check
// that passes there needs nothing but the account's guarantee and its own
// groups' pools.
func withoutLoans(cfg quota.Config) quota.Config {
	own := cfg
	own.SharedPool = quota.Limits{}
	own.Groups = make(map[string]quota.Group, len(cfg.Groups))
	for name, g := range cfg.Groups {
		g.Lend = quota.Limits{}
		own.Groups[name] = g
	}
	return own
}

// onLoan reports whether team's use reaches past lender's parent's own
// pool on loans: team is outside lender's subtree, inside its parent's
// (anywhere, for a lender under the shared pool), and every group from
// team's own up to the child of that parent takes more than the pools in
// its subtree hold (flows are withoutLoans'). Work that its own groups'
// pools hold is never taken for a loan, so no team reclaims from another
// in turn: its victims lived on the loan, not on pools of their own.
func onLoan(cfg quota.Config, flows map[string]quota.GroupFlow, team, lender, parent string) bool {
	path := cfg.Path(team)
	if slices.Contains(path, lender) || (parent != "" && !slices.Contains(path, parent)) {
		return false
	}
	for _, g := range path {
		if g == parent {
			break
		}
		if above := flows[g].Above; above.GPUs <= 0 && above.MemoryMiB <= 0 {
			return false
		}
	}
	return true
}

// lentSet takes candidates in order until a's check passes with them
// gone, skipping any whose account would end below its guarantee, then
// gives back those the rest make unnecessary, most costly first; nil when
// all of them do not suffice.
func lentSet(cfg quota.Config, admitted map[quota.Account]quota.Usage, need quota.Amount, a quota.Account, cands []Victim) []Victim {
	r := reclaimSearch{cfg: cfg, admitted: admitted, left: map[quota.Account]quota.Amount{}}
	passes := func(chosen []Victim) bool {
		usage := make(map[quota.Account]quota.Usage, len(admitted))
		for k, u := range admitted {
			usage[k] = u
		}
		for _, v := range chosen {
			u := usage[v.Account]
			u.Running = u.Running.Sub(v.Amount)
			usage[v.Account] = u
		}
		return cfg.CheckAccount(a, usage, need).Allowed
	}
	var chosen []Victim
	for _, v := range cands {
		if r.take(v) {
			chosen = append(chosen, v)
			if passes(chosen) {
				break
			}
		}
	}
	if len(chosen) == 0 || !passes(chosen) {
		return nil
	}
	for i := len(chosen) - 1; i >= 0; i-- {
		if rest := slices.Delete(slices.Clone(chosen), i, i+1); len(rest) > 0 && passes(rest) {
			chosen = rest
		}
	}
	return chosen
}

// ReclaimOrder is the waiting workloads reclaim tries, in queue order:
// every one that waits for room (its quota has room, the nodes are full of
// borrowed work), and, in a tree of groups, each team's first that waits
// for quota (its groups may have lent the pool it is owed: reclaimLent).
// workload looks a key of res.Waiting up.
func ReclaimOrder(cfg quota.Config, res Result, workload func(key string) *Workload) []string {
	var keys []string
	quotaHead := map[string]string{} // team -> its first workload waiting for quota
	for k, st := range res.Waiting {
		switch {
		case st.Reason == WaitRoom:
			keys = append(keys, k)
		case st.Reason == WaitQuota && cfg.Nested():
			team := workload(k).Team
			if h, ok := quotaHead[team]; !ok || Less(workload(k), workload(h)) < 0 {
				quotaHead[team] = k
			}
		}
	}
	for _, k := range quotaHead {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return Less(workload(a), workload(b)) })
	return keys
}
