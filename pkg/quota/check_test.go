package quota

import (
	"github.com/rota-sched/rota/pkg/contract"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	c := Config{
		Teams: map[string]Team{
			"vision": {GPUs: 64, GPUMemoryGiB: 64, Borrow: Limits{GPUs: 16, GPUMemoryGiB: 32}},
			"nlp":    {GPUs: 8},
		},
		SharedPool: Limits{GPUs: 32, GPUMemoryGiB: 16},
	}
	gib := func(n int64) Amount { return Amount{MemoryMiB: 1024 * contractMiB(n)} }
	tests := []struct {
		name         string
		giveTeam     string
		giveUsage    map[string]Usage
		giveNeed     Amount
		wantAllowed  bool
		wantBorrowed Amount
		wantMessage  string // the first shortfall's message for "this pod"
	}{
		{name: "fits in guarantee", giveTeam: "vision", giveNeed: Amount{GPUs: 8}, wantAllowed: true},
		{name: "fills the guarantee exactly", giveTeam: "vision",
			giveUsage: map[string]Usage{"vision": {Running: Amount{GPUs: 56}}}, giveNeed: Amount{GPUs: 8}, wantAllowed: true},
		{name: "borrows from the pool", giveTeam: "vision",
			giveUsage: map[string]Usage{"vision": {Running: Amount{GPUs: 60}}}, giveNeed: Amount{GPUs: 8},
			wantAllowed: true, wantBorrowed: Amount{GPUs: 4}},
		{name: "borrow limit reached", giveTeam: "vision",
			giveUsage: map[string]Usage{"vision": {Running: Amount{GPUs: 52}, Pending: Amount{GPUs: 26}}}, giveNeed: Amount{GPUs: 8},
			wantMessage: "team vision: quota 64 GPUs, 78 in use or queued (52 running, 26 pending); this pod needs 8; borrowable from shared pool: 2 (team borrow limit 16, shared pool free 18)"},
		{name: "pool used up by another team", giveTeam: "vision",
			giveUsage:   map[string]Usage{"vision": {Running: Amount{GPUs: 52}, Pending: Amount{GPUs: 8}}, "nlp": {Running: Amount{GPUs: 40}}},
			giveNeed:    Amount{GPUs: 8},
			wantMessage: "team vision: quota 64 GPUs, 60 in use or queued (52 running, 8 pending); this pod needs 8; borrowable from shared pool: 0 (team borrow limit 16, shared pool free 0)"},
		{name: "team may not borrow", giveTeam: "nlp",
			giveUsage: map[string]Usage{"nlp": {Running: Amount{GPUs: 8}}}, giveNeed: Amount{GPUs: 1},
			wantMessage: "team nlp: quota 8 GPUs, 8 in use or queued (8 running, 0 pending); this pod needs 1; borrowable from shared pool: 0 (the team may not borrow)"},
		{name: "memory in GiB", giveTeam: "vision",
			giveUsage: map[string]Usage{"vision": {Running: gib(70), Pending: gib(2)}}, giveNeed: gib(20),
			wantMessage: "team vision: quota 64 GiB of GPU memory, 72 GiB in use or queued (70 GiB running, 2 GiB pending); this pod needs 20 GiB; borrowable from shared pool: 8 GiB (team borrow limit 32 GiB, shared pool free 8 GiB)"},
		{name: "memory borrowed", giveTeam: "vision", giveUsage: map[string]Usage{"vision": {Running: gib(60)}}, giveNeed: gib(10),
			wantAllowed: true, wantBorrowed: gib(6)},
		{name: "no memory quota", giveTeam: "nlp", giveNeed: Amount{MemoryMiB: 512},
			wantMessage: "team nlp: quota 0 GiB of GPU memory, 0 GiB in use or queued (0 GiB running, 0 GiB pending); this pod needs 512 MiB"},
		{name: "over quota after a config change", giveTeam: "nlp",
			giveUsage: map[string]Usage{"nlp": {Running: Amount{GPUs: 20}}}, giveNeed: Amount{GPUs: 1},
			wantMessage: "team nlp: quota 8 GPUs, 20 in use or queued"},
		{name: "zero need always fits", giveTeam: "nlp", giveUsage: map[string]Usage{"nlp": {Running: Amount{GPUs: 20}}}, wantAllowed: true},
		{name: "unknown team", giveTeam: "nobody", giveNeed: Amount{GPUs: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := c.Check(tc.giveTeam, tc.giveUsage, tc.giveNeed)
			if d.Allowed != tc.wantAllowed {
				t.Fatalf("Check() allowed = %v, want %v (%+v)", d.Allowed, tc.wantAllowed, d)
			}
			if d.Borrowed != tc.wantBorrowed {
				t.Errorf("Check() borrowed = %v, want %v", d.Borrowed, tc.wantBorrowed)
			}
			if tc.wantMessage == "" {
				if len(d.Shortfalls) > 0 && tc.wantAllowed {
					t.Errorf("allowed with shortfalls %+v", d.Shortfalls)
				}
				return
			}
			if len(d.Shortfalls) == 0 {
				t.Fatalf("Check() gave no shortfall")
			}
			if got := d.Shortfalls[0].Message("this pod"); !strings.HasPrefix(got, tc.wantMessage) {
				t.Errorf("message = %q\nwant prefix %q", got, tc.wantMessage)
			}
		})
	}
}

