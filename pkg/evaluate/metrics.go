package evaluate

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// PodRecord is what the API server recorded about one pod of a job.
type PodRecord struct {
	Job string
	// Node is where it ran ("" if it never started).
	Node string
	// GPUs and MemoryGiB are what the pod held on the stack it ran on (a
	// share becomes a whole GPU where the stack has no shares).
	GPUs      int64
	MemoryGiB int64
	// Asked is what the pod asked for, in GPUs (a share as its part of a
	// GPU): less than it held where the stack rounds a share up to a GPU.
	Asked float64
	// Started and Finished are zero when the pod never started or never
	// finished.
	Started, Finished time.Time
	// Disrupted marks a pod preempted or evicted (its DisruptionTarget
	// condition, or deleted while running by someone other than its job).
	Disrupted bool
}

// JobRecord is what the API server recorded about one job.
type JobRecord struct {
	Job Job
	// Created is the job object's creation; Completed when it finished
	// (zero: it did not).
	Created, Completed time.Time
	Failed             bool
	// FailReason is the reason and message of the job's Failed
	// condition (empty unless Failed).
	FailReason string
	// Refused is why the API server refused to create a job that can never
	// fit (a webhook's answer; empty when it was created). Such a job
	// never started, as it never starts where it waits for ever.
	Refused string
}

// Process is one control-plane process's cost over a run.
type Process struct {
	Name       string
	CPUSeconds float64
}

// Check is one invariant the run was checked against.
type Check struct {
	Name       string
	Violations []string
}

// Run is one scenario on one stack, as recorded.
type Run struct {
	Stack, Scenario string
	// Skipped says why the stack could not be run (then nothing else is set).
	Skipped    string
	Start, End time.Time
	Cluster    Cluster
	Teams      []Team
	Jobs       []JobRecord
	Pods       []PodRecord
	Processes  []Process
	// APIWrites counts the API server's mutating requests over the run, by
	// user (kube-apiserver's audit log).
	APIWrites map[string]int
	Checks    []Check
}

// Waits are percentiles of a wait, in seconds.
type Waits struct {
	N                  int
	P50, P95, P99, Max float64
}

// Point is a sample of a curve: seconds from the run's start, a value.
type Point struct{ T, V float64 }

// Result is a run's figures.
type Result struct {
	Stack, Scenario, Skipped string
	// Wait is per kind (and "big" for the gangs holding half the cluster
	// or more): job creation to the start of its last pod. WaitSamples
	// are the waits themselves, in seconds (for distributions).
	Wait        map[string]Waits
	WaitSamples map[string][]float64
	// Completion is job creation to completion, per kind.
	Completion map[string]Waits
	// Makespan is the first job's creation to the last completion.
	Makespan                        float64
	Completed, Failed, NeverStarted int
	// Refused counts the never-started jobs refused at creation.
	Refused int
	// Failures counts the failed jobs by the reason of their Failed
	// condition.
	Failures map[string]int
	// NeverStartedFits counts the never-started jobs that could have run.
	NeverStartedFits int
	// GPUs is the whole GPUs allocated over time; Memory the GiB of GPU
	// memory shares; Equivalent both as GPUs (a share counts its part of
	// one GPU). Mean and peak of Equivalent against the cluster's GPUs.
	GPUs, Memory, Equivalent []Point
	MeanUse, PeakUse         float64
	// MeanServed is the mean of what the running pods asked for (Asked)
	// over the cluster's GPUs: the work served, whatever the stack held
	// for it.
	MeanServed float64
	// TeamShare is each team's GPU-seconds over its quota's; Jain is
	// Jain's fairness index over those. TeamUse is each team's GPUs
	// (shares as parts of a GPU) over time.
	TeamShare map[string]float64
	TeamUse   map[string][]Point
	Jain      float64
	// Disrupted pods and the GPU-hours they had run when disrupted.
	Disrupted         int
	LostGPUHours      float64
	AdmittedPods      int
	CPUSecondsPerPod  map[string]float64
	APIWritesPerPod   map[string]float64
	Checks            []Check
	CompressionFactor float64
}

