package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/quota"
)

func TestHistoryObserve(t *testing.T) {
	hl := time.Hour
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	h := History{HalfLife: hl}.Observe(map[string]float64{"a": 1}, t0) // first: sets the time only
	if len(h.Share) != 0 || !h.At.Equal(t0) {
		t.Fatalf("first observation: %+v", h)
	}
	h = h.Observe(map[string]float64{"a": 1}, t0.Add(hl))
	if !near(h.Share["a"], 0.5) {
		t.Errorf("a held everything for one half-life from none: %v, want 0.5", h.Share["a"])
	}
	h = h.Observe(map[string]float64{"a": 1}, t0.Add(2*hl))
	if !near(h.Share["a"], 0.75) {
		t.Errorf("two half-lives: %v, want 0.75", h.Share["a"])
	}
	h = h.Observe(map[string]float64{"b": 0.5}, t0.Add(3*hl))
	if !near(h.Share["a"], 0.375) || !near(h.Share["b"], 0.25) {
		t.Errorf("a idle, b at half for one half-life: %v", h.Share)
	}
	back := h.Observe(map[string]float64{"a": 1}, t0.Add(hl))
	if !back.At.Equal(h.At) || !near(back.Share["a"], h.Share["a"]) {
		t.Errorf("a clock that went back changed the history: %+v", back)
	}
	for range 40 { // a team idle long enough is forgotten
		h = h.Observe(nil, h.At.Add(hl))
	}
	if len(h.Share) != 0 {
		t.Errorf("idle for 40 half-lives, still remembered: %v", h.Share)
	}
	if off := (History{}).Observe(map[string]float64{"a": 1}, t0.Add(hl)); len(off.Share) != 0 {
		t.Errorf("half-life 0 remembers: %v", off.Share)
	}
	if odd := (History{HalfLife: hl, At: t0}).Observe(map[string]float64{"a": math.NaN(), "b": 7}, t0.Add(hl)); odd.Share["a"] != 0 || odd.Share["b"] != 0.5 {
		t.Errorf("shares outside 0 to 1 are clamped: %v", odd.Share)
	}
}

// A team that held the cluster all night yields in the morning: with its
// past use counted, the other team of equal weight gets most of what
// frees; with none, they split it.
func TestPlanPastUseYields(t *testing.T) {
	cfg := quota.Config{Teams: map[string]quota.Team{
		"night": {Borrow: quota.Limits{GPUs: 10}}, "day": {Borrow: quota.Limits{GPUs: 10}}}, SharedPool: quota.Limits{GPUs: 10}}
	var q []Workload
	for i := range 10 {
		q = append(q, wl("night", fmt.Sprintf("night/%02d", i), 1, 0, time.Duration(100-i)*time.Minute))
		q = append(q, wl("day", fmt.Sprintf("day/%02d", i), 1, 0, time.Duration(50-i)*time.Minute))
	}
	for _, c := range []struct {
		past     map[string]float64
		day, all int64
	}{
		{nil, 5, 10},
		{map[string]float64{"night": 0.9}, 9, 10},
	} {
		res := Plan(Input{Config: cfg, Queued: q, Capacity: Capacity{GPUs: 10}, Past: c.past}, &pool{free: 10})
		got := map[string]int64{}
		for _, a := range res.Admitted {
			got[a.Workload.Team] += a.Workload.Need().GPUs
		}
		if got["day"] < c.day || got["day"]+got["night"] != c.all {
			t.Errorf("past %v: admitted %v, want day at least %d of %d", c.past, got, c.day, c.all)
		}
	}
}

