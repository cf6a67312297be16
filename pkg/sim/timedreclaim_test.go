package sim

import (
	"fmt"
	"math"
	"testing"

	"github.com/rota-sched/rota/pkg/quota"
)

// reclaimWorld is one 8-GPU node; team b (guarantee 4, may borrow 4) fills
// it, then team a (guarantee 4) asks for 2 GPUs at 119 minutes.
//
//	b-old    4 GPUs from 0, checkpoints every 10 min: loses 9 min x 4
//	b-saved  2 GPUs from 0, checkpoints at 58, 118 min: loses 1 min x 2
//	b-new    2 GPUs from 10 min (the newest), first checkpoint at 130 min:
//	         loses 109 min x 2
func reclaimWorld(t *testing.T, mode ReclaimMode) TimedResult {
	t.Helper()
	const min = 60.0
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		{Name: "b-old", Team: "b", Member: whole(4), Size: 1, Arrive: 0, Duration: 600 * min, Checkpoint: 10 * min},
		{Name: "b-saved", Team: "b", Member: whole(2), Size: 1, Arrive: 0, Duration: 600 * min, Checkpoint: 60 * min, CheckpointPhase: 58 * min},
		{Name: "b-new", Team: "b", Member: whole(2), Size: 1, Arrive: 10 * min, Duration: 600 * min, Checkpoint: 120 * min, CheckpointPhase: 120 * min},
		{Name: "a", Team: "a", Member: whole(2), Size: 1, Arrive: 119 * min, Duration: 60 * min},
	}
	for i := range jobs {
		jobs[i].Kind = jobs[i].Name
	}
	cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 8, CPUMilli: 64000}})
	cfg.Queue, cfg.Reclaim = QueueDRF, mode
	cfg.Quota = &quota.Config{Teams: map[string]quota.Team{
		"a": {GPUs: 4},
		"b": {GPUs: 4, Borrow: quota.Limits{GPUs: 4}},
	}, SharedPool: quota.Limits{GPUs: 4}}
	r, err := RunTimed(cfg)
	if err != nil {
		t.Fatalf("RunTimed(%q): %v", mode, err)
	}
	return r
}

func waitOf(t *testing.T, r TimedResult, kind string) float64 {
	t.Helper()
	for _, k := range r.Kinds {
		if k.Group == kind {
			return k.Max
		}
	}
	t.Fatalf("no kind %s", kind)
	return 0
}

// TestReclaimLostWork: the newest-first rule evicts the job that has gone
// longest without a checkpoint; the lost-work rule evicts the one that just
// checkpointed, and loses less. Without reclaim, a waits for b to finish.
func TestReclaimLostWork(t *testing.T) {
	off := reclaimWorld(t, ReclaimOff)
	if len(off.Evictions) != 0 || off.LostWorkGPUHours != 0 {
		t.Errorf("reclaim off: %d evictions, %.2f GPU-hours lost; want none", len(off.Evictions), off.LostWorkGPUHours)
	}
	if w := waitOf(t, off, "a"); w < 400*60 {
		t.Errorf("reclaim off: a waited %.0f s, want until b's jobs end", w)
	}
	for _, tc := range []struct {
		mode     ReclaimMode
		victim   string
		lostGPUm float64 // GPU-minutes
	}{
		{ReclaimNewest, "b-new", 109 * 2},
		{ReclaimLostWork, "b-saved", 1 * 2},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			r := reclaimWorld(t, tc.mode)
			if len(r.Evictions) != 1 || r.Reclaims != 1 {
				t.Fatalf("%d evictions in %d reclaims, want 1 in 1: %+v", len(r.Evictions), r.Reclaims, r.Evictions)
			}
			ev := r.Evictions[0]
			if ev.Job != tc.victim || ev.For != "a" || ev.T != 119*60 {
				t.Errorf("evicted %s for %s at %.0f s, want %s for a at %d s", ev.Job, ev.For, ev.T, tc.victim, 119*60)
			}
			if math.Abs(ev.Lost-tc.lostGPUm*60) > 1e-6 || math.Abs(r.LostWorkGPUHours-tc.lostGPUm/60) > 1e-9 {
				t.Errorf("lost %.1f GPU-s (%.4f GPU-h), want %.1f GPU-s", ev.Lost, r.LostWorkGPUHours, tc.lostGPUm*60)
			}
			if w := waitOf(t, r, "a"); w != 0 {
				t.Errorf("a waited %.0f s, want 0: reclaim frees its GPUs at once", w)
			}
			// The victim waits from its eviction at 119 min until a
			// leaves at 179 min.
			if r.Unplaced != 0 || r.Placed != 4 {
				t.Errorf("placed %d, unplaced %d; want 4 and 0", r.Placed, r.Unplaced)
			}
			victimWait := waitOf(t, r, tc.victim)
			wantWait := 60.0 * (179 - 119)
			if victimWait != wantWait {
				t.Errorf("%s waited %.0f s, want %.0f (from its eviction until a leaves)", tc.victim, victimWait, wantWait)
			}
		})
	}
	if n, l := reclaimWorld(t, ReclaimNewest), reclaimWorld(t, ReclaimLostWork); !(l.LostWorkGPUHours < n.LostWorkGPUHours) {
		t.Errorf("lost work: %.3f GPU-h by lost-work, %.3f by newest; want less", l.LostWorkGPUHours, n.LostWorkGPUHours)
	}
}