// Summarize computes a run's figures.
func Summarize(r Run, compression float64) Result {
	res := Result{Stack: r.Stack, Scenario: r.Scenario, Skipped: r.Skipped, Wait: map[string]Waits{},
		Completion: map[string]Waits{}, TeamShare: map[string]float64{}, TeamUse: map[string][]Point{}, CPUSecondsPerPod: map[string]float64{},
		APIWritesPerPod: map[string]float64{}, Checks: r.Checks, CompressionFactor: compression}
	if r.Skipped != "" {
		return res
	}
	pods := map[string][]PodRecord{}
	for _, p := range r.Pods {
		pods[p.Job] = append(pods[p.Job], p)
		if !p.Started.IsZero() {
			res.AdmittedPods++
		}
	}
	waits, done := map[string][]float64{}, map[string][]float64{}
	var first, last time.Time
	bigGang := r.Cluster.GPUs() / 2
	for _, j := range r.Jobs {
		if first.IsZero() || j.Created.Before(first) {
			first = j.Created
		}
		switch {
		case !j.Completed.IsZero() && !j.Failed:
			res.Completed++
			done[string(j.Job.Kind)] = append(done[string(j.Job.Kind)], j.Completed.Sub(j.Created).Seconds())
			if j.Completed.After(last) {
				last = j.Completed
			}
		case j.Failed:
			res.Failed++
			if res.Failures == nil {
				res.Failures = map[string]int{}
			}
			res.Failures[cmp.Or(j.FailReason, "no reason recorded")]++
		}
		started, all := lastStart(pods[j.Job.Name], j.Job.Pods)
		if !all {
			if !j.Failed && j.Completed.IsZero() {
				res.NeverStarted++
				if j.Refused != "" {
					res.Refused++
				}
				if !j.Job.NeverFits {
					res.NeverStartedFits++
				}
			}
			continue
		}
		w := started.Sub(j.Created).Seconds()
		waits[string(j.Job.Kind)] = append(waits[string(j.Job.Kind)], w)
		if j.Job.Gang() && j.Job.TotalGPUs() >= bigGang {
			waits["big"] = append(waits["big"], w)
		}
	}
	for k, ws := range waits {
		res.Wait[k] = percentiles(ws)
	}
	res.WaitSamples = waits
	for k, ds := range done {
		res.Completion[k] = percentiles(ds)
	}
	if !last.IsZero() {
		res.Makespan = last.Sub(first).Seconds()
	}
	res.curves(r)
	res.fairness(r)
	for _, p := range r.Pods {
		if p.Disrupted {
			res.Disrupted++
			if !p.Started.IsZero() && !p.Finished.IsZero() {
				res.LostGPUHours += float64(p.GPUs) * p.Finished.Sub(p.Started).Hours() * compression
			}
		}
	}
	if res.AdmittedPods > 0 {
		for _, p := range r.Processes {
			res.CPUSecondsPerPod[p.Name] = p.CPUSeconds / float64(res.AdmittedPods)
		}
		for user, n := range r.APIWrites {
			res.APIWritesPerPod[user] = float64(n) / float64(res.AdmittedPods)
		}
	}
	return res
}

// lastStart is when the last of a job's pods started; all is false unless
// want pods started.
func lastStart(pods []PodRecord, want int) (time.Time, bool) {
	var last time.Time
	n := 0
	for _, p := range pods {
		if p.Started.IsZero() {
			continue
		}
		n++
		if p.Started.After(last) {
			last = p.Started
		}
	}
	return last, n >= want && want > 0
}

