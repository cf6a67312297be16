package sim

import (
	"fmt"
	"testing"

	"github.com/rota-sched/rota/pkg/reserve"
)

// starvedGang is the starvation case: a 16-GPU gang (2 pods x 8) needs both
// nodes of the cluster free at once, while 1-GPU jobs arriving every 20 s
// for 100-300 s each keep taking every GPU that frees.
func starvedGang() ([]Node, []Job) {
	nodes := []Node{{Name: "n0", GPUs: 8, CPUMilli: 64000, Leaf: "a"}, {Name: "n1", GPUs: 8, CPUMilli: 64000, Leaf: "a"}}
	one := Pod{GPUs: 1, GPUMilli: MilliPerGPU, CPUMilli: 1000}
	var jobs []Job
	for i := range 300 {
		d := float64(100 + 100*(i%3))
		jobs = append(jobs, Job{Name: fmt.Sprintf("s%03d", i), Kind: "single", Member: one, Size: 1, Priority: 10,
			Arrive: float64(i) * 20, Duration: d, Declared: 1.5 * d})
	}
	jobs = append(jobs, Job{Name: "gang", Kind: "gang", Member: Pod{GPUs: 8, GPUMilli: MilliPerGPU, CPUMilli: 8000}, Size: 2,
		Priority: 100, Arrive: 500, Duration: 600, Declared: 900})
	return nodes, jobs
}

// w0 is the gang's RoomBound in r.
func w0(r TimedResult, jobs []Job) float64 {
	for i, w := range r.Waits {
		if jobs[i].Kind == "gang" {
			return w.RoomBound
		}
	}
	return -1
}

func kindStats(r TimedResult, kind string) WaitStats {
	for _, k := range r.Kinds {
		if k.Group == kind {
			return k
		}
	}
	return WaitStats{}
}

// TestRunTimedReserve: without a reservation the gang waits until the
// stream of small jobs thins out at its end; with one it holds the GPUs that
// free, lets in only jobs that end by its expected start, and starts
// within minutes. Every gang is placed whole, ledger.Check runs after every
// placement, and no pod lands on held GPUs the reservation does not let in.
func TestRunTimedReserve(t *testing.T) {
	nodes, jobs := starvedGang()
	run := func(rsv *Reservation) TimedResult {
		t.Helper()
		cfg := timedPolicy(t, "bestfit", jobs, nodes)
		cfg.Queue, cfg.Reserve = QueueDRF, rsv
		r, err := RunTimed(cfg)
		if err != nil {
			t.Fatalf("RunTimed(reserve %v): %v", rsv != nil, err)
		}
		if r.Placed != len(jobs) || r.GangPartial != 0 || r.HeldBreached != 0 {
			t.Fatalf("reserve %v: placed %d of %d, %d gangs partly placed, %d pods on held GPUs",
				rsv != nil, r.Placed, len(jobs), r.GangPartial, r.HeldBreached)
		}
		return r
	}
	today := run(nil)
	with := run(&Reservation{Policy: reserve.Policy{LargeGPUs: 16}})
	gT, gW := kindStats(today, "gang").Max, kindStats(with, "gang").Max
	t.Logf("gang wait: %.0f s today, %.0f s with a reservation; %d backfilled, %.2f GPU-hours held idle",
		gT, gW, with.Backfilled, with.HeldIdleGPUHours)
	if gT < 3000 {
		t.Fatalf("today the gang waits %.0f s: the workload no longer starves it", gT)
	}
	if gW > gT/3 {
		t.Errorf("gang wait with a reservation %.0f s, today %.0f s: want at most a third", gW, gT)
	}
	// The least it could wait: until the small jobs running when it
	// arrived end (each runs at most 300 s); with a reservation it waits
	// no less, and not much more.
	var bound, wait float64
	for i, w := range with.Waits {
		if jobs[i].Kind == "gang" {
			bound, wait = w.RoomBound, w.Wait
		}
	}
	if bound <= 0 || bound > 300 || wait < bound || w0(today, jobs) != bound {
		t.Errorf("gang's least possible wait %.0f s (today's replay: %.0f s), its wait %.0f s: want 0 < bound <= 300, wait >= bound, the same bound in both",
			bound, w0(today, jobs), wait)
	}
	if with.Reserved != 1 || with.Backfilled == 0 {
		t.Errorf("held for %d jobs, %d pods backfilled: want 1 and some", with.Reserved, with.Backfilled)
	}
	if today.Reserve || !with.Reserve || today.Backfilled != 0 || today.HeldIdleGPUHours != 0 {
		t.Errorf("today's replay reports reservations: %+v", today)
	}
}