// TestCheckInvariant admits random requests of random teams one at a time and
// checks DESIGN invariant 3 after each: every team stays within guarantee +
// borrow limit, and the teams together use no more of the pool than it holds.
func TestCheckInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		c := Config{Teams: map[string]Team{}, SharedPool: Limits{GPUs: r.Int64N(20), GPUMemoryGiB: r.Int64N(20)}}
		teams := []string{"a", "b", "c", "d"}
		for _, name := range teams {
			c.Teams[name] = Team{GPUs: r.Int64N(20), GPUMemoryGiB: r.Int64N(20),
				Borrow: Limits{GPUs: r.Int64N(15), GPUMemoryGiB: r.Int64N(15)}}
		}
		usage := map[string]Usage{}
		for range 300 {
			team := teams[r.IntN(len(teams))]
			need := Amount{GPUs: r.Int64N(4)}
			if r.IntN(2) == 0 {
				need = Amount{MemoryMiB: contractMiB(r.Int64N(4096))}
			}
			if r.IntN(10) == 0 { // a pod goes away
				u := usage[team]
				u.Running = Amount{GPUs: max(0, u.Running.GPUs-1), MemoryMiB: max(0, u.Running.MemoryMiB-1024)}
				usage[team] = u
				continue
			}
			if !c.Check(team, usage, need).Allowed {
				continue
			}
			u := usage[team]
			u.Pending = u.Pending.Add(need)
			usage[team] = u
			for name, u := range usage {
				if !u.Total().Fits(c.Reachable(name)) {
					t.Fatalf("round %d: team %s uses %v, more than it can reach %v", round, name, u.Total(), c.Reachable(name))
				}
				team := c.Teams[name]
				over := u.Total().Sub(team.Guarantee())
				if over.GPUs > team.Borrow.GPUs || over.MemoryMiB > team.Borrow.Amount().MemoryMiB {
					t.Fatalf("round %d: team %s borrows %v, above its limit %v", round, name, over, team.Borrow)
				}
			}
			if used := c.PoolUsed(usage); !used.Fits(c.SharedPool.Amount()) {
				t.Fatalf("round %d: pool use %v exceeds the pool %v", round, used, c.SharedPool.Amount())
			}
		}
	}
}

func TestAmountString(t *testing.T) {
	tests := []struct {
		give Amount
		want string
	}{
		{Amount{GPUs: 1}, "1 GPU"},
		{Amount{GPUs: 8}, "8 GPUs"},
		{Amount{MemoryMiB: 20 * 1024}, "20 GiB of GPU memory"},
		{Amount{GPUs: 2, MemoryMiB: 1536}, "2 GPUs and 1536 MiB of GPU memory"},
	}
	for _, tc := range tests {
		if got := tc.give.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.give, got, tc.want)
		}
	}
}

func contractMiB(n int64) contract.MiB { return contract.MiB(n) }
