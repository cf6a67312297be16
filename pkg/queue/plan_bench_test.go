package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// BenchmarkPlan10kQueued is one admission decision of the queue controller
// without the ledger: 10,000 queued pods of 20 teams, MaxAdmissions 1, a
// Fitter that always holds (extender/server's
// BenchmarkQueueAdmission5kNodes10kQueued with the placement left out).
func BenchmarkPlan10kQueued(b *testing.B) {
	in := bigQueue(10000, 20)
	in.MaxAdmissions = 1
	fit := FitterFunc(func(*Workload, quota.Account) (bool, string) { return true, "" })
	b.ReportAllocs()
	for b.Loop() {
		if res := Plan(in, fit); len(res.Admitted) != 1 || len(res.Waiting) != 9999 {
			b.Fatalf("admitted %d, waiting %d", len(res.Admitted), len(res.Waiting))
		}
	}
}

// BenchmarkPlan10kQueued200Admissions is a pass that admits up to 200
// (the controller's default bound) while a shape waits for room.
func BenchmarkPlan10kQueued200Admissions(b *testing.B) {
	in := bigQueue(10000, 20)
	in.MaxAdmissions = 200
	fit := FitterFunc(func(w *Workload, _ quota.Account) (bool, string) {
		if w.Shape == "40" {
			return false, "no room for 40 GiB"
		}
		return true, ""
	})
	b.ReportAllocs()
	for b.Loop() {
		if res := Plan(in, fit); len(res.Admitted) != 200 {
			b.Fatalf("admitted %d", len(res.Admitted))
		}
	}
}

// bigQueue is n single pods of the given number of teams, as in
// extender/server's queue benchmark.
func bigQueue(n, teams int) Input {
	cfg := quota.Config{Teams: map[string]quota.Team{}}
	for t := range teams {
		cfg.Teams[fmt.Sprintf("team-%02d", t)] = quota.Team{GPUs: 10000, GPUMemoryGiB: 100000, Weight: float64(1 + t%3)}
	}
	q := make([]Workload, 0, n)
	for i := range n {
		team := fmt.Sprintf("team-%02d", i%teams)
		units := int64(10 + 10*(i%4))
		q = append(q, Workload{Key: fmt.Sprintf("default/q-%05d", i), Team: team, Accounts: []quota.Account{{Team: team}},
			Priority: int32(i % 3), Created: t0.Add(time.Duration(i) * time.Second), Members: 1, Present: 1,
			PerMember: quota.Amount{MemoryMiB: contract.MiB(units * 1024)}, Shape: fmt.Sprint(units)})
	}
	return Input{Config: cfg, Queued: q, Capacity: Capacity{GPUs: 40000, MemoryMiB: 40000 * 80 * 1024}}
}

// callLog is a pool that also records every Hold call and its answer.
type callLog struct {
	pool
	calls []string
}

func (c *callLog) Hold(w *Workload, a quota.Account) (bool, string) {
	ok, reason := c.pool.Hold(w, a)
	c.calls = append(c.calls, fmt.Sprintf("%s %s %v %s", w.Key, a, ok, reason))
	return ok, reason
}

