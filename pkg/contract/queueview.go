package contract

import "time"

// QueueView is rota-extender's GET /debug/queue answer, read by
// kubectl-rota: each team's queue and admitted use, and where every queued
// pod stood after the queue controller's last pass.
type QueueView struct {
	// Leader is false on a standby replica, whose controller does not run
	// (its lists are then empty).
	Leader bool            `json:"leader"`
	Teams  []QueueTeam     `json:"teams"`
	Pods   []QueuePosition `json:"pods"`
	// Groups is the quota tree (quota groups), parents before their
	// children; empty without groups.
	Groups []QueueGroup `json:"groups,omitempty"`
}

// QueueGroup is one quota group and what its subtree borrows, from where.
type QueueGroup struct {
	Group  string `json:"group"`
	Parent string `json:"parent,omitempty"`
	// Depth is 0 for a group under the shared pool.
	Depth int `json:"depth"`
	// PoolGPUs is the group's own pool; BorrowedGPUs what its teams use
	// past their guarantees; FromPoolGPUs, FromLentGPUs (its child groups'
	// loans) and AboveGPUs where that comes from; LentGPUs what of its pool
	// others borrow now.
	PoolGPUs     int64 `json:"poolGPUs"`
	BorrowedGPUs int64 `json:"borrowedGPUs"`
	FromPoolGPUs int64 `json:"fromPoolGPUs"`
	FromLentGPUs int64 `json:"fromLentGPUs"`
	AboveGPUs    int64 `json:"aboveGPUs"`
	LentGPUs     int64 `json:"lentGPUs"`
	// BorrowLimitGPUs caps what the subtree takes from above (absent: no
	// limit).
	BorrowLimitGPUs *int64 `json:"borrowLimitGPUs,omitempty"`
}

// QueueTeam is one team's queue and admitted use.
type QueueTeam struct {
	Team string `json:"team"`
	// Group is the team's quota group ("" under the shared pool).
	Group     string  `json:"group,omitempty"`
	Queued    int     `json:"queued"`
	GPUs      int64   `json:"admittedGPUs"`
	MemoryMiB int64   `json:"admittedGPUMemoryMiB"`
	Share     float64 `json:"dominantShare"`
}

// QueuePosition is where one queued pod stands.
type QueuePosition struct {
	Pod      string `json:"pod"`
	Workload string `json:"workload"`
	Team     string `json:"team"`
	Position int    `json:"position"`
	Of       int    `json:"of"`
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	// Waiting is how long it has waited, in seconds.
	Waiting float64 `json:"waitingSeconds"`
	// Reservation says the room held for it, when the queue holds some
	// (domain, held GPUs, what it waits for); ExpectedStart is when the
	// plan expects it to start (absent: not known).
	Reservation   string     `json:"reservation,omitempty"`
	ExpectedStart *time.Time `json:"expectedStart,omitempty"`
	// LatestStart is the latest it may start to end by its declared
	// deadline (absent: none declared); Deadline is "urgent" when it went
	// ahead for it, "missed" when it cannot end by it even if it started
	// now, else empty.
	LatestStart *time.Time `json:"latestStart,omitempty"`
	Deadline    string     `json:"deadline,omitempty"`
}
