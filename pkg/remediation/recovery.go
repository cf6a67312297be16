package remediation

import "time"

// Recovery keeps a GPU or node that failed out of placement until it has
// been healthy for Quiet. Targets it never saw fail are always usable.
//
// Example with Quiet 1m: unhealthy at 10:00, healthy again at 10:03 →
// unusable until 10:04, usable from then on; a new fault at 10:03:30
// restarts the wait.
type Recovery struct {
	Quiet time.Duration
	// since maps a failed target to the time it turned healthy again; the
	// zero time means it is still unhealthy.
	since map[Target]time.Time
}

// NewRecovery returns a tracker with the given quiet period.
func NewRecovery(quiet time.Duration) *Recovery {
	return &Recovery{Quiet: quiet, since: map[Target]time.Time{}}
}

// Observe records t's health at now. It reports whether this observation
// changed t's usability (the caller re-applies the node's topology then);
// the end of a quiet period is reported by Settle instead.
func (r *Recovery) Observe(t Target, healthy bool, now time.Time) bool {
	before := r.Usable(t, now)
	s, known := r.since[t]
	switch {
	case !healthy:
		r.since[t] = time.Time{}
	case known && s.IsZero():
		r.since[t] = now
	}
	return before != r.Usable(t, now)
}

// Usable reports whether t may take new work at now (quarantine aside).
func (r *Recovery) Usable(t Target, now time.Time) bool {
	s, known := r.since[t]
	if !known {
		return true
	}
	return !s.IsZero() && now.Sub(s) >= r.Quiet
}

// Recovering returns the targets that are healthy but still waiting.
func (r *Recovery) Recovering(now time.Time) []Target {
	var out []Target
	for t, s := range r.since {
		if !s.IsZero() && now.Sub(s) < r.Quiet {
			out = append(out, t)
		}
	}
	return out
}

// Settle forgets the targets whose quiet period has passed at now and
// returns them: they are usable from now on (the caller re-applies their
// nodes).
func (r *Recovery) Settle(now time.Time) []Target {
	var out []Target
	for t, s := range r.since {
		if !s.IsZero() && now.Sub(s) >= r.Quiet {
			out = append(out, t)
			delete(r.since, t)
		}
	}
	return out
}

// Forget drops every target of node (node deleted).
func (r *Recovery) Forget(node string) {
	for t := range r.since {
		if t.Node == node {
			delete(r.since, t)
		}
	}
}
