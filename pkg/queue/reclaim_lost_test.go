package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

// Between two victims that free the same, the one that loses less work
// (a recent checkpoint) goes, whatever their ages; one inside its minimum
// runtime never goes.
func TestReclaimTakesLeastLostWork(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"a": {GPUs: 8, Borrow: quota.Limits{GPUs: 8}},
		"b": {GPUs: 2, Borrow: quota.Limits{GPUs: 8}},
	}, SharedPool: quota.Limits{GPUs: 8}}
	admitted := map[quota.Account]quota.Usage{{Team: "b"}: {Running: quota.Amount{GPUs: 8}}}
	v := func(key string, ageMin int, lost float64, young bool) Victim {
		return Victim{Key: key, Team: "b", Account: quota.Account{Team: "b"}, Amount: quota.Amount{GPUs: 2}, Preemptible: true,
			AdmittedAt: t0.Add(-time.Duration(ageMin) * time.Minute), LostWork: lost, Young: young}
	}
	w := wl("a", "a/want", 2, 0, time.Minute)
	for _, c := range []struct {
		name    string
		victims []Victim
		want    string
	}{
		{"newest first when they lose alike", []Victim{v("b/old", 60, 0, false), v("b/new", 5, 0, false)}, "b/new"},
		{"the recent checkpoint goes first", []Victim{v("b/old-ckpt", 60, 10, false), v("b/new-none", 5, 600, false)}, "b/old-ckpt"},
		{"never inside its minimum runtime", []Victim{v("b/young", 1, 0, true), v("b/costly", 60, 9999, false)}, "b/costly"},
	} {
		got := Reclaim(cfg, admitted, &w, quota.Account{Team: "a"}, c.victims)
		if len(got) != 1 || got[0].Key != c.want {
			t.Errorf("%s: %v, want [%s]", c.name, got, c.want)
		}
	}
	if got := Reclaim(cfg, admitted, &w, quota.Account{Team: "a"}, []Victim{v("b/young", 1, 0, true)}); got != nil {
		t.Errorf("only young victims: %v, want none", got)
	}
}

// Against brute force on small clusters: the chosen set is legal (each
// victim eligible, no account below its guarantee, the need freed),
// holds no victim it could do without, and loses no more work than any
// other such set; none is chosen exactly when none exists.
func TestReclaimLosesNoMoreThanAnyLegalSet(t *testing.T) {
	for seed := range uint64(3000) {
		r := rand.New(rand.NewPCG(seed, 41))
		cfg := quota.Config{Teams: map[string]quota.Team{}, SharedPool: quota.Limits{GPUs: 64}}
		admitted := map[quota.Account]quota.Usage{}
		for _, tm := range []string{"a", "b", "c"} {
			cfg.Teams[tm] = quota.Team{GPUs: int64(2 + r.IntN(6)), Borrow: quota.Limits{GPUs: 32}}
		}
		var victims []Victim
		for i := range 1 + r.IntN(9) {
			tm := []string{"b", "c"}[r.IntN(2)]
			amt := quota.Amount{GPUs: int64(1 + r.IntN(4))}
			victims = append(victims, Victim{Key: fmt.Sprintf("%s/%d", tm, i), Team: tm, Account: quota.Account{Team: tm},
				Amount: amt, Preemptible: r.IntN(6) > 0, Young: r.IntN(8) == 0,
				AdmittedAt: t0.Add(-time.Duration(r.IntN(100)) * time.Minute), LostWork: float64(r.IntN(5) * 100)})
			u := admitted[quota.Account{Team: tm}]
			u.Running = u.Running.Add(amt)
			admitted[quota.Account{Team: tm}] = u
		}
		w := wl("a", "a/w", int64(1+r.IntN(6)), 0, time.Minute)
		got := Reclaim(cfg, admitted, &w, quota.Account{Team: "a"}, victims)

		legal := func(set []Victim) bool {
			left := map[quota.Account]quota.Amount{}
			var freed quota.Amount
			for _, v := range set {
				if !v.Preemptible || v.Young || v.Protected {
					return false
				}
				cur, ok := left[v.Account]
				if !ok {
					cur = admitted[v.Account].Total()
				}
				left[v.Account] = cur.Sub(v.Amount)
				if left[v.Account].GPUs < cfg.Teams[v.Team].GPUs {
					return false
				}
				freed = freed.Add(v.Amount)
			}
			return covers(freed, w.Need()) && minimal(set, w.Need())
		}
		best := math.Inf(1)
		for mask := 1; mask < 1<<len(victims); mask++ {
			var set []Victim
			lost := 0.0
			for i, v := range victims {
				if mask&(1<<i) != 0 {
					set = append(set, v)
					lost += v.LostWork
				}
			}
			if legal(set) {
				best = min(best, lost)
			}
		}
		if admitted[quota.Account{Team: "a"}].Total().Add(w.Need()).GPUs > cfg.Teams["a"].GPUs {
			best = math.Inf(1) // a team beyond its guarantee reclaims nothing
		}
		if math.IsInf(best, 1) {
			if got != nil {
				t.Fatalf("seed %d: chose %v where no legal set exists", seed, got)
			}
			continue
		}
		if got == nil {
			t.Fatalf("seed %d: chose nothing; a legal set loses %v", seed, best)
		}
		if !legal(got) {
			t.Fatalf("seed %d: chose an illegal or non-minimal set %v", seed, got)
		}
		lost := 0.0
		for _, v := range got {
			lost += v.LostWork
		}
		if lost > best {
			t.Fatalf("seed %d: chose %v losing %v, a legal set loses %v", seed, got, lost, best)
		}
	}
}

