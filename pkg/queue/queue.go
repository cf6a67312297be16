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
	// LatestStart is the latest it may start and still end by its
	// declared deadline (the deadline less its declared runtime); zero
	// when it declares none. See Input.DeadlineLead.
	LatestStart time.Time
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
	// Now and DeadlineLead order deadlines: inside its team and priority, a
	// workload whose latest start (Workload.LatestStart) is from Now to
	// Now+DeadlineLead would miss its deadline if it waited longer, so it
	// goes ahead of those that would not, the earliest latest start first.
	// One whose latest start has passed cannot meet its deadline even if
	// started now: it keeps its place and its Status says so (Late). Zero
	// Now: no deadline ordering.
	Now          time.Time
	DeadlineLead time.Duration
	// Past is each team's fair-share memory (History.Share): added to its
	// current dominant share before dividing by its weight. Nil: fair
	// share by current use only.
	Past map[string]float64
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
	// Urgent: it went ahead for its deadline (Input.DeadlineLead). Late:
	// it cannot end by its deadline even if it started now.
	Urgent, Late bool
}

// Result is a pass's outcome.
type Result struct {
	Admitted []Admission
	// Waiting has one entry per workload left queued, by key.
	Waiting map[string]Status
}

// Plan runs one pass: it admits what quota and room allow, in the order the
// package doc states, and says where every other workload stands.
//
// Keys are unique (Workload.Key identifies the workload). The pass keeps
// its bookkeeping in slices indexed by a workload's position in Queued, so
// that a pass over many queued workloads that admits few costs a sort per
// team and one entry per workload in Waiting.
func Plan(in Input, fit Fitter) Result {
	p := newPass(&in)
	p.run(fit)
	return p.result()
}

// pass is one Plan run's state. Workloads are named by their index in
// in.Queued, teams by their index in names.
type pass struct {
	in    *Input
	names []string  // team names, sorted
	first []int     // team t's queue is ord[first[t]:first[t+1]]
	ord   []int32   // workload indices, by team, each team in Less order
	head  []int     // team t's first entry in ord not admitted
	use   []Use     // each team's admitted use, for fair share
	wt    []float64 // each team's effective weight
	open  []bool
	usage map[quota.Account]quota.Usage
	// admitted marks admitted workloads; why[i] is 1 + the index in whys
	// of workload i's status (0: not tried).
	admitted []bool
	why      []int32
	whys     []Status
	failed   map[shapeAccount]string // a shape's room failure in this pass
	starts   map[int32]time.Time     // protected head -> when its quota is expected back
	res      Result
}

type shapeAccount struct {
	shape   string
	account quota.Account
}

// orderKey is a workload's place in its team's order (Less), compact so
// that sorting reads no Workload.
type orderKey struct {
	prio int32
	i    int32
	sec  int64
	nsec int32
	// lane is 0 for a workload that goes ahead for its deadline (ordered
	// by its latest start, in sec and nsec), 1 for the others (by
	// creation).
	lane int8
}

