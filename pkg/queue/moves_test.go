package queue

import (
	"testing"
	"time"
)

func TestMoveBudget(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, c := range []struct {
		name    string
		recent  []time.Time
		running int
		share   float64
		want    int
	}{
		{"off", nil, 1000, 0, 0},
		{"negative share is off", nil, 1000, -1, 0},
		{"2% of 1000", nil, 1000, 0.02, 20},
		{"at least one", nil, 10, 0.02, 1},
		{"no running pods still one", nil, 0, 0.02, 1},
		{"recent moves count", []time.Time{ago(time.Minute), ago(59 * time.Minute)}, 1000, 0.02, 18},
		{"older than the window do not", []time.Time{ago(time.Hour), ago(2 * time.Hour)}, 1000, 0.02, 20},
		{"spent", []time.Time{ago(time.Second)}, 10, 0.02, 0},
		{"never below zero", []time.Time{ago(1), ago(2), ago(3)}, 10, 0.02, 0},
	} {
		if got := MoveBudget(c.recent, now, c.running, c.share); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