// Beyond the exact search's limit the greedy order still gives a legal set
// with nothing to spare.
func TestReclaimGreedyBeyondTheExactLimit(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"a": {GPUs: 40, Borrow: quota.Limits{GPUs: 8}},
		"b": {GPUs: 2, Borrow: quota.Limits{GPUs: 64}},
	}, SharedPool: quota.Limits{GPUs: 64}}
	var victims []Victim
	for i := range exactLimit + 10 {
		victims = append(victims, Victim{Key: fmt.Sprintf("b/%02d", i), Team: "b", Account: quota.Account{Team: "b"},
			Amount: quota.Amount{GPUs: int64(1 + i%3)}, Preemptible: true, LostWork: float64((i * 37) % 11),
			AdmittedAt: t0.Add(-time.Duration(i) * time.Minute)})
	}
	admitted := map[quota.Account]quota.Usage{{Team: "b"}: {Running: quota.Amount{GPUs: 52}}}
	w := wl("a", "a/w", 9, 0, time.Minute)
	got := Reclaim(cfg, admitted, &w, quota.Account{Team: "a"}, victims)
	var freed quota.Amount
	for _, v := range got {
		freed = freed.Add(v.Amount)
	}
	if !covers(freed, w.Need()) || !minimal(got, w.Need()) {
		t.Fatalf("greedy chose %v freeing %v for %v", got, freed, w.Need())
	}
}

