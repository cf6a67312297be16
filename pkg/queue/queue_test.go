package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/quota"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// pool is a Fitter over a number of free GPUs: a workload fits when all its
// GPUs are free; holds are kept.
type pool struct {
	free  int64
	holds []string
}

func (p *pool) Hold(w *Workload, _ quota.Account) (bool, string) {
	need := w.Need().GPUs
	if need > p.free {
		return false, fmt.Sprintf("%d GPUs free, needs %d", p.free, need)
	}
	p.free -= need
	p.holds = append(p.holds, w.Key)
	return true, ""
}

func wl(team, key string, gpus int64, prio int32, age time.Duration) Workload {
	return Workload{Key: key, Team: team, Accounts: []quota.Account{{Team: team}}, Priority: prio,
		Created: t0.Add(-age), Members: 1, Present: 1, PerMember: quota.Amount{GPUs: gpus},
		Shape: fmt.Sprintf("gpu=%d", gpus)}
}

func gang(team, key string, members, present int, gpus int64) Workload {
	w := wl(team, key, gpus, 0, time.Hour)
	w.Members, w.Present = members, present
	w.Shape = fmt.Sprintf("gang=%dx%d", members, gpus)
	return w
}

func keys(as []Admission) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Workload.Key
	}
	return out
}

func TestPlanOrderInsideATeam(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 8}}}
	tests := []struct {
		name    string
		queued  []Workload
		free    int64
		want    []string
		waiting map[string]WaitReason
	}{
		{
			name:   "priority then age then key",
			queued: []Workload{wl("a", "a/old-low", 1, 0, 3*time.Hour), wl("a", "a/new-high", 1, 10, time.Minute), wl("a", "a/mid-low", 1, 0, 2*time.Hour), wl("a", "a/mid-low-b", 1, 0, 2*time.Hour)},
			free:   3,
			want:   []string{"a/new-high", "a/old-low", "a/mid-low"},
		},
		{
			name:    "a head that does not fit does not block smaller work",
			queued:  []Workload{wl("a", "a/big", 4, 0, time.Hour), wl("a", "a/small", 1, 0, time.Minute)},
			free:    2,
			want:    []string{"a/small"},
			waiting: map[string]WaitReason{"a/big": WaitRoom},
		},
		{
			name:    "quota counts admitted work of this pass",
			queued:  []Workload{wl("a", "a/1", 4, 0, 3*time.Hour), wl("a", "a/2", 4, 0, 2*time.Hour), wl("a", "a/3", 4, 0, time.Hour)},
			free:    100,
			want:    []string{"a/1", "a/2"},
			waiting: map[string]WaitReason{"a/3": WaitQuota},
		},
		{
			name:    "an incomplete gang waits, whole gangs go in one piece",
			queued:  []Workload{gang("a", "a/g1", 4, 3, 1), gang("a", "a/g2", 2, 2, 2)},
			free:    8,
			want:    []string{"a/g2"},
			waiting: map[string]WaitReason{"a/g1": WaitMembers},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &pool{free: tc.free}
			res := Plan(Input{Config: cfg, Queued: tc.queued, Capacity: Capacity{GPUs: 100}}, p)
			if diff := cmp.Diff(tc.want, keys(res.Admitted)); diff != "" {
				t.Errorf("admitted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, p.holds); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
			for k, want := range tc.waiting {
				if got := res.Waiting[k].Reason; got != want {
					t.Errorf("waiting[%s] = %q (%s), want %q", k, got, res.Waiting[k].Message, want)
				}
			}
		})
	}
}

