package queue

import (
	"math"
	"time"
)

// MoveWindow is the window a move budget counts moves over.
const MoveWindow = time.Hour

// MoveBudget is how many pods the queue may still move now to make room
// for waiting work: share of the running pods per MoveWindow (at least one
// when share is positive), less the moves made in the window before now.
// share 0 or less allows none.
func MoveBudget(recent []time.Time, now time.Time, running int, share float64) int {
	if share <= 0 {
		return 0
	}
	limit := max(1, int(math.Floor(share*float64(running))))
	for _, t := range recent {
		if now.Sub(t) < MoveWindow && !t.After(now) {
			limit--
		}
	}
	return max(0, limit)
}
