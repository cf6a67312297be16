package stopcost

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

func TestSinceCheckpoint(t *testing.T) {
	p := Policy{DefaultInterval: 30 * time.Minute}
	now := t0.Add(100 * time.Minute)
	for _, c := range []struct {
		name string
		f    Facts
		want time.Duration
	}{
		{"not started", Facts{}, 0},
		{"starts later", Facts{Started: now.Add(time.Minute)}, 0},
		{"declares nothing: the default interval", Facts{Started: t0}, 10 * time.Minute},
		{"an interval of its own", Facts{Started: t0, Interval: 45 * time.Minute}, 10 * time.Minute},
		{"a last checkpoint", Facts{Started: t0, LastCheckpoint: now.Add(-3 * time.Minute)}, 3 * time.Minute},
		{"a last checkpoint wins over the interval", Facts{Started: t0, Interval: time.Minute, LastCheckpoint: now.Add(-7 * time.Minute)}, 7 * time.Minute},
		{"a checkpoint before the run began counts from the start", Facts{Started: t0, LastCheckpoint: t0.Add(-time.Hour)}, 100 * time.Minute},
		{"a checkpoint in the future counts as now", Facts{Started: t0, LastCheckpoint: now.Add(time.Hour)}, 0},
		{"a negative interval is none", Facts{Started: t0, Interval: -time.Minute}, 10 * time.Minute},
	} {
		if got := SinceCheckpoint(c.f, now, p); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := SinceCheckpoint(Facts{Started: t0}, now, Policy{}); got != 100*time.Minute {
		t.Errorf("no default interval: %v, want the whole run", got)
	}
	if got := LostWork(Facts{Started: t0, GPUs: 8}, now, p); got != 8*600 {
		t.Errorf("LostWork = %v GPU-s, want 4800", got)
	}
}

// Whatever a pod's owner writes, the loss stays within its current run,
// and declaring never makes it cost more than declaring nothing would if it
// lost its whole run.
func TestLostWorkIsBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := Policy{DefaultInterval: time.Duration(r.Int64N(int64(time.Hour)))}
	for range 10000 {
		started := t0.Add(time.Duration(r.Int64N(int64(48 * time.Hour))))
		now := t0.Add(time.Duration(r.Int64N(int64(72 * time.Hour))))
		f := Facts{Started: started, GPUs: float64(1 + r.IntN(8)),
			Interval:       time.Duration(r.Int64N(int64(4*time.Hour))) - time.Hour,
			LastCheckpoint: t0.Add(time.Duration(r.Int64N(int64(96*time.Hour))) - 12*time.Hour)}
		if r.IntN(3) == 0 {
			f.LastCheckpoint = time.Time{}
		}
		got := SinceCheckpoint(f, now, p)
		run := max(now.Sub(started), 0)
		if got < 0 || got > run {
			t.Fatalf("%+v at %v: %v outside [0, run %v]", f, now, got, run)
		}
	}
}

func TestMinRuntime(t *testing.T) {
	p := Policy{TeamMinRuntime: 10 * time.Minute, MaxPodMinRuntime: 30 * time.Minute}
	for _, c := range []struct {
		name  string
		f     Facts
		at    time.Duration
		want  time.Duration
		young bool
	}{
		{"the team's", Facts{Started: t0}, 5 * time.Minute, 10 * time.Minute, true},
		{"past the team's", Facts{Started: t0}, 10 * time.Minute, 10 * time.Minute, false},
		{"a pod raises it", Facts{Started: t0, MinRuntime: 20 * time.Minute}, 15 * time.Minute, 20 * time.Minute, true},
		{"up to the cluster's maximum", Facts{Started: t0, MinRuntime: 5 * time.Hour}, 31 * time.Minute, 30 * time.Minute, false},
		{"a pod cannot lower the team's", Facts{Started: t0, MinRuntime: time.Minute}, 5 * time.Minute, 10 * time.Minute, true},
		{"not started: not young", Facts{MinRuntime: time.Hour}, 0, 30 * time.Minute, false},
	} {
		if got := MinRuntime(c.f, p); got != c.want {
			t.Errorf("%s: MinRuntime %v, want %v", c.name, got, c.want)
		}
		now := t0.Add(c.at)
		if got := Young(c.f, now, p); got != c.young {
			t.Errorf("%s: Young %t, want %t", c.name, got, c.young)
		}
		until := YoungUntil(c.f, now, p)
		if c.young != !until.IsZero() || (c.young && !until.Equal(t0.Add(c.want))) {
			t.Errorf("%s: YoungUntil %v", c.name, until)
		}
	}
	if MinRuntime(Facts{MinRuntime: time.Hour}, Policy{}) != 0 {
		t.Error("with no cluster maximum a pod's own minimum runtime must count for nothing")
	}
}
