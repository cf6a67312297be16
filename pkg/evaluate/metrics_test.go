package evaluate

import (
	"math"
	"testing"
	"time"
)

// A run worked by hand: a 2-pod gang of 8 GPUs that waits 10 s and runs
// 20 s, a 40 GiB share that starts at once and runs 40 s, a job that never
// starts although it fits, and one that never could.
func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	c := Cluster{Nodes: 2, GPUsPerNode: 8, GPUMemoryGiB: 80}
	gang := Job{Name: "gang", Team: "a", Kind: Training, Pods: 2, GPUs: 8}
	share := Job{Name: "share", Team: "b", Kind: Inference, Pods: 1, MemoryGiB: 40}
	waits := Job{Name: "waits", Team: "b", Kind: Short, Pods: 1, GPUs: 1}
	never := Job{Name: "never", Team: "a", Kind: Training, Pods: 4, GPUs: 8, NeverFits: true}
	r := Run{Stack: "s", Scenario: "x", Start: t0, End: at(40), Cluster: c,
		Teams: []Team{{"a", 8}, {"b", 8}},
		Jobs: []JobRecord{{Job: gang, Created: t0, Completed: at(30)}, {Job: share, Created: t0, Completed: at(40)},
			{Job: waits, Created: t0}, {Job: never, Created: t0, Refused: "denied: it can never run"}},
		Pods: []PodRecord{{Job: "gang", GPUs: 8, Asked: 8, Started: at(8), Finished: at(30)}, {Job: "gang", GPUs: 8, Asked: 8, Started: at(10), Finished: at(30)},
			{Job: "share", MemoryGiB: 40, Asked: 0.5, Started: t0, Finished: at(40)}, {Job: "waits", GPUs: 1, Asked: 1}},
		Processes: []Process{{Name: "kube-scheduler", CPUSeconds: 3}}, APIWrites: map[string]int{"rota": 6}}
	res := Summarize(r, 60)
	if w := res.Wait["A"]; w.N != 1 || w.Max != 10 {
		t.Errorf("gang wait = %+v; want one of 10 s (its last member's start)", w)
	}
	if ws := res.WaitSamples["A"]; len(ws) != 1 || ws[0] != 10 {
		t.Errorf("wait samples of A = %v; want [10]", ws)
	}
	if w := res.Wait["big"]; w.N != 1 || w.Max != 10 {
		t.Errorf("big gang wait = %+v; want the 16-GPU gang (half the cluster) at 10 s", w)
	}
	if res.Makespan != 40 || res.Completed != 2 || res.NeverStarted != 2 || res.NeverStartedFits != 1 || res.Refused != 1 {
		t.Errorf("makespan %v, completed %d, never started %d (%d could fit, %d refused at creation); want 40, 2, 2, 1, 1",
			res.Makespan, res.Completed, res.NeverStarted, res.NeverStartedFits, res.Refused)
	}
	// Use in GPUs: a half GPU for 40 s, 8 GPUs 8-10 s, 16 GPUs 10-30 s: 20 + 16 + 320 = 356 GPU-s
	// over 16 GPUs x 40 s.
	if want := 356.0 / 640; math.Abs(res.MeanUse-want) > 1e-9 || res.PeakUse != 16.5/16 {
		t.Errorf("mean use %v, peak %v; want %v, %v", res.MeanUse, res.PeakUse, want, 16.5/16)
	}
	r.End = at(100) // the run waited on after the last pod ended: the mean is over the busy time
	if later := Summarize(r, 60); math.Abs(later.MeanUse-res.MeanUse) > 1e-9 {
		t.Errorf("mean use %v once the run ends later; want %v (idle time after the last pod is not counted)", later.MeanUse, res.MeanUse)
	}
	r.End = at(40)
	if want := 356.0 / 640; math.Abs(res.MeanServed-want) > 1e-9 {
		t.Errorf("work served %v; want %v (what the running pods asked for)", res.MeanServed, want)
	}
	// Team a: 8x22 + 8x20 = 336 GPU-s on a quota of 8; team b: 20 on 8. Jain = (42+2.5)^2 / (2 (42^2+2.5^2)).
	a, b := 336.0/8, 20.0/8
	if want := (a + b) * (a + b) / (2 * (a*a + b*b)); math.Abs(res.Jain-want) > 1e-9 {
		t.Errorf("Jain = %v; want %v", res.Jain, want)
	}
	if res.AdmittedPods != 3 || res.CPUSecondsPerPod["kube-scheduler"] != 1 || res.APIWritesPerPod["rota"] != 2 {
		t.Errorf("per admitted pod: %d pods, cpu %v, writes %v", res.AdmittedPods, res.CPUSecondsPerPod, res.APIWritesPerPod)
	}
	if res.Failed != 0 || res.Failures != nil {
		t.Errorf("failed %d %v; want none", res.Failed, res.Failures)
	}
	r.Jobs = append(r.Jobs, JobRecord{Job: Job{Name: "f1", Kind: Short, Pods: 1}, Created: t0, Failed: true, FailReason: "BackoffLimitExceeded: x"},
		JobRecord{Job: Job{Name: "f2", Kind: Short, Pods: 1}, Created: t0, Failed: true, FailReason: "BackoffLimitExceeded: x"},
		JobRecord{Job: Job{Name: "f3", Kind: Short, Pods: 1}, Created: t0, Failed: true})
	if f := Summarize(r, 60); f.Failed != 3 || f.Failures["BackoffLimitExceeded: x"] != 2 || f.Failures["no reason recorded"] != 1 {
		t.Errorf("failed %d by reason %v; want 3: 2 BackoffLimitExceeded, 1 with no reason", f.Failed, f.Failures)
	}
	if skipped := Summarize(Run{Stack: "kueue", Skipped: "no binary"}, 60); skipped.Skipped != "no binary" || skipped.Completed != 0 {
		t.Errorf("a skipped run = %+v", skipped)
	}
}

// Percentiles by nearest rank.
func TestPercentiles(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i)
	}
	if w := percentiles(xs); w.P50 != 50 || w.P95 != 95 || w.P99 != 99 || w.Max != 100 || w.N != 100 {
		t.Errorf("percentiles = %+v", w)
	}
}