func TestPlanMessages(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 64, Borrow: quota.Limits{GPUs: 16}}}, SharedPool: quota.Limits{GPUs: 4}}
	in := Input{Config: cfg, Capacity: Capacity{GPUs: 128},
		Admitted: map[quota.Account]quota.Usage{{Team: "vision"}: {Running: quota.Amount{GPUs: 60}}},
		Queued:   []Workload{wl("vision", "ml/a", 16, 0, 3*time.Hour), wl("vision", "ml/b", 8, 0, 2*time.Hour), wl("vision", "ml/c", 8, 0, time.Hour)},
	}
	res := Plan(in, &pool{free: 0})
	if len(res.Admitted) != 0 {
		t.Fatalf("admitted %v, want nothing", keys(res.Admitted))
	}
	c := res.Waiting["ml/c"]
	if c.Position != 3 || c.Of != 3 || c.Ahead != 2 || c.AheadNeed.GPUs != 24 {
		t.Errorf("ml/c status = %+v, want position 3 of 3 with 2 ahead needing 24 GPUs", c)
	}
	a := res.Waiting["ml/a"]
	if a.Reason != WaitQuota || !strings.Contains(a.Message, "team vision: quota 64 GPUs, 60 in use") {
		t.Errorf("ml/a = %+v, want a quota wait with the numbers", a)
	}
	if b := res.Waiting["ml/b"]; b.Reason != WaitRoom || !strings.Contains(b.Message, "0 GPUs free, needs 8") {
		t.Errorf("ml/b = %+v, want a room wait with the fitter's reason", b)
	}
	if strings.Contains(a.Message, "beyond team") {
		t.Errorf("ml/a asks for 16 GPUs, within vision's guarantee of 64, yet: %s", a.Message)
	}
	// A gang larger than the team's guarantee is told that only the pool
	// can give it the rest.
	in.Queued = []Workload{gang("vision", "ml/big", 10, 10, 8)}
	big := Plan(in, &pool{free: 0}).Waiting["ml/big"]
	if big.Reason != WaitQuota || !strings.Contains(big.Message, "it needs 16 GPUs beyond team vision's guarantee of 64, which only the shared pool lends") {
		t.Errorf("ml/big = %+v, want the pool explained", big)
	}
}

func TestPlanFairShare(t *testing.T) {
	// Two teams of equal weight with no guarantee contend for a shared pool
	// of 40 GPUs; each queues far more than the pool.
	for _, tc := range []struct {
		name         string
		wa, wb       float64
		wantA, wantB int64
	}{
		{"equal weights", 1, 1, 20, 20},
		{"weight 3 to 1", 3, 1, 30, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := quota.Config{Teams: map[string]quota.Team{
				"a": {Borrow: quota.Limits{GPUs: 40}, Weight: tc.wa}, "b": {Borrow: quota.Limits{GPUs: 40}, Weight: tc.wb}},
				SharedPool: quota.Limits{GPUs: 40}}
			var q []Workload
			for i := range 50 {
				q = append(q, wl("a", fmt.Sprintf("a/%02d", i), 1, 0, time.Duration(100-i)*time.Minute))
				q = append(q, wl("b", fmt.Sprintf("b/%02d", i), 1, 0, time.Duration(200-i)*time.Minute))
			}
			res := Plan(Input{Config: cfg, Queued: q, Capacity: Capacity{GPUs: 40}}, &pool{free: 40})
			got := map[string]int64{}
			for _, a := range res.Admitted {
				got[a.Workload.Team] += a.Workload.Need().GPUs
			}
			if got["a"] != tc.wantA || got["b"] != tc.wantB {
				t.Errorf("GPUs admitted = %v, want a=%d b=%d", got, tc.wantA, tc.wantB)
			}
		})
	}
}