// Young work becomes reclaimable when its minimum runtime ends: the
// earliest time at which enough of it has matured, never earlier.
func TestReclaimableAt(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"a": {GPUs: 8, Borrow: quota.Limits{GPUs: 8}},
		"b": {GPUs: 2, Borrow: quota.Limits{GPUs: 8}},
	}, SharedPool: quota.Limits{GPUs: 8}}
	admitted := map[quota.Account]quota.Usage{{Team: "b"}: {Running: quota.Amount{GPUs: 8}}}
	young := func(key string, until time.Duration) Victim {
		return Victim{Key: key, Team: "b", Account: quota.Account{Team: "b"}, Amount: quota.Amount{GPUs: 2}, Preemptible: true,
			AdmittedAt: t0, Young: true, YoungUntil: t0.Add(until)}
	}
	a := quota.Account{Team: "a"}
	four := wl("a", "a/four", 4, 0, time.Minute)
	two := wl("a", "a/two", 2, 0, time.Minute)
	vs := []Victim{young("b/1", 30*time.Minute), young("b/2", 10*time.Minute), young("b/3", 50*time.Minute)}
	if Reclaim(cfg, admitted, &four, a, vs) != nil {
		t.Fatal("young victims were taken now")
	}
	// Two GPUs: b/2 at +10m. Four: b/2 and b/1, at +30m.
	if got := ReclaimableAt(cfg, admitted, &two, a, vs, 16); !got.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("2 GPUs reclaimable at %v, want +10m", got.Sub(t0))
	}
	if got := ReclaimableAt(cfg, admitted, &four, a, vs, 16); !got.Equal(t0.Add(30 * time.Minute)) {
		t.Errorf("4 GPUs reclaimable at %v, want +30m", got.Sub(t0))
	}
	// Bounded: one time tried is not enough for four GPUs.
	if got := ReclaimableAt(cfg, admitted, &four, a, vs, 1); !got.IsZero() {
		t.Errorf("with one time tried: %v, want zero", got.Sub(t0))
	}
	// Never: more than b can give without dropping below its guarantee.
	eight := wl("a", "a/eight", 8, 0, time.Minute)
	if got := ReclaimableAt(cfg, admitted, &eight, a, vs, 16); !got.IsZero() {
		t.Errorf("8 GPUs: %v, want zero (b keeps its guarantee)", got.Sub(t0))
	}
	// Unknown ends do not help.
	unknown := young("b/x", 0)
	unknown.YoungUntil = time.Time{}
	if got := ReclaimableAt(cfg, admitted, &two, a, []Victim{unknown}, 16); !got.IsZero() {
		t.Errorf("unknown maturity: %v, want zero", got)
	}
}

// A team that borrows whole GPUs is reclaimed from even while it uses less
// GPU memory (for shares) than it is guaranteed: evicting whole GPUs takes
// none of its memory. It is not taken below its GPU guarantee, and a share
// victim that would take it below its memory guarantee is spared.
func TestReclaimUnusedMemoryGuarantee(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"a": {GPUs: 4, GPUMemoryGiB: 64},
		"b": {GPUs: 4, GPUMemoryGiB: 64, Borrow: quota.Limits{GPUs: 4, GPUMemoryGiB: 64}},
	}, SharedPool: quota.Limits{GPUs: 4, GPUMemoryGiB: 64}}
	b := quota.Account{Team: "b"}
	admitted := map[quota.Account]quota.Usage{b: {Running: quota.Amount{GPUs: 8, MemoryMiB: 10 << 10}}}
	whole := func(key string) Victim {
		return Victim{Key: key, Team: "b", Account: b, Amount: quota.Amount{GPUs: 4}, Preemptible: true, AdmittedAt: t0}
	}
	w := wl("a", "a/want", 2, 0, time.Minute)
	got := Reclaim(cfg, admitted, &w, quota.Account{Team: "a"}, []Victim{whole("b/0"), whole("b/1")})
	if len(got) != 1 {
		t.Fatalf("reclaimed %v, want one of b's borrowed 4-GPU pods (b uses 10 of its 64 GiB, untouched)", got)
	}
	if sp := Spared(cfg, admitted, "a", []Victim{whole("b/0")}); len(sp) != 0 {
		t.Errorf("preemption spared %v for memory the eviction does not take", sp)
	}
	if sp := Spared(cfg, admitted, "a", []Victim{whole("b/0"), whole("b/1")}); len(sp) != 1 {
		t.Errorf("evicting all 8 GPUs: spared %v, want b (below its 4-GPU guarantee)", sp)
	}
	share := Victim{Key: "b/share", Team: "b", Account: b, Amount: quota.Amount{MemoryMiB: 4 << 10}, Preemptible: true}
	if sp := Spared(cfg, admitted, "a", []Victim{share}); len(sp) != 1 {
		t.Errorf("evicting a share below b's memory guarantee: spared %v, want b", sp)
	}
}
