package queue

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

// Workload is one unit of queued work: a pod, or a gang with all its
// members. Workloads are values; Plan does not change them.
type Workload struct {
	// Key identifies the workload: "namespace/pod" or "namespace/gang".
	Key string
	// Team is the team it is charged to.
	Team string
	// Accounts are the quota accounts it may be charged to, in the order
	// they are tried (quota.Config.Accounts).
	Accounts []quota.Account
	// Priority is the pod priority (PriorityClass value).
	Priority int32
	// Created orders equal priorities: the owning workload's creation (a
	// Job's) where there is one, else the pod's.
	Created time.Time
	// Members is the member count (1 for a pod), Present how many exist
	// now; a gang is admitted only when Present == Members.
	Members, Present int
	// PerMember is what each member asks for, CPUMilli its CPU.
	PerMember quota.Amount
	CPUMilli  int64
	// Shape groups workloads whose members ask for the same thing, so that
	// a failed fit is not tried again for the same shape in one pass (the
	// room only shrinks while Plan runs). Empty disables the shortcut.
	Shape string
	// Ends is when it would end if admitted now: now plus its declared
	// maximum runtime; zero when it declares none. Behind a protected head
	// that waits for quota, only work that ends before the head's quota is
	// expected back is admitted (see Input.Protected).
	Ends time.Time
}

// Release is admitted work that ends at a declared time, giving its quota
// back.
type Release struct {
	At     time.Time
	Amount quota.Amount
}

// Need is what the whole workload asks for.
func (w *Workload) Need() quota.Amount { return w.PerMember.Times(int64(w.Members)) }

// Complete reports whether every member exists.
func (w *Workload) Complete() bool { return w.Present >= w.Members }

// Less orders two workloads of one team: priority, then age, then key.
func Less(a, b *Workload) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// Capacity is the cluster's size in the resources fair share counts.
type Capacity struct {
	GPUs      int64
	MemoryMiB int64
	CPUMilli  int64
}

// Use is a team's admitted use in the resources fair share counts.
type Use struct {
	GPUs      int64
	MemoryMiB int64
	CPUMilli  int64
}

// Input is one pass's view.
type Input struct {
	Config quota.Config
	// Queued is every queued workload, in any order.
	Queued []Workload
	// Admitted is the admitted use per quota account (ungated pods, pending
	// or running). Running is placed, Pending admitted and not placed.
	Admitted map[quota.Account]quota.Usage
	// TeamUse is each team's admitted use for fair share, including CPU.
	TeamUse map[string]Use
	// Capacity is the cluster's size.
	Capacity Capacity
	// MaxAdmissions bounds the admissions of one pass (0: no bound).
	MaxAdmissions int
	// Protected, when set, says which workloads must not be starved of
	// their team's quota (a large or long-waiting job, pkg/reserve): when
	// one waits for quota, the later workloads of its team that share an
	// account with it are admitted only if they end (Workload.Ends) by
	// the time its quota is expected back, from the admitted work's
	// declared ends (Releases). Quota is then reserved for it as room is
	// for a reservation, with backfill by declared runtime.
	Protected func(w *Workload) bool
	// Releases are the admitted work's declared ends, per account.
	Releases map[quota.Account][]Release
}

// Fitter tries to hold room for a workload charged to an account. Hold
// either holds room for every member (and returns ok) or holds nothing and
// says why not. Plan calls it at most once per workload per pass, in
// admission order, so the holds of one pass never count the same room.
type Fitter interface {
	Hold(w *Workload, a quota.Account) (ok bool, reason string)
}

// FitterFunc adapts a function to Fitter.
type FitterFunc func(w *Workload, a quota.Account) (bool, string)

// Hold calls f.
func (f FitterFunc) Hold(w *Workload, a quota.Account) (bool, string) { return f(w, a) }

// Admission is a workload Plan admitted.
type Admission struct {
	Workload *Workload
	Account  quota.Account
	// Borrowed is how much of it comes from the shared pool.
	Borrowed quota.Amount
	// Share is the team's weighted dominant share before this admission.
	Share float64
}