func TestPlanPerModelAccounts(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"nlp": {Models: map[string]quota.ModelQuota{"H100": {GPUs: 2}, "T4": {GPUs: 8}}}}}
	w := wl("nlp", "nlp/p", 4, 0, time.Hour)
	w.Accounts = cfg.Accounts("nlp", []string{"H100", "T4"})
	var tried []quota.Account
	res := Plan(Input{Config: cfg, Queued: []Workload{w}, Capacity: Capacity{GPUs: 100}},
		FitterFunc(func(_ *Workload, a quota.Account) (bool, string) { tried = append(tried, a); return true, "" }))
	// H100 quota (2) cannot hold 4 GPUs; T4 can.
	if len(res.Admitted) != 1 || res.Admitted[0].Account != (quota.Account{Team: "nlp", Model: "T4"}) {
		t.Fatalf("admitted %+v, want nlp/p on the T4 account", res.Admitted)
	}
	if diff := cmp.Diff([]quota.Account{{Team: "nlp", Model: "T4"}}, tried); diff != "" {
		t.Errorf("accounts tried (-want +got):\n%s", diff)
	}
	w.Accounts = nil
	res = Plan(Input{Config: cfg, Queued: []Workload{w}}, &pool{free: 10})
	if res.Waiting["nlp/p"].Reason != WaitNoAccount {
		t.Errorf("a pod accepting none of the team's models = %+v, want %q", res.Waiting["nlp/p"], WaitNoAccount)
	}
}

func TestPlanTriesAFailedShapeOncePerPass(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 1000}}}
	var q []Workload
	for i := range 1000 {
		q = append(q, wl("a", fmt.Sprintf("a/%04d", i), 8, 0, time.Duration(i)*time.Second))
	}
	calls := 0
	Plan(Input{Config: cfg, Queued: q}, FitterFunc(func(*Workload, quota.Account) (bool, string) { calls++; return false, "full" }))
	if calls != 1 {
		t.Errorf("Hold called %d times for 1000 pods of one shape that does not fit, want 1", calls)
	}
}

// TestPlanProperties runs random queues through Plan and checks the
// invariants: quota (guarantee + borrow, pool) is never exceeded, a gang is
// admitted whole and only when complete, inside a team no workload is
// admitted while an older or higher-priority one of the same shape that
// quota allowed stays queued, and Plan is deterministic.
func TestPlanProperties(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 7))
		cfg := quota.Config{Teams: map[string]quota.Team{}, SharedPool: quota.Limits{GPUs: int64(r.IntN(20))}}
		teams := []string{"a", "b", "c"}[:1+r.IntN(3)]
		admitted := map[quota.Account]quota.Usage{}
		for _, tm := range teams {
			g := int64(r.IntN(16))
			cfg.Teams[tm] = quota.Team{GPUs: g, Borrow: quota.Limits{GPUs: int64(r.IntN(10))}, Weight: float64(1 + r.IntN(3))}
			admitted[quota.Account{Team: tm}] = quota.Usage{Running: quota.Amount{GPUs: int64(r.IntN(int(g) + 1))}}
		}
		var q []Workload
		for i := range 5 + r.IntN(40) {
			tm := teams[r.IntN(len(teams))]
			w := wl(tm, fmt.Sprintf("%s/w%02d", tm, i), int64(1+r.IntN(4)), int32(r.IntN(3)), time.Duration(r.IntN(100))*time.Minute)
			if r.IntN(4) == 0 {
				w.Members = 1 + r.IntN(4)
				w.Present = w.Members - r.IntN(2)
				w.Shape = fmt.Sprintf("gang=%dx%d", w.Members, w.PerMember.GPUs)
			}
			q = append(q, w)
		}
		free := int64(r.IntN(40))
		in := Input{Config: cfg, Queued: q, Admitted: admitted, Capacity: Capacity{GPUs: 64}}
		res := Plan(in, &pool{free: free})
		res2 := Plan(in, &pool{free: free})
		if diff := cmp.Diff(keys(res.Admitted), keys(res2.Admitted)); diff != "" {
			t.Fatalf("seed %d: Plan is not deterministic:\n%s", seed, diff)
		}
		usage := map[quota.Account]quota.Usage{}
		for a, u := range admitted {
			usage[a] = u
		}
		var used int64
		for _, a := range res.Admitted {
			w := a.Workload
			if !w.Complete() {
				t.Fatalf("seed %d: admitted incomplete gang %s (%d of %d)", seed, w.Key, w.Present, w.Members)
			}
			if d := cfg.CheckAccount(a.Account, usage, w.Need()); !d.Allowed {
				t.Fatalf("seed %d: %s admitted past quota: %+v", seed, w.Key, d.Shortfalls)
			}
			u := usage[a.Account]
			u.Pending = u.Pending.Add(w.Need())
			usage[a.Account] = u
			used += w.Need().GPUs
		}
		if used > free {
			t.Fatalf("seed %d: admitted %d GPUs with %d free", seed, used, free)
		}
		for a, u := range usage {
			if r := cfg.ReachableAccount(a); u.Total().GPUs > max(r.GPUs, admitted[a].Total().GPUs) {
				t.Fatalf("seed %d: account %s at %d GPUs, reachable %d", seed, a, u.Total().GPUs, r.GPUs)
			}
		}
		if pu := cfg.AccountPoolUsed("", usage); pu.GPUs > max(cfg.SharedPool.GPUs, cfg.AccountPoolUsed("", admitted).GPUs) {
			t.Fatalf("seed %d: shared pool used %d of %d", seed, pu.GPUs, cfg.SharedPool.GPUs)
		}
		// Order: an admitted workload has no queued predecessor of its team
		// with the same shape that was complete and stopped only by room
		// (room is taken in order, so the predecessor would have fitted).
		for _, a := range res.Admitted {
			for _, v := range q {
				if v.Team != a.Workload.Team || v.Shape != a.Workload.Shape || Less(&v, a.Workload) >= 0 {
					continue
				}
				if st, waiting := res.Waiting[v.Key]; waiting && st.Reason == WaitRoom {
					t.Fatalf("seed %d: %s admitted while %s, ahead of it with the same shape, waits for room", seed, a.Workload.Key, v.Key)
				}
			}
		}
		if got := len(res.Admitted) + len(res.Waiting); got != len(q) {
			t.Fatalf("seed %d: %d admitted + %d waiting, want %d workloads (none lost)", seed, len(res.Admitted), len(res.Waiting), len(q))
		}
	}
}