func newPass(in *Input) *pass {
	n := len(in.Queued)
	p := &pass{in: in, admitted: make([]bool, n), why: make([]int32, n),
		failed: map[shapeAccount]string{}, starts: map[int32]time.Time{}}
	// Teams, in name order.
	team := make([]int32, n)
	ids := map[string]int32{}
	last, lastID := "", int32(-1)
	for i := range in.Queued {
		t := in.Queued[i].Team
		if lastID < 0 || t != last {
			id, ok := ids[t]
			if !ok {
				id = int32(len(p.names))
				ids[t] = id
				p.names = append(p.names, t)
			}
			last, lastID = t, id
		}
		team[i] = lastID
	}
	byName := make([]int32, len(p.names))
	for i := range byName {
		byName[i] = int32(i)
	}
	slices.SortFunc(byName, func(a, b int32) int { return strings.Compare(p.names[a], p.names[b]) })
	rank := make([]int32, len(p.names)) // first-seen id -> position in name order
	sorted := make([]string, len(p.names))
	for r, id := range byName {
		rank[id] = int32(r)
		sorted[r] = p.names[id]
	}
	p.names = sorted
	nt := len(p.names)
	// Group by team (counting sort), then order each team.
	p.first = make([]int, nt+1)
	for i := range team {
		team[i] = rank[team[i]]
		p.first[team[i]+1]++
	}
	for t := range nt {
		p.first[t+1] += p.first[t]
	}
	keys := make([]orderKey, n)
	fill := slices.Clone(p.first[:nt])
	mono := false
	for i := range in.Queued {
		w := &in.Queued[i]
		c, lane := w.Created, int8(1)
		if in.urgent(w) {
			c, lane = w.LatestStart, 0
		}
		if c != c.Round(0) {
			mono = true // monotonic readings: compare as time.Time does
		}
		keys[fill[team[i]]] = orderKey{prio: w.Priority, i: int32(i), sec: c.Unix(), nsec: int32(c.Nanosecond()), lane: lane}
		fill[team[i]]++
	}
	cmpKeys := func(a, b orderKey) int {
		if c := cmp.Compare(b.prio, a.prio); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lane, b.lane); c != 0 {
			return c
		}
		if mono {
			if a.lane == 0 {
				if c := in.Queued[a.i].LatestStart.Compare(in.Queued[b.i].LatestStart); c != 0 {
					return c
				}
				return strings.Compare(in.Queued[a.i].Key, in.Queued[b.i].Key)
			}
			return Less(&in.Queued[a.i], &in.Queued[b.i])
		}
		if c := cmp.Compare(a.sec, b.sec); c != 0 {
			return c
		}
		if c := cmp.Compare(a.nsec, b.nsec); c != 0 {
			return c
		}
		return strings.Compare(in.Queued[a.i].Key, in.Queued[b.i].Key)
	}
	p.ord = make([]int32, n)
	for t := range nt {
		seg := keys[p.first[t]:p.first[t+1]]
		slices.SortFunc(seg, cmpKeys)
		for j, k := range seg {
			p.ord[p.first[t]+j] = k.i
		}
	}
	p.head = slices.Clone(p.first[:nt])
	p.open = make([]bool, nt)
	p.use = make([]Use, nt)
	p.wt = make([]float64, nt)
	for t, name := range p.names {
		p.open[t] = true
		p.use[t] = in.TeamUse[name]
		p.wt[t] = 1
		if tm, ok := in.Config.Teams[name]; ok {
			p.wt[t] = tm.EffectiveWeight()
		}
	}
	p.usage = make(map[quota.Account]quota.Usage, len(in.Admitted))
	for a, u := range in.Admitted {
		p.usage[a] = u
	}
	return p
}

func (p *pass) run(fit Fitter) {
	in := p.in
	tree := newShareTree(in.Config, p.names)
	for open := len(p.names); open > 0 && (in.MaxAdmissions == 0 || len(p.res.Admitted) < in.MaxAdmissions); {
		// The open team with the lowest weighted dominant share; in a tree
		// of groups, level by level among siblings.
		best, bestShare := -1, 0.0
		var keys [][]nodeShare
		if tree != nil {
			keys = tree.keys(p)
		}
		for t := range p.names {
			if !p.open[t] {
				continue
			}
			s := p.share(t)
			if best < 0 || (keys == nil && s < bestShare) || (keys != nil && lessKey(keys[t], keys[best])) {
				best, bestShare = t, s
			}
		}
		adm, ok := p.next(best, fit)
		if !ok {
			p.open[best] = false
			open--
			continue
		}
		adm.Share = bestShare
		w := adm.Workload
		need := w.Need()
		u := p.usage[adm.Account]
		u.Pending = u.Pending.Add(need)
		p.usage[adm.Account] = u
		tu := &p.use[best]
		tu.GPUs += need.GPUs
		tu.MemoryMiB += int64(need.MemoryMiB)
		tu.CPUMilli += w.CPUMilli * int64(w.Members)
		p.res.Admitted = append(p.res.Admitted, adm)
	}
}