// TestPlanAgreesWithReference runs random queues (teams of different
// weights and use, priorities and equal ages, gangs, several accounts,
// shapes and no shape, protected heads with declared runtimes, bounded
// passes, a Fitter whose reasons change as room shrinks) through Plan and
// planRef and wants the same admissions and the same statuses.
func TestPlanAgreesWithReference(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 13))
		base := t0
		if seed%5 == 0 {
			base = time.Now() // monotonic readings
		}
		cfg := quota.Config{Teams: map[string]quota.Team{}, SharedPool: quota.Limits{GPUs: int64(r.IntN(20))}}
		teams := []string{"c", "a", "b", "d"}[:1+r.IntN(4)]
		admitted := map[quota.Account]quota.Usage{}
		releases := map[quota.Account][]Release{}
		use := map[string]Use{}
		for _, tm := range teams {
			g := int64(r.IntN(16))
			cfg.Teams[tm] = quota.Team{GPUs: g, Borrow: quota.Limits{GPUs: int64(r.IntN(10))}, Weight: float64(r.IntN(3))}
			acct := quota.Account{Team: tm}
			admitted[acct] = quota.Usage{Running: quota.Amount{GPUs: int64(r.IntN(int(g) + 1))}}
			for range r.IntN(3) {
				releases[acct] = append(releases[acct], Release{At: base.Add(time.Duration(r.IntN(300)) * time.Minute),
					Amount: quota.Amount{GPUs: int64(1 + r.IntN(4))}})
			}
			if r.IntN(2) == 0 {
				use[tm] = Use{GPUs: int64(r.IntN(32)), CPUMilli: int64(r.IntN(64000))}
			}
		}
		var q []Workload
		for i := range 5 + r.IntN(60) {
			tm := teams[r.IntN(len(teams))]
			w := wl(tm, fmt.Sprintf("%s/w%02d", tm, i), int64(1+r.IntN(4)), int32(r.IntN(3)), time.Duration(r.IntN(20))*time.Minute)
			w.Created = base.Add(-time.Duration(r.IntN(20)) * time.Minute)
			w.CPUMilli = int64(r.IntN(4000))
			switch r.IntN(8) {
			case 0:
				w.Members = 1 + r.IntN(4)
				w.Present = w.Members - r.IntN(2)
				w.Shape = fmt.Sprintf("gang=%dx%d", w.Members, w.PerMember.GPUs)
			case 1:
				w.Accounts = nil
			case 2:
				w.Accounts = append(w.Accounts, quota.Account{Team: tm, Model: "h100"})
			case 3:
				w.Shape = ""
			}
			if r.IntN(3) == 0 {
				w.Ends = base.Add(time.Duration(r.IntN(300)) * time.Minute)
			}
			q = append(q, w)
		}
		r.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
		in := Input{Config: cfg, Queued: q, Admitted: admitted, TeamUse: use, Releases: releases,
			Capacity: Capacity{GPUs: 64, CPUMilli: 256000}, MaxAdmissions: r.IntN(6)}
		if r.IntN(2) == 0 {
			in.Protected = func(w *Workload) bool { return w.Need().GPUs >= 3 }
		}
		free := int64(r.IntN(40))
		gotFit, wantFit := &callLog{pool: pool{free: free}}, &callLog{pool: pool{free: free}}
		got, want := Plan(in, gotFit), planRef(in, wantFit)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("seed %d: Plan differs from the reference (-want +got):\n%s", seed, diff)
		}
		if diff := cmp.Diff(wantFit.calls, gotFit.calls); diff != "" {
			t.Fatalf("seed %d: Hold calls differ (-want +got):\n%s", seed, diff)
		}
	}
}

// planRef is Plan as it was before its bookkeeping moved to slices: maps
// keyed by workload, every team rescanned from its start. Plan must agree
// with it on every input.
func planRef(in Input, fit Fitter) Result {
	teams := map[string][]*Workload{}
	for i := range in.Queued {
		w := &in.Queued[i]
		teams[w.Team] = append(teams[w.Team], w)
	}
	names := make([]string, 0, len(teams))
	for t, ws := range teams {
		slices.SortFunc(ws, Less)
		names = append(names, t)
	}
	slices.Sort(names)

	usage := make(map[quota.Account]quota.Usage, len(in.Admitted))
	for a, u := range in.Admitted {
		usage[a] = u
	}
	use := make(map[string]Use, len(in.TeamUse))
	for t, u := range in.TeamUse {
		use[t] = u
	}
	res := Result{Waiting: make(map[string]Status, len(in.Queued))}
	admitted := map[string]bool{}
	why := make(map[string]Status, len(in.Queued))
	failedShape := map[string]string{} // shape+account -> reason, for this pass
	starts := map[string]time.Time{}   // protected head -> when its quota is expected back
	open := map[string]bool{}
	for _, t := range names {
		open[t] = true
	}
	for len(open) > 0 && (in.MaxAdmissions == 0 || len(res.Admitted) < in.MaxAdmissions) {
		// The open team with the lowest weighted dominant share.
		best, bestShare := "", 0.0
		for _, t := range names {
			if !open[t] {
				continue
			}
			s := in.shareRef(t, use[t])
			if best == "" || s < bestShare {
				best, bestShare = t, s
			}
		}
		adm, ok := in.nextRef(teams[best], admitted, usage, why, failedShape, starts, fit)
		if !ok {
			delete(open, best)
			continue
		}
		adm.Share = bestShare
		admitted[adm.Workload.Key] = true
		u := usage[adm.Account]
		u.Pending = u.Pending.Add(adm.Workload.Need())
		usage[adm.Account] = u
		tu := use[best]
		need := adm.Workload.Need()
		tu.GPUs += need.GPUs
		tu.MemoryMiB += int64(need.MemoryMiB)
		tu.CPUMilli += adm.Workload.CPUMilli * int64(adm.Workload.Members)
		use[best] = tu
		res.Admitted = append(res.Admitted, adm)
	}
	for _, t := range names {
		var left []*Workload
		for _, w := range teams[t] {
			if !admitted[w.Key] {
				left = append(left, w)
			}
		}
		var ahead quota.Amount
		for i, w := range left {
			st, ok := why[w.Key]
			if !ok {
				st = Status{Reason: WaitTurn, Message: "not considered yet in this pass"}
			}
			st.Position, st.Of, st.Ahead, st.AheadNeed = i+1, len(left), i, ahead
			res.Waiting[w.Key] = st
			ahead = ahead.Add(w.Need())
		}
	}
	return res
}