// TestReclaimKeepsGuarantee: a team is never evicted below its guarantee,
// even when that leaves a team within its own waiting.
func TestReclaimKeepsGuarantee(t *testing.T) {
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		// b runs 8 GPUs as one job; evicting it would leave b at 0 < 4.
		{Name: "b-all", Team: "b", Member: whole(8), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "a", Team: "a", Member: whole(2), Size: 1, Arrive: 600, Duration: 600},
	}
	for _, mode := range []ReclaimMode{ReclaimNewest, ReclaimLostWork} {
		cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 8, CPUMilli: 64000}})
		cfg.Queue, cfg.Reclaim = QueueDRF, mode
		cfg.Quota = &quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 4}, "b": {GPUs: 4, Borrow: quota.Limits{GPUs: 4}}},
			SharedPool: quota.Limits{GPUs: 4}}
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Evictions) != 0 {
			t.Errorf("%s: evicted %+v; b would end below its guarantee", mode, r.Evictions)
		}
	}
}

// TestReclaimUnusedMemoryGuarantee: a team that borrows GPUs is reclaimed
// from even though it uses less GPU memory than it is guaranteed, as every
// team of the gang workload does (GangLoad.Quota guarantees GPU memory for
// shares). Evicting whole GPUs takes none of its memory.
func TestReclaimUnusedMemoryGuarantee(t *testing.T) {
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		{Name: "b-own", Team: "b", Member: whole(4), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "b-borrowed", Team: "b", Member: whole(4), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "a", Team: "a", Member: whole(2), Size: 1, Arrive: 3600, Duration: 600},
	}
	for i := range jobs {
		jobs[i].Kind = jobs[i].Name
	}
	for _, mode := range []ReclaimMode{ReclaimNewest, ReclaimLostWork} {
		cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 8, CPUMilli: 64000}})
		cfg.Queue, cfg.Reclaim = QueueDRF, mode
		cfg.Quota = &quota.Config{Teams: map[string]quota.Team{
			"a": {GPUs: 4, GPUMemoryGiB: 1},
			"b": {GPUs: 4, GPUMemoryGiB: 1, Borrow: quota.Limits{GPUs: 4}},
		}, SharedPool: quota.Limits{GPUs: 4}}
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Reclaims != 1 || len(r.Evictions) != 1 {
			t.Fatalf("%s: %d reclaims, evictions %+v; want one: b borrows 4 GPUs", mode, r.Reclaims, r.Evictions)
		}
		if ev := r.Evictions[0]; ev.For != "a" || ev.T != 3600 || ev.TeamGPUsAfter != 4 || ev.GuaranteeGPUs != 4 {
			t.Errorf("%s: eviction %+v; want one of b's jobs for a at 3600 s, leaving b at its 4 GPUs", mode, ev)
		}
		if w := waitOf(t, r, "a"); w != 0 {
			t.Errorf("%s: a waited %.0f s, want 0", mode, w)
		}
	}
}