func TestReclaim(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"a": {GPUs: 8, Borrow: quota.Limits{GPUs: 8}},
		"b": {GPUs: 8, Borrow: quota.Limits{GPUs: 8}},
		"c": {GPUs: 4, Borrow: quota.Limits{GPUs: 8}},
	}, SharedPool: quota.Limits{GPUs: 16}}
	admitted := map[quota.Account]quota.Usage{
		{Team: "a"}: {Running: quota.Amount{GPUs: 2}},
		{Team: "b"}: {Running: quota.Amount{GPUs: 14}}, // 6 borrowed
		{Team: "c"}: {Running: quota.Amount{GPUs: 6}},  // 2 borrowed
	}
	v := func(key, team string, gpus int64, ageMin int, preemptible bool) Victim {
		return Victim{Key: key, Team: team, Account: quota.Account{Team: team}, Amount: quota.Amount{GPUs: gpus},
			Preemptible: preemptible, AdmittedAt: t0.Add(-time.Duration(ageMin) * time.Minute)}
	}
	victims := []Victim{
		v("b/old", "b", 4, 60, true), v("b/new", "b", 2, 5, true), v("b/mid", "b", 2, 30, true),
		v("b/keep", "b", 2, 1, false), v("c/x", "c", 2, 2, true), v("a/own", "a", 1, 1, true),
	}
	w := wl("a", "a/want", 4, 0, time.Minute)
	got := Reclaim(cfg, admitted, &w, quota.Account{Team: "a"}, victims)
	// Newest first among preemptible work of teams above guarantee: c/x
	// (2 min), b/new (5), then b/mid would leave... b at 14-2-2=10 >= 8 ok.
	var gotKeys []string
	for _, g := range got {
		gotKeys = append(gotKeys, g.Key)
	}
	if diff := cmp.Diff([]string{"c/x", "b/new"}, gotKeys); diff != "" {
		t.Errorf("victims (-want +got):\n%s", diff)
	}
	// A team that would go above its guarantee reclaims nothing.
	big := wl("a", "a/big", 7, 0, time.Minute)
	if got := Reclaim(cfg, admitted, &big, quota.Account{Team: "a"}, victims); got != nil {
		t.Errorf("reclaim for a request beyond the guarantee = %v, want none", got)
	}
	// Never below the victim's guarantee: b can give at most 6, c at most 2.
	w8 := wl("a", "a/w6", 6, 0, time.Minute)
	got = Reclaim(cfg, admitted, &w8, quota.Account{Team: "a"}, victims)
	freed := map[string]int64{}
	for _, g := range got {
		freed[g.Team] += g.Amount.GPUs
	}
	if freed["b"] > 6 || freed["c"] > 2 || freed["b"]+freed["c"] < 6 {
		t.Errorf("freed %v for 6 GPUs, want at least 6 with b <= 6 and c <= 2", freed)
	}
}