// percentiles of xs (nearest rank).
func percentiles(xs []float64) Waits {
	if len(xs) == 0 {
		return Waits{}
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Waits{N: len(s), P50: at(0.5), P95: at(0.95), P99: at(0.99), Max: s[len(s)-1]}
}

// curves draws the allocation over time from the pods' starts and ends (a
// pod still running at the end counts until then), and its mean and peak.
func (res *Result) curves(r Run) {
	type step struct {
		t         time.Time
		gpus, mem float64
	}
	var steps []step
	for _, p := range r.Pods {
		end, ran := ranUntil(p, r)
		if !ran {
			continue
		}
		steps = append(steps, step{p.Started, float64(p.GPUs), float64(p.MemoryGiB)},
			step{end, -float64(p.GPUs), -float64(p.MemoryGiB)})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return a.t.Compare(b.t) })
	var gpus, mem float64
	per := float64(max(r.Cluster.GPUMemoryGiB, 1))
	capacity := float64(max(r.Cluster.GPUs(), 1))
	var area, prevT float64
	prevEq := 0.0
	var served float64
	for _, p := range r.Pods {
		end, ran := ranUntil(p, r)
		if !ran {
			continue
		}
		served += p.Asked * end.Sub(p.Started).Seconds()
	}
	for i, s := range steps {
		gpus += s.gpus
		mem += s.mem
		if i+1 < len(steps) && steps[i+1].t.Equal(s.t) {
			continue // one point per instant
		}
		t := s.t.Sub(r.Start).Seconds()
		eq := gpus + mem/per
		area += prevEq * (t - prevT)
		prevT, prevEq = t, eq
		res.GPUs = append(res.GPUs, Point{t, gpus})
		res.Memory = append(res.Memory, Point{t, mem})
		res.Equivalent = append(res.Equivalent, Point{t, eq})
		res.PeakUse = max(res.PeakUse, eq/capacity)
	}
	// The mean is over the time there was work: from the start to the
	// last pod's end (the run's end while pods still run), so that a
	// stack that finishes early is not charged for the idle time after.
	if span := busyUntil(r).Sub(r.Start).Seconds(); span > 0 {
		area += prevEq * max(span-prevT, 0)
		res.MeanUse = area / span / capacity
		res.MeanServed = served / span / capacity
	}
}

// ranUntil is when a pod that started stopped running: its end, or the
// run's end while it still ran. ran is false for a pod that never started.
func ranUntil(p PodRecord, r Run) (end time.Time, ran bool) {
	if p.Started.IsZero() {
		return time.Time{}, false
	}
	if p.Finished.IsZero() || p.Finished.After(r.End) {
		return r.End, true
	}
	return p.Finished, true
}

// busyUntil is when the run's last pod ended, or the run's end while a
// pod still runs.
func busyUntil(r Run) time.Time {
	last := r.Start
	for _, p := range r.Pods {
		if p.Started.IsZero() {
			continue
		}
		if p.Finished.IsZero() || p.Finished.After(r.End) {
			return r.End
		}
		if p.Finished.After(last) {
			last = p.Finished
		}
	}
	return last
}

// fairness is each team's GPU-seconds against its quota, and Jain's index
// over those shares: 1 when every team got the same share of its quota.
func (res *Result) fairness(r Run) {
	byJob := map[string]string{}
	for _, j := range r.Jobs {
		byJob[j.Job.Name] = j.Job.Team
	}
	used := map[string]float64{}
	per := float64(max(r.Cluster.GPUMemoryGiB, 1))
	type step struct {
		t    time.Time
		team string
		g    float64
	}
	var steps []step
	for _, p := range r.Pods {
		end, ran := ranUntil(p, r)
		if !ran {
			continue
		}
		g := float64(p.GPUs) + float64(p.MemoryGiB)/per
		used[byJob[p.Job]] += g * end.Sub(p.Started).Seconds()
		steps = append(steps, step{p.Started, byJob[p.Job], g}, step{end, byJob[p.Job], -g})
	}
	slices.SortStableFunc(steps, func(a, b step) int { return a.t.Compare(b.t) })
	now := map[string]float64{}
	for _, s := range steps {
		now[s.team] += s.g
		res.TeamUse[s.team] = append(res.TeamUse[s.team], Point{s.t.Sub(r.Start).Seconds(), now[s.team]})
	}
	var sum, sq float64
	for _, t := range r.Teams {
		x := 0.0
		if t.GPUs > 0 {
			x = used[t.Name] / float64(t.GPUs)
		}
		res.TeamShare[t.Name] = x
		sum += x
		sq += x * x
	}
	if sq > 0 {
		res.Jain = sum * sum / (float64(len(r.Teams)) * sq)
	}
}
