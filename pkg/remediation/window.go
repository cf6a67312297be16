package remediation

import "time"

// Windows counts events per key in a sliding window of Span: Add records
// one at now and returns how many fell in (now-Span, now].
type Windows struct {
	Span   time.Duration
	events map[string][]time.Time
}

// NewWindows returns empty windows of span.
func NewWindows(span time.Duration) *Windows {
	return &Windows{Span: span, events: map[string][]time.Time{}}
}

// Add records one event for key at now and returns the count in the window.
func (w *Windows) Add(key string, now time.Time) int {
	w.events[key] = append(w.prune(key, now), now)
	return len(w.events[key])
}

// Count returns the events of key in the window ending at now.
func (w *Windows) Count(key string, now time.Time) int { return len(w.prune(key, now)) }

// Reset forgets key's events (after a release, the count starts again).
func (w *Windows) Reset(key string) { delete(w.events, key) }

func (w *Windows) prune(key string, now time.Time) []time.Time {
	ev := w.events[key]
	i := 0
	for i < len(ev) && !ev[i].After(now.Add(-w.Span)) {
		i++
	}
	ev = ev[i:]
	if len(ev) == 0 {
		delete(w.events, key)
		return nil
	}
	w.events[key] = ev
	return ev
}