// result says where every workload left queued stands.
func (p *pass) result() Result {
	res := p.res
	res.Waiting = make(map[string]Status, len(p.in.Queued)-len(res.Admitted))
	for t := range p.names {
		seg := p.ord[p.first[t]:p.first[t+1]]
		left := len(seg)
		for _, i := range seg {
			if p.admitted[i] {
				left--
			}
		}
		var ahead quota.Amount
		pos := 0
		for _, i := range seg {
			if p.admitted[i] {
				continue
			}
			w := &p.in.Queued[i]
			st := Status{Reason: WaitTurn, Message: "not considered yet in this pass"}
			if k := p.why[i]; k > 0 {
				st = p.whys[k-1]
			}
			st.Position, st.Of, st.Ahead, st.AheadNeed = pos+1, left, pos, ahead
			p.in.deadline(w, &st)
			res.Waiting[w.Key] = st
			ahead = ahead.Add(w.Need())
			pos++
		}
	}
	return res
}

// share is team t's weighted dominant share now, with its past use
// (Input.Past) added.
func (p *pass) share(t int) float64 {
	return (DominantShare(p.use[t], p.in.Capacity) + p.in.Past[p.names[t]]) / p.wt[t]
}

// wait records why workload i waits.
func (p *pass) wait(i int32, st Status) {
	if k := p.why[i]; k > 0 {
		p.whys[k-1] = st
		return
	}
	p.whys = append(p.whys, st)
	p.why[i] = int32(len(p.whys))
}

