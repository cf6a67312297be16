package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// History is each team's fair-share memory: the exponentially weighted
// mean, over time, of the team's dominant share of the cluster, with
// half-life HalfLife. Fair share orders teams by their current dominant
// share plus this mean, divided by their weight (Input.Past), so a team
// that held the cluster all night yields to the others in the morning,
// and a team that is always busy converges to its weight. HalfLife 0
// keeps no memory: fair share by current use only.
type History struct {
	HalfLife time.Duration
	// At is when Share was last brought up to date.
	At time.Time
	// Share is each team's mean dominant share (0 to 1). A team absent
	// has none.
	Share map[string]float64
}

// historyFloor is the mean below which a team that holds nothing now is
// forgotten, so the history stays as small as the set of active teams.
const historyFloor = 1e-4

// Observe brings h up to now, given that each team held shares[team]
// (its dominant share, unweighted) since h.At: each mean moves toward the
// share held by 1 - 2^(-elapsed/HalfLife). A first observation (zero At)
// or a clock that went back only sets At. It returns a new History; h is
// not changed.
func (h History) Observe(shares map[string]float64, now time.Time) History {
	out := History{HalfLife: h.HalfLife, At: now, Share: make(map[string]float64, len(h.Share))}
	if h.HalfLife <= 0 {
		return out
	}
	if h.At.IsZero() || !now.After(h.At) {
		for t, s := range h.Share {
			out.Share[t] = s
		}
		if !h.At.IsZero() && now.Before(h.At) {
			out.At = h.At
		}
		return out
	}
	alpha := 1 - math.Exp2(-float64(now.Sub(h.At))/float64(h.HalfLife))
	for t, s := range h.Share {
		out.Share[t] = s
	}
	for t := range shares {
		if _, ok := out.Share[t]; !ok {
			out.Share[t] = 0 // a team new to the history starts from none
		}
	}
	for t := range out.Share {
		held := clamp01(shares[t])
		m := out.Share[t] + alpha*(held-out.Share[t])
		if m < historyFloor && held == 0 {
			delete(out.Share, t)
			continue
		}
		out.Share[t] = clamp01(m)
	}
	return out
}

func clamp01(v float64) float64 {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return min(v, 1)
}

// DominantShare is use's largest fraction of c among GPUs, GPU memory and
// CPU (0 for a resource the cluster has none of).
func DominantShare(u Use, c Capacity) float64 {
	s := 0.0
	frac := func(v, c int64) {
		if c > 0 {
			s = max(s, float64(v)/float64(c))
		}
	}
	frac(u.GPUs, c.GPUs)
	frac(u.MemoryMiB, c.MemoryMiB)
	frac(u.CPUMilli, c.CPUMilli)
	return s
}

// HistoryVersion is the version of the stored history document.
const HistoryVersion = "v1"

// historyDoc is the stored form of a History (MarshalHistory).
type historyDoc struct {
	Version string             `json:"version"`
	At      time.Time          `json:"at"`
	Teams   map[string]float64 `json:"teams"`
}

// maxHistoryTeams and maxHistoryBytes bound a stored history.
const (
	maxHistoryTeams = 100000
	maxHistoryBytes = 4 << 20
)

// MarshalHistory is h's stored form: a JSON document with its version, its
// time and each team's mean share (the half-life is configuration, not
// state).
func MarshalHistory(h History) ([]byte, error) {
	return json.Marshal(historyDoc{Version: HistoryVersion, At: h.At.UTC(), Teams: h.Share})
}

// ParseHistory reads a stored history, with halfLife as configured now.
// A document of another version, a share outside 0 to 1, a team name that
// is empty or longer than 253 characters, or a document too large is an
// error naming it; nothing of such a document is used.
func ParseHistory(data []byte, halfLife time.Duration) (History, error) {
	if len(data) > maxHistoryBytes {
		return History{}, fmt.Errorf("usage history: %d bytes, more than %d", len(data), maxHistoryBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d historyDoc
	if err := dec.Decode(&d); err != nil {
		return History{}, fmt.Errorf("usage history: %w", err)
	}
	if d.Version != HistoryVersion {
		return History{}, fmt.Errorf("usage history: version %q, want %q", d.Version, HistoryVersion)
	}
	if len(d.Teams) > maxHistoryTeams {
		return History{}, fmt.Errorf("usage history: %d teams, more than %d", len(d.Teams), maxHistoryTeams)
	}
	for t, s := range d.Teams {
		if t == "" || len(t) > 253 {
			return History{}, fmt.Errorf("usage history: team name %.40q is empty or longer than 253 characters", t)
		}
		if math.IsNaN(s) || s < 0 || s > 1 {
			return History{}, fmt.Errorf("usage history: team %q has share %v, not from 0 to 1", t, s)
		}
	}
	if d.Teams == nil {
		d.Teams = map[string]float64{}
	}
	return History{HalfLife: halfLife, At: d.At, Share: d.Teams}, nil
}
