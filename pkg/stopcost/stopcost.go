// Package stopcost says what stopping a running pod costs and whether it
// may be stopped yet: the work it loses (GPUs times the time since its last
// checkpoint) and its minimum runtime. Reclaim and the preempt verb break
// ties between otherwise equal victims by lost work, least first, and never
// stop a pod inside its minimum runtime unless the one asking is urgent.
//
// A pod's owner writes the checkpoint facts, so they are bounded before
// use: a claimed last checkpoint is taken as no earlier than the pod's
// (last) start, where its run began, and no later than now; an interval
// must be positive. A pod that declares nothing is treated as checkpointing
// at the cluster's default interval, so declaring is neither needed to be
// spared nor a way to be taken first. Everything here is pure: the caller
// passes now.
package stopcost

import "time"

// Facts are what a running pod says and the API shows about stopping it.
type Facts struct {
	// Started is when the pod's current run began (its start time, or its
	// last container restart); zero for a pod that has not started.
	Started time.Time
	// GPUs is how many GPUs it holds: whole GPUs count one each, a memory
	// share its fraction of the GPU.
	GPUs float64
	// Interval is the checkpoint interval it declares; 0 for none.
	Interval time.Duration
	// LastCheckpoint is the time of its last checkpoint, as the job writes
	// it on its pods; zero for none. It wins over Interval.
	LastCheckpoint time.Time
	// MinRuntime is how long it asks to run before any stop (already
	// bounded by Policy.MaxPodMinRuntime by the caller or by Effective).
	MinRuntime time.Duration
}

// Policy is the cluster's side.
type Policy struct {
	// DefaultInterval is the checkpoint interval assumed for a pod that
	// declares none; 0 assumes none (lost work is the whole run).
	DefaultInterval time.Duration
	// TeamMinRuntime is the minimum runtime of the pod's team (quota
	// configuration); a pod's own can only raise it, up to
	// MaxPodMinRuntime.
	TeamMinRuntime, MaxPodMinRuntime time.Duration
}

// SinceCheckpoint is how much of the pod's run a stop now would lose: the
// time since its last checkpoint, bounded to its current run.
func SinceCheckpoint(f Facts, now time.Time, p Policy) time.Duration {
	if f.Started.IsZero() || !now.After(f.Started) {
		return 0
	}
	run := now.Sub(f.Started)
	if !f.LastCheckpoint.IsZero() {
		last := f.LastCheckpoint
		if last.Before(f.Started) {
			last = f.Started // work before this run began is not this stop's loss
		}
		if last.After(now) {
			last = now
		}
		return now.Sub(last)
	}
	iv := f.Interval
	if iv <= 0 {
		iv = p.DefaultInterval
	}
	if iv <= 0 {
		return run
	}
	return run % iv
}

// LostWork is the GPU-seconds a stop now would lose.
func LostWork(f Facts, now time.Time, p Policy) float64 {
	return f.GPUs * SinceCheckpoint(f, now, p).Seconds()
}

// MinRuntime is the pod's effective minimum runtime: its team's, raised by
// its own declaration up to the cluster's maximum.
func MinRuntime(f Facts, p Policy) time.Duration {
	own := min(f.MinRuntime, p.MaxPodMinRuntime)
	return max(p.TeamMinRuntime, own)
}

// Young reports whether the pod is inside its minimum runtime now: it has
// started and has run less than MinRuntime. A pod not yet started is not
// young (stopping it loses nothing).
func Young(f Facts, now time.Time, p Policy) bool {
	if f.Started.IsZero() {
		return false
	}
	return now.Sub(f.Started) < MinRuntime(f, p)
}

// YoungUntil is when the pod leaves its minimum runtime (zero when it is
// not young now): expected start times of work that waits for it count
// from there.
func YoungUntil(f Facts, now time.Time, p Policy) time.Time {
	if !Young(f, now, p) {
		return time.Time{}
	}
	return f.Started.Add(MinRuntime(f, p))
}