// TestRunTimedReserveUndeclared: jobs that declare no runtime never
// backfill. With every small job undeclared and a default runtime of 300 s
// as the estimate of their ends, the gang's expected start is known (an
// estimate), the GPUs that free on its nodes stay held and idle, and it
// starts once the pods on them end.
func TestRunTimedReserveUndeclared(t *testing.T) {
	nodes, jobs := starvedGang()
	for i := range jobs {
		if jobs[i].Kind == "single" {
			jobs[i].Declared = 0
		}
	}
	cfg := timedPolicy(t, "bestfit", jobs, nodes)
	cfg.Queue, cfg.Reserve = QueueDRF, &Reservation{Policy: reserve.Policy{LargeGPUs: 16}, DefaultRuntime: 300}
	r, err := RunTimed(cfg)
	if err != nil {
		t.Fatalf("RunTimed: %v", err)
	}
	if r.Backfilled != 0 {
		t.Errorf("%d pods without a declared runtime backfilled held GPUs", r.Backfilled)
	}
	if r.HeldIdleGPUHours <= 0 {
		t.Errorf("held idle %.3f GPU-hours: want the freed GPUs held", r.HeldIdleGPUHours)
	}
	if w := kindStats(r, "gang").Max; w > 600 {
		t.Errorf("gang waited %.0f s: want it to start once the pods on its nodes end (at most 300 s plus the next arrivals)", w)
	}
}

// TestRunTimedReserveConfig refuses reservations without the Rota queue and
// bad declarations.
func TestRunTimedReserveConfig(t *testing.T) {
	nodes, jobs := starvedGang()
	cfg := timedPolicy(t, "bestfit", jobs, nodes)
	cfg.Reserve = &Reservation{}
	if _, err := RunTimed(cfg); err == nil {
		t.Error("reservations with the FIFO queue: no error")
	}
	bad := []DeclareOptions{{FactorMin: 0, FactorMax: 1}, {FactorMin: 2, FactorMax: 1}, {FactorMin: 1, FactorMax: 3, Undeclared: 1.5}}
	for _, o := range bad {
		if _, err := DeclareRuntimes(jobs, o); err == nil {
			t.Errorf("DeclareRuntimes(%+v): no error", o)
		}
	}
	cfg.Queue = QueueDRF
	cfg.Jobs = append(jobs[:0:0], jobs...)
	cfg.Jobs[0].Declared = -1
	if _, err := RunTimed(cfg); err == nil {
		t.Error("a negative declared runtime: no error")
	}
}

// TestDeclareRuntimes: declared runtimes over-estimate within the factor
// range, the undeclared share is close to the one asked, the draws are
// repeatable and leave everything else alone.
func TestDeclareRuntimes(t *testing.T) {
	var jobs []Job
	for i := range 2000 {
		jobs = append(jobs, Job{Name: fmt.Sprint(i), Size: 1, Duration: float64(60 + i)})
	}
	o := DeclareOptions{FactorMin: 1, FactorMax: 3, Undeclared: 0.2, Seed: 7}
	a, err := DeclareRuntimes(jobs, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DeclareRuntimes(jobs, o)
	none := 0
	for i, j := range a {
		if j.Declared != b[i].Declared {
			t.Fatalf("job %d: %v then %v: not repeatable", i, j.Declared, b[i].Declared)
		}
		if jobs[i].Declared != 0 || j.Duration != jobs[i].Duration || j.runtime() != j.Duration {
			t.Fatalf("job %d changed: %+v from %+v", i, j, jobs[i])
		}
		switch f := j.Declared / j.Duration; {
		case j.Declared == 0:
			none++
		case f < 1 || f > 3:
			t.Fatalf("job %d: factor %v", i, f)
		}
	}
	if none < 340 || none > 460 {
		t.Errorf("%d of 2000 undeclared, want about 400", none)
	}
	// A declared runtime below the real one ends the job at it (the kubelet's deadline).
	if j := (Job{Duration: 100, Declared: 40}); j.runtime() != 40 {
		t.Errorf("runtime %v, want 40", j.runtime())
	}
}