// TestDrawCheckpoints: intervals from the list, phases below them,
// reproducible by seed, and the jobs otherwise unchanged.
func TestDrawCheckpoints(t *testing.T) {
	jobs := make([]Job, 500)
	for i := range jobs {
		jobs[i] = Job{Name: fmt.Sprint(i), Duration: float64(i)}
	}
	a, b := DrawCheckpoints(jobs, 3), DrawCheckpoints(jobs, 3)
	seen := map[float64]int{}
	for i := range a {
		if a[i].Checkpoint != b[i].Checkpoint || a[i].CheckpointPhase != b[i].CheckpointPhase {
			t.Fatalf("job %d: %+v then %+v for the same seed", i, a[i], b[i])
		}
		if a[i].Name != jobs[i].Name || a[i].Duration != jobs[i].Duration || jobs[i].Checkpoint != 0 {
			t.Fatalf("job %d changed: %+v from %+v", i, a[i], jobs[i])
		}
		seen[a[i].Checkpoint]++
		if a[i].CheckpointPhase < 0 || (a[i].Checkpoint > 0 && a[i].CheckpointPhase >= a[i].Checkpoint) || (a[i].Checkpoint == 0 && a[i].CheckpointPhase != 0) {
			t.Errorf("job %d: phase %.0f for interval %.0f", i, a[i].CheckpointPhase, a[i].Checkpoint)
		}
	}
	if len(seen) != len(CheckpointIntervals) {
		t.Errorf("intervals drawn %v, want each of %v", seen, CheckpointIntervals)
	}
}

// TestReclaimOnlyWhereItMakesRoom: team b borrows one GPU on each of two
// 4-GPU nodes that team c fills with 3 GPUs each. Team a, within its
// guarantee, waits for 2 GPUs on one node: evicting both of b's jobs frees
// the quota but leaves one free GPU per node. The controller's rule evicts
// nothing; quota alone would evict both for nothing.
func TestReclaimOnlyWhereItMakesRoom(t *testing.T) {
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		{Name: "c1", Team: "c", Member: whole(3), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "c2", Team: "c", Member: whole(3), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "b1", Team: "b", Member: whole(1), Size: 1, Arrive: 1, Duration: 36000},
		{Name: "b2", Team: "b", Member: whole(1), Size: 1, Arrive: 1, Duration: 36000},
		{Name: "a", Team: "a", Member: whole(2), Size: 1, Arrive: 3600, Duration: 600},
	}
	for i := range jobs {
		jobs[i].Kind = jobs[i].Name
	}
	for _, quotaOnly := range []bool{false, true} {
		cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 4, CPUMilli: 64000}, {Name: "n1", GPUs: 4, CPUMilli: 64000}})
		cfg.Queue, cfg.Reclaim = QueueDRF, ReclaimNewest
		cfg.ReclaimOptions.QuotaOnly = quotaOnly
		cfg.Quota = &quota.Config{Teams: map[string]quota.Team{
			"a": {GPUs: 2}, "b": {Borrow: quota.Limits{GPUs: 2}}, "c": {GPUs: 6},
		}, SharedPool: quota.Limits{GPUs: 2}}
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if quotaOnly {
			if len(r.Evictions) == 0 {
				t.Errorf("quota only: no eviction; the test no longer sets up a reclaim that frees quota without room")
			}
			continue
		}
		if len(r.Evictions) != 0 || r.ReclaimsWithoutRoom == 0 {
			t.Errorf("evictions %+v, reclaims without room %d; want none evicted, and the reclaim counted as making no room",
				r.Evictions, r.ReclaimsWithoutRoom)
		}
	}
}