// Two teams always busy (weights 1 and 2) share 12 GPUs, one-GPU jobs of
// random length arriving as fast as they can run. Team a starts having
// held the whole cluster for hours. With memory, b gets more than its
// weight's share at first (a yields), and over time both converge to their
// weights; with none, b gets its weight's share from the start.
func TestFairShareWithMemoryConverges(t *testing.T) {
	const gpus, steps = 12, 3000
	step := time.Minute
	run := func(halfLife time.Duration, seed uint64) (early, late [2]float64) {
		r := rand.New(rand.NewPCG(seed, 9))
		cfg := quota.Config{Teams: map[string]quota.Team{
			"a": {Borrow: quota.Limits{GPUs: gpus}, Weight: 1}, "b": {Borrow: quota.Limits{GPUs: gpus}, Weight: 2}},
			SharedPool: quota.Limits{GPUs: gpus}}
		teams := []string{"a", "b"}
		h := History{HalfLife: halfLife, At: t0, Share: map[string]float64{"a": 1}}
		if halfLife == 0 {
			h.Share = nil
		}
		type job struct {
			team int
			ends int
		}
		var running []job
		n := 0
		for s := range steps {
			now := t0.Add(time.Duration(s) * step)
			kept := running[:0]
			use := [2]int64{}
			for _, j := range running {
				if j.ends > s {
					kept = append(kept, j)
					use[j.team]++
				}
			}
			running = kept
			in := Input{Config: cfg, Capacity: Capacity{GPUs: gpus}, Past: h.Share,
				Admitted: map[quota.Account]quota.Usage{}, TeamUse: map[string]Use{}}
			for i, tm := range teams {
				in.TeamUse[tm] = Use{GPUs: use[i]}
				in.Admitted[quota.Account{Team: tm}] = quota.Usage{Running: quota.Amount{GPUs: use[i]}}
				for range gpus {
					n++
					in.Queued = append(in.Queued, wl(tm, fmt.Sprintf("%s/%d", tm, n), 1, 0, time.Duration(-s)*time.Minute))
				}
			}
			res := Plan(in, &pool{free: gpus - use[0] - use[1]})
			for _, a := range res.Admitted {
				i := 0
				if a.Workload.Team == "b" {
					i = 1
				}
				use[i]++
				running = append(running, job{team: i, ends: s + 1 + r.IntN(20)})
			}
			shares := map[string]float64{"a": float64(use[0]) / gpus, "b": float64(use[1]) / gpus}
			h = h.Observe(shares, now.Add(step))
			for i, tm := range teams {
				if s < 60 {
					early[i] += shares[tm] / 60
				}
				if s >= steps/2 {
					late[i] += shares[tm] / (steps / 2)
				}
			}
		}
		return early, late
	}
	for seed := range uint64(3) {
		early, late := run(2*time.Hour, seed)
		if math.Abs(late[1]-2.0/3) > 0.05 || math.Abs(late[0]-1.0/3) > 0.05 {
			t.Errorf("seed %d, with memory: late shares a=%.3f b=%.3f, want about 1/3 and 2/3", seed, late[0], late[1])
		}
		if early[1] < 0.8 {
			t.Errorf("seed %d, with memory: b's share in the first hour %.3f; a held the cluster, so b should get well over 2/3", seed, early[1])
		}
		early0, late0 := run(0, seed)
		if math.Abs(late0[1]-2.0/3) > 0.05 || math.Abs(early0[1]-2.0/3) > 0.08 {
			t.Errorf("seed %d, without memory: b's shares early %.3f, late %.3f; want about 2/3 both", seed, early0[1], late0[1])
		}
		t.Logf("seed %d: b's share first hour %.3f with memory, %.3f without; second half %.3f and %.3f",
			seed, early[1], early0[1], late[1], late0[1])
	}
}

func TestHistoryRoundTrip(t *testing.T) {
	h := History{HalfLife: time.Hour, At: t0, Share: map[string]float64{"a": 0.25, "b": 1}}
	data, err := MarshalHistory(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseHistory(data, 2*time.Hour)
	if err != nil || !got.At.Equal(t0) || got.HalfLife != 2*time.Hour || got.Share["a"] != 0.25 || got.Share["b"] != 1 || len(got.Share) != 2 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, bad := range []string{
		`{"version":"v2","at":"2026-12-01T12:00:00Z","teams":{}}`,
		`{"version":"v1","at":"2026-12-01T12:00:00Z","teams":{"a":1.5}}`,
		`{"version":"v1","at":"2026-12-01T12:00:00Z","teams":{"a":-0.1}}`,
		`{"version":"v1","at":"2026-12-01T12:00:00Z","teams":{"":0.1}}`,
		`{"version":"v1","at":"soon","teams":{}}`,
		`{"version":"v1","at":"2026-12-01T12:00:00Z","teams":{},"extra":1}`,
		`[]`,
	} {
		if _, err := ParseHistory([]byte(bad), time.Hour); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzParseHistory: any stored history either parses into shares from 0
// to 1 that Observe keeps from 0 to 1, or is refused.
func FuzzParseHistory(f *testing.F) {
	f.Add([]byte(`{"version":"v1","at":"2026-12-01T12:00:00Z","teams":{"a":0.5}}`))
	f.Add([]byte(`{"version":"v1","at":"0001-01-01T00:00:00Z","teams":null}`))
	f.Add([]byte(`{"version":"v1","teams":{"a":1e-300,"b":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHistory(data, time.Hour)
		if err != nil {
			return
		}
		next := h.Observe(map[string]float64{"a": 1, "z": 0.5}, h.At.Add(90*time.Minute))
		for _, m := range []map[string]float64{h.Share, next.Share} {
			for team, s := range m {
				if math.IsNaN(s) || s < 0 || s > 1 {
					t.Fatalf("team %q share %v", team, s)
				}
			}
		}
	})
}