// TestReclaimNeverLoops lets random teams reclaim from each other in turn
// and checks that no eviction is ever undone by a reclaim the other way.
func TestReclaimNeverLoops(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 11))
		cfg := quota.Config{Teams: map[string]quota.Team{}, SharedPool: quota.Limits{GPUs: 32}}
		teams := []string{"a", "b", "c"}
		usage := map[quota.Account]quota.Usage{}
		var running []Victim
		for i, tm := range teams {
			cfg.Teams[tm] = quota.Team{GPUs: int64(4 + r.IntN(8)), Borrow: quota.Limits{GPUs: 16}}
			for j := range r.IntN(8) {
				g := int64(1 + r.IntN(3))
				running = append(running, Victim{Key: fmt.Sprintf("%s/%d", tm, j), Team: tm, Account: quota.Account{Team: tm},
					Amount: quota.Amount{GPUs: g}, Preemptible: true, AdmittedAt: t0.Add(time.Duration(i*10+j) * time.Minute)})
				u := usage[quota.Account{Team: tm}]
				u.Running.GPUs += g
				usage[quota.Account{Team: tm}] = u
			}
		}
		evictedFrom := map[string]map[string]bool{} // reclaimer -> victim teams
		for step := range 30 {
			tm := teams[r.IntN(len(teams))]
			w := wl(tm, fmt.Sprintf("%s/new%d", tm, step), int64(1+r.IntN(4)), 0, 0)
			chosen := Reclaim(cfg, usage, &w, quota.Account{Team: tm}, running)
			for _, c := range chosen {
				if evictedFrom[c.Team][tm] {
					t.Fatalf("seed %d: %s reclaimed from %s after %s reclaimed from %s", seed, tm, c.Team, c.Team, tm)
				}
				if evictedFrom[tm] == nil {
					evictedFrom[tm] = map[string]bool{}
				}
				evictedFrom[tm][c.Team] = true
				running = slices.DeleteFunc(running, func(v Victim) bool { return v.Key == c.Key })
				u := usage[c.Account]
				u.Running = u.Running.Sub(c.Amount)
				usage[c.Account] = u
				if g := cfg.Teams[c.Team].GPUs; u.Running.GPUs < g {
					t.Fatalf("seed %d: %s left at %d GPUs, below its guarantee %d", seed, c.Team, u.Running.GPUs, g)
				}
			}
			if chosen != nil {
				u := usage[quota.Account{Team: tm}]
				u.Running = u.Running.Add(w.Need())
				usage[quota.Account{Team: tm}] = u
				running = append(running, Victim{Key: w.Key, Team: tm, Account: quota.Account{Team: tm}, Amount: w.Need(),
					Preemptible: true, AdmittedAt: t0.Add(time.Duration(100+step) * time.Minute)})
				if g := cfg.Teams[tm].GPUs; u.Running.GPUs > g {
					t.Fatalf("seed %d: %s reclaimed to %d GPUs, above its guarantee %d", seed, tm, u.Running.GPUs, g)
				}
			}
		}
	}
}