// TestReclaimHoldsTheRoom: team b borrows the whole 4-GPU node with two
// 2-GPU jobs; team c (no guarantee) waits to borrow 2 GPUs; team x, within
// its guarantee, arrives wanting 2. Reclaim evicts one of b's jobs for x.
// With the room held for x, x starts at once; with quota alone, c (first
// by fair share among equals) takes the freed GPUs and x waits.
func TestReclaimHoldsTheRoom(t *testing.T) {
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		{Name: "b1", Team: "b", Member: whole(2), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "b2", Team: "b", Member: whole(2), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "c", Team: "c", Member: whole(2), Size: 1, Arrive: 1800, Duration: 36000},
		{Name: "x", Team: "x", Member: whole(2), Size: 1, Arrive: 3600, Duration: 600},
	}
	for i := range jobs {
		jobs[i].Kind = jobs[i].Name
	}
	for _, quotaOnly := range []bool{false, true} {
		cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 4, CPUMilli: 64000}})
		cfg.Queue, cfg.Reclaim = QueueDRF, ReclaimNewest
		cfg.ReclaimOptions.QuotaOnly = quotaOnly
		cfg.Quota = &quota.Config{Teams: map[string]quota.Team{
			"x": {GPUs: 2}, "b": {Borrow: quota.Limits{GPUs: 4}}, "c": {Borrow: quota.Limits{GPUs: 2}},
		}, SharedPool: quota.Limits{GPUs: 4}}
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := waitOf(t, r, "x")
		if !quotaOnly && w != 0 {
			t.Errorf("with the room held: x waited %.0f s, want 0", w)
		}
		if quotaOnly && w == 0 {
			t.Errorf("quota alone: x did not wait; the test no longer sets up a competitor for the freed room")
		}
	}
}

// TestFairShareMemory: team anight runs the whole 4-GPU node for ten
// hours; as it ends, both teams have a 4-GPU job queued. Without memory the
// two teams hold nothing then and the tie goes to anight (first by name);
// with memory, day, which held nothing all night, goes first.
func TestFairShareMemory(t *testing.T) {
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		{Name: "all-night", Team: "anight", Member: whole(4), Size: 1, Arrive: 0, Duration: 36000},
		{Name: "night-1", Team: "anight", Member: whole(4), Size: 1, Arrive: 35000, Duration: 3600},
		{Name: "day-1", Team: "day", Member: whole(4), Size: 1, Arrive: 35500, Duration: 3600},
	}
	for i := range jobs {
		jobs[i].Kind = jobs[i].Name
	}
	for _, hl := range []float64{0, 6 * 3600} {
		cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 4, CPUMilli: 64000}})
		cfg.Queue, cfg.FairShareHalfLife = QueueDRF, hl
		cfg.Quota = &quota.Config{Teams: map[string]quota.Team{
			"anight": {Borrow: quota.Limits{GPUs: 4}}, "day": {Borrow: quota.Limits{GPUs: 4}},
		}, SharedPool: quota.Limits{GPUs: 4}}
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		day, night := waitOf(t, r, "day-1"), waitOf(t, r, "night-1")
		if hl > 0 && day >= night {
			t.Errorf("with memory: day waited %.0f s, night %.0f s; want day first", day, night)
		}
		if hl == 0 && night >= day {
			t.Errorf("without memory: night waited %.0f s, day %.0f s; want anight first (the tie, by name)", night, day)
		}
	}
}

// TestDeadlineOrder: on a 4-GPU node held until 3600 s, two 4-GPU jobs of
// one team wait: "old", and "urgent", whose deadline it meets only if it
// goes first. With the deadline lead, it goes first and meets it; without,
// it misses it.
func TestDeadlineOrder(t *testing.T) {
	whole := func(n int) Pod { return Pod{GPUs: n, GPUMilli: MilliPerGPU, CPUMilli: 1000} }
	jobs := []Job{
		{Name: "hold", Team: "a", Member: whole(4), Size: 1, Arrive: 0, Duration: 3600},
		{Name: "old", Team: "a", Member: whole(4), Size: 1, Arrive: 100, Duration: 3600},
		{Name: "urgent", Team: "a", Member: whole(4), Size: 1, Arrive: 200, Duration: 1800, Declared: 1800, Deadline: 3600 + 2400},
	}
	for i := range jobs {
		jobs[i].Kind = jobs[i].Name
	}
	for _, lead := range []float64{0, 3600} {
		cfg := timedPolicy(t, "fragmentation-aware", jobs, []Node{{Name: "n0", GPUs: 4, CPUMilli: 64000}})
		cfg.Queue, cfg.DeadlineLead = QueueDRF, lead
		cfg.Quota = &quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 4}}}
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Deadlines != 1 || (lead > 0) != (r.DeadlinesMet == 1) {
			t.Errorf("lead %.0f s: %d of %d deadlines met; want it met only with the lead", lead, r.DeadlinesMet, r.Deadlines)
		}
	}
}