// next finds the first workload of team t's ordered queue that can be
// admitted now, and holds its room.
func (p *pass) next(t int, fit Fitter) (Admission, bool) {
	in := p.in
	var guard *Workload // the protected head that waits for quota, if any
	var guardStart time.Time
	seg := p.ord[p.head[t]:p.first[t+1]]
	for j, i := range seg {
		if p.admitted[i] {
			continue
		}
		w := &in.Queued[i]
		if guard != nil && sharesAccount(guard, w) {
			if w.Ends.IsZero() || guardStart.IsZero() || w.Ends.After(guardStart) {
				p.wait(i, Status{Reason: WaitQuota, Message: guardMessage(guard, guardStart, w)})
				continue
			}
		}
		if !w.Complete() {
			p.wait(i, Status{Reason: WaitMembers,
				Message: fmt.Sprintf("gang %s: %d of %d members exist; it is admitted whole once all do", w.Key, w.Present, w.Members)})
			continue
		}
		if len(w.Accounts) == 0 {
			p.wait(i, Status{Reason: WaitNoAccount, Message: fmt.Sprintf("team %s has no quota for the GPU models this pod accepts", w.Team)})
			continue
		}
		var quotaMsg, roomMsg string
		for _, a := range w.Accounts {
			d := in.Config.CheckAccount(a, p.usage, w.Need())
			if !d.Allowed {
				if quotaMsg == "" && len(d.Shortfalls) > 0 {
					quotaMsg = "waiting for quota: " + d.Shortfalls[0].Message(subject(w))
				}
				continue
			}
			key := shapeAccount{w.Shape, a}
			if r, failed := p.failed[key]; failed && w.Shape != "" {
				roomMsg = r
				continue
			}
			ok, reason := fit.Hold(w, a)
			if !ok {
				roomMsg = "waiting for room: " + reason
				p.failed[key] = roomMsg
				continue
			}
			p.admitted[i] = true
			if j == 0 {
				// The team's head moves past what is admitted.
				h := p.head[t]
				for h < p.first[t+1] && p.admitted[p.ord[h]] {
					h++
				}
				p.head[t] = h
			}
			return Admission{Workload: w, Account: a, Borrowed: d.Borrowed}, true
		}
		if roomMsg != "" {
			p.wait(i, Status{Reason: WaitRoom, Message: roomMsg})
		} else {
			if quotaMsg == "" {
				quotaMsg = "waiting for quota"
			}
			p.wait(i, Status{Reason: WaitQuota, Message: quotaMsg + beyondGuarantee(in.Config, w)})
			if guard == nil && w.Complete() && in.Protected != nil && in.Protected(w) {
				guard = w
				start, ok := p.starts[i]
				if !ok {
					start = in.quotaStart(w, p.usage)
					p.starts[i] = start
				}
				guardStart = start
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

// urgent reports whether w goes ahead for its deadline: its latest start
// is from Now to Now+DeadlineLead.
func (in *Input) urgent(w *Workload) bool {
	if in.Now.IsZero() || w.LatestStart.IsZero() || w.LatestStart.Before(in.Now) {
		return false
	}
	return w.LatestStart.Sub(in.Now) <= in.DeadlineLead
}

// deadline says in st where w stands against its deadline.
func (in *Input) deadline(w *Workload, st *Status) {
	if in.Now.IsZero() || w.LatestStart.IsZero() {
		return
	}
	at := w.LatestStart.UTC().Format("2006-01-02 15:04 MST")
	switch {
	case w.LatestStart.Before(in.Now):
		st.Late = true
		st.Message += fmt.Sprintf("; it cannot end by its deadline even if it started now (it had to start by %s)", at)
	case in.urgent(w):
		st.Urgent = true
		st.Message += fmt.Sprintf("; it must start by %s to end by its deadline, so it goes ahead of its team's work of its priority without a nearer one", at)
	default:
		st.Message += fmt.Sprintf("; to end by its deadline it must start by %s", at)
	}
}

// beyondGuarantee explains, for a workload that needs more GPUs than any
// of its accounts guarantees, that only the shared pool can give it the
// rest, and that reclaim does not: it starts when other teams' borrowed
// work ends. Empty otherwise.
func beyondGuarantee(cfg quota.Config, w *Workload) string {
	need := w.Need()
	if need.GPUs == 0 {
		return ""
	}
	most := int64(-1)
	for _, a := range w.Accounts {
		g, _, _, ok := cfg.AccountLimits(a)
		if ok && g.GPUs >= need.GPUs {
			return ""
		}
		if ok {
			most = max(most, g.GPUs)
		}
	}
	if most < 0 {
		return ""
	}
	return fmt.Sprintf("; it needs %d GPUs beyond team %s's guarantee of %d, which only the shared pool lends: it starts when other teams' borrowed work gives that much back, and reclaim does not take it back for it (reclaim returns guarantees only), so work that must start soon fits within the guarantee",
		need.GPUs-most, w.Team, most)
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

// shareTree orders teams by fair share level by level in a tree of
// quota groups (quota.Group): at the top the group (or team) with the
// lowest weighted dominant share among its siblings, then inside it.
type shareTree struct {
	cfg   quota.Config
	paths [][]string // per team, its groups from the top down
}

// newShareTree is nil for a configuration without groups.
func newShareTree(cfg quota.Config, names []string) *shareTree {
	if !cfg.Nested() {
		return nil
	}
	st := &shareTree{cfg: cfg, paths: make([][]string, len(names))}
	for t, name := range names {
		path := cfg.Path(name)
		slices.Reverse(path)
		st.paths[t] = path
	}
	return st
}

// nodeShare is one level of a team's key: a node of the tree (a group, or
// the team itself at the end) and its weighted share.
type nodeShare struct {
	share float64
	name  string
}

// keys is each team's key: its groups' weighted shares from the top down,
// then its own. A group's share is the dominant share of its subtree's
// use (with the teams' past use, Input.Past) over its weight.
func (st *shareTree) keys(p *pass) [][]nodeShare {
	use := map[string]Use{}
	past := map[string]float64{}
	for t, path := range st.paths {
		for _, g := range path {
			u := use[g]
			u.GPUs += p.use[t].GPUs
			u.MemoryMiB += p.use[t].MemoryMiB
			u.CPUMilli += p.use[t].CPUMilli
			use[g] = u
			past[g] += p.in.Past[p.names[t]]
		}
	}
	keys := make([][]nodeShare, len(st.paths))
	for t, path := range st.paths {
		k := make([]nodeShare, 0, len(path)+1)
		for _, g := range path {
			k = append(k, nodeShare{share: (DominantShare(use[g], p.in.Capacity) + past[g]) / st.cfg.Groups[g].EffectiveWeight(), name: g})
		}
		keys[t] = append(k, nodeShare{share: p.share(t), name: p.names[t]})
	}
	return keys
}

// lessKey compares two teams' keys level by level: at the first level
// where their nodes differ, the lower share (then name) goes first.
func lessKey(a, b []nodeShare) bool {
	for i := range min(len(a), len(b)) {
		if a[i].name == b[i].name {
			continue
		}
		if a[i].share != b[i].share {
			return a[i].share < b[i].share
		}
		return a[i].name < b[i].name
	}
	return len(a) < len(b)
}