// shareRef is a team's weighted dominant share with use u.
func (in *Input) shareRef(team string, u Use) float64 {
	s := 0.0
	frac := func(v, c int64) {
		if c > 0 {
			s = max(s, float64(v)/float64(c))
		}
	}
	frac(u.GPUs, in.Capacity.GPUs)
	frac(u.MemoryMiB, in.Capacity.MemoryMiB)
	frac(u.CPUMilli, in.Capacity.CPUMilli)
	w := 1.0
	if t, ok := in.Config.Teams[team]; ok {
		w = t.EffectiveWeight()
	}
	return s / w
}

// nextRef finds the first workload of one team's ordered queue that can be
// admitted now, and holds its room.
func (in *Input) nextRef(ws []*Workload, admitted map[string]bool, usage map[quota.Account]quota.Usage,
	why map[string]Status, failedShape map[string]string, starts map[string]time.Time, fit Fitter) (Admission, bool) {
	var guard *Workload // the protected head that waits for quota, if any
	for _, w := range ws {
		if admitted[w.Key] {
			continue
		}
		if guard != nil && sharesAccount(guard, w) {
			start := starts[guard.Key]
			if w.Ends.IsZero() || start.IsZero() || w.Ends.After(start) {
				why[w.Key] = Status{Reason: WaitQuota, Message: guardMessage(guard, start, w)}
				continue
			}
		}
		if !w.Complete() {
			why[w.Key] = Status{Reason: WaitMembers,
				Message: fmt.Sprintf("gang %s: %d of %d members exist; it is admitted whole once all do", w.Key, w.Present, w.Members)}
			continue
		}
		if len(w.Accounts) == 0 {
			why[w.Key] = Status{Reason: WaitNoAccount, Message: fmt.Sprintf("team %s has no quota for the GPU models this pod accepts", w.Team)}
			continue
		}
		var quotaMsg, roomMsg string
		for _, a := range w.Accounts {
			d := in.Config.CheckAccount(a, usage, w.Need())
			if !d.Allowed {
				if quotaMsg == "" && len(d.Shortfalls) > 0 {
					quotaMsg = "waiting for quota: " + d.Shortfalls[0].Message(subject(w))
				}
				continue
			}
			key := w.Shape + "|" + a.String()
			if r, failed := failedShape[key]; failed && w.Shape != "" {
				roomMsg = r
				continue
			}
			ok, reason := fit.Hold(w, a)
			if !ok {
				roomMsg = "waiting for room: " + reason
				failedShape[key] = roomMsg
				continue
			}
			return Admission{Workload: w, Account: a, Borrowed: d.Borrowed}, true
		}
		if roomMsg != "" {
			why[w.Key] = Status{Reason: WaitRoom, Message: roomMsg}
		} else {
			if quotaMsg == "" {
				quotaMsg = "waiting for quota"
			}
			why[w.Key] = Status{Reason: WaitQuota, Message: quotaMsg + beyondGuarantee(in.Config, w)}
			if guard == nil && w.Complete() && in.Protected != nil && in.Protected(w) {
				guard = w
				if _, ok := starts[w.Key]; !ok {
					starts[w.Key] = in.quotaStart(w, usage)
				}
			}
		}
	}
	return Admission{}, false
}