// WaitReason says what a queued workload waits for.
type WaitReason string

const (
	// WaitQuota: its team's quota (and what it may borrow) has no room.
	WaitQuota WaitReason = "Quota"
	// WaitRoom: quota has room, the cluster does not.
	WaitRoom WaitReason = "Room"
	// WaitMembers: a gang whose members do not all exist yet.
	WaitMembers WaitReason = "GangIncomplete"
	// WaitTurn: not tried in this pass (the pass's admission bound).
	WaitTurn WaitReason = "Turn"
	// WaitNoAccount: none of its quota accounts exists (per-model quota
	// without the models the pod accepts).
	WaitNoAccount WaitReason = "NoAccount"
)

// Status is where a queued workload stands after a pass.
type Status struct {
	// Position is 1-based in its team's queue; Of is the queue's length.
	Position, Of int
	Reason       WaitReason
	// Message says it in words, with the numbers.
	Message string
	// AheadNeed is what the workloads ahead of it in its team ask for.
	AheadNeed quota.Amount
	Ahead     int
}

// Result is a pass's outcome.
type Result struct {
	Admitted []Admission
	// Waiting has one entry per workload left queued, by key.
	Waiting map[string]Status
}

// Plan runs one pass: it admits what quota and room allow, in the order the
// package doc states, and says where every other workload stands.
func Plan(in Input, fit Fitter) Result {
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
			s := in.share(t, use[t])
			if best == "" || s < bestShare {
				best, bestShare = t, s
			}
		}
		adm, ok := in.next(teams[best], admitted, usage, why, failedShape, starts, fit)
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

// share is a team's weighted dominant share with use u.
func (in *Input) share(team string, u Use) float64 {
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

// next finds the first workload of one team's ordered queue that can be
// admitted now, and holds its room.
func (in *Input) next(ws []*Workload, admitted map[string]bool, usage map[quota.Account]quota.Usage,
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
			why[w.Key] = Status{Reason: WaitQuota, Message: quotaMsg}
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

// quotaStart is when a workload's quota is expected back: the first
// declared end of admitted work after which one of its accounts admits it;
// zero when the declared ends never give enough back.
func (in *Input) quotaStart(w *Workload, usage map[quota.Account]quota.Usage) time.Time {
	var best time.Time
	for _, a := range w.Accounts {
		rs := slices.Clone(in.Releases[a])
		slices.SortFunc(rs, func(x, y Release) int { return x.At.Compare(y.At) })
		u := maps.Clone(usage)
		cur := u[a]
		for _, r := range rs {
			cur.Running = cur.Running.Sub(r.Amount)
			u[a] = cur
			if in.Config.CheckAccount(a, u, w.Need()).Allowed {
				if best.IsZero() || r.At.Before(best) {
					best = r.At
				}
				break
			}
		}
	}
	return best
}

func sharesAccount(a, b *Workload) bool {
	for _, x := range a.Accounts {
		if slices.Contains(b.Accounts, x) {
			return true
		}
	}
	return false
}

func guardMessage(head *Workload, start time.Time, w *Workload) string {
	when := "when is not known (admitted work declares no runtime that gives enough back)"
	if !start.IsZero() {
		when = "expected by " + start.UTC().Format("2006-01-02 15:04 MST")
	}
	why := "this pod declares no maximum runtime"
	if !w.Ends.IsZero() {
		why = "this pod may run until " + w.Ends.UTC().Format("2006-01-02 15:04 MST")
	}
	return fmt.Sprintf("waiting behind %s, which waits for the team's quota (%s); %s, so it cannot backfill",
		head.Key, when, why)
}

func subject(w *Workload) string {
	if w.Members > 1 {
		return fmt.Sprintf("gang %s (%d pods x %s)", w.Key, w.Members, w.PerMember)
	}
	return "this pod"
}
