package config

import (
	"fmt"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
)

// Queue configures the queue controller (extender/queue).
type Queue struct {
	// Enabled runs the queue controller on the leader. rota-admission gates
	// GPU pods at creation; without the controller they are never admitted.
	Enabled bool `json:"enabled"`
	// Namespace, ConfigMap and ConfigMapKey name the quota configuration
	// (the same ConfigMap rota-admission reads). An empty ConfigMap admits
	// every team without quota.
	Namespace    string `json:"namespace"`
	ConfigMap    string `json:"configMap"`
	ConfigMapKey string `json:"configMapKey"`
	// Interval between admission passes.
	Interval time.Duration `json:"interval"`
	// AdmitConcurrency is how many admitting updates of one pass are in
	// flight at once (1: one after the other, in the queue's order; more:
	// in no set order within the pass, each pod's room already held).
	AdmitConcurrency int `json:"admitConcurrency"`
	// HoldTTL is how long room stays held for an admitted pod that has not
	// bound; after it the pod goes wherever it fits.
	HoldTTL time.Duration `json:"holdTTL"`
	// NarrowCandidates: a single pod that a controller owns (a Job's, a
	// ReplicaSet's) and that has no required node affinity is narrowed at
	// admission to this many nodes, its held node and the next best that
	// fit it (a required node affinity, one metadata.name term each), so
	// that kube-scheduler filters those instead of every node. One still
	// unplaced when its hold lapses is evicted for its controller to
	// recreate, queued. 0 narrows nothing.
	NarrowCandidates int `json:"narrowCandidates"`
	// ConditionInterval and ConditionQPS bound the Queued condition writes
	// (per pod, and cluster-wide).
	ConditionInterval time.Duration `json:"conditionInterval"`
	ConditionQPS      float64       `json:"conditionQPS"`
	// UrgentPriority: queued pods at or above this priority are admitted
	// within quota even without room, so that kube-scheduler preempts for
	// them (0: never).
	UrgentPriority int32 `json:"urgentPriority"`
	// Reclaim evicts borrowed work for a team below its guarantee.
	Reclaim bool `json:"reclaim"`
	// Reserve holds room for queue heads that wait for room (reservations
	// and backfill by declared runtime).
	Reserve Reserve `json:"reserve"`
	// DeadlineLead: inside its team and priority, a queued pod whose latest
	// start (its example.com/deadline less its declared runtime) is at most
	// this far off goes ahead of the others (0: none does).
	DeadlineLead time.Duration `json:"deadlineLead"`
	// FairShareHalfLife is fair share's memory: teams are ordered by their
	// current dominant share plus the mean of their past share, decayed
	// with this half-life (0: current use only). The history is kept in
	// the ConfigMap HistoryConfigMap in Namespace.
	FairShareHalfLife time.Duration `json:"fairShareHalfLife"`
	HistoryConfigMap  string        `json:"historyConfigMap"`
	// Defrag bounds the moves the queue makes for teams whose quota sets
	// defrag: a waiting pod that fits nowhere while free GPUs are
	// fragmented gets room by moving pods that declared themselves movable.
	Defrag Defrag `json:"defrag"`
}

// Defrag bounds defragmentation moves (extender/queue.Defrag).
type Defrag struct {
	// MaxMovedShare bounds the pods moved in any hour, as a share of the
	// running admitted pods (at least one when positive; 0 moves none).
	MaxMovedShare float64 `json:"maxMovedShare"`
	// MaxMoves bounds the pods one plan moves.
	MaxMoves int `json:"maxMoves"`
	// HoldFor is how long the freed room stays held for the waiting pod
	// (room reclaim frees too).
	HoldFor time.Duration `json:"holdFor"`
}

// Reserve configures reservations (pkg/reserve.Policy).
type Reserve struct {
	Enabled bool `json:"enabled"`
	// LargeGPUs: a job of at least this many GPUs is held for as soon as it
	// waits for room; MaxAge: a smaller one once it has waited this long.
	LargeGPUs int64         `json:"largeGPUs"`
	MaxAge    time.Duration `json:"maxAge"`
	// MaxHold bounds a hold whose job has not started; CoolOff is how long
	// the job is then not held for again.
	MaxHold time.Duration `json:"maxHold"`
	CoolOff time.Duration `json:"coolOff"`
	// Max bounds the holds at once.
	Max int `json:"max"`
	// Quota also keeps a large or old head's team quota for it while it
	// waits for quota: later work of its team is admitted only if it ends
	// by the time that quota is expected back (off by default: measured in
	// rota-sim, it lengthens small jobs' waits without shortening the
	// largest gangs').
	Quota bool `json:"quota"`
	// DefaultRuntime estimates the end of a running pod that declares no
	// maximum runtime (0: such a pod never ends, as far as plans go).
	DefaultRuntime time.Duration `json:"defaultRuntime"`
}

// DefaultQueue is the queue controller's default configuration.
func DefaultQueue() Queue {
	return Queue{Enabled: true, Namespace: "rota-system", ConfigMap: "rota-quota", ConfigMapKey: "quota.yaml",
		Interval: time.Second, AdmitConcurrency: 16, HoldTTL: 5 * time.Minute, NarrowCandidates: 3, ConditionInterval: 10 * time.Second, ConditionQPS: 20,
		UrgentPriority: 1000000, Reclaim: true, HistoryConfigMap: "rota-usage-history", DeadlineLead: 30 * time.Minute,
		Reserve: Reserve{Enabled: true, LargeGPUs: 64, MaxAge: 30 * time.Minute, MaxHold: 2 * time.Hour, CoolOff: 30 * time.Minute, Max: 4},
		Defrag:  Defrag{MaxMovedShare: 0.02, MaxMoves: 2, HoldFor: 10 * time.Minute}}
}

func (q Queue) validate() []error {
	var errs []error
	if q.Interval <= 0 {
		errs = append(errs, fmt.Errorf("queue-interval: %v is not positive", q.Interval))
	}
	if q.AdmitConcurrency < 1 || q.AdmitConcurrency > 256 {
		errs = append(errs, fmt.Errorf("queue-admit-concurrency: %d is not between 1 and 256", q.AdmitConcurrency))
	}
	if q.HoldTTL <= 0 {
		errs = append(errs, fmt.Errorf("admission-hold-ttl: %v is not positive", q.HoldTTL))
	}
	if q.NarrowCandidates < 0 || q.NarrowCandidates > contract.MaxNarrowedTo {
		errs = append(errs, fmt.Errorf("queue-narrow-candidates: %d is not between 0 and %d", q.NarrowCandidates, contract.MaxNarrowedTo))
	}
	if q.ConditionInterval <= 0 || q.ConditionQPS <= 0 {
		errs = append(errs, fmt.Errorf("queue-condition-interval and queue-condition-qps must be positive"))
	}
	if r := q.Reserve; r.Enabled && (r.LargeGPUs <= 0 || r.MaxAge <= 0 || r.MaxHold <= 0 || r.CoolOff < 0 || r.Max <= 0 || r.DefaultRuntime < 0) {
		errs = append(errs, fmt.Errorf("reserve: large-gpus, max-age, max-hold and max must be positive, cool-off and default-runtime not negative"))
	}
	if d := q.Defrag; d.MaxMovedShare < 0 || d.MaxMovedShare > 1 || d.MaxMoves < 1 || d.MaxMoves > 8 || d.HoldFor <= 0 {
		errs = append(errs, fmt.Errorf("defrag: max-moved-share must be from 0 to 1, max-moves from 1 to 8, hold positive"))
	}
	if q.DeadlineLead < 0 {
		errs = append(errs, fmt.Errorf("deadline-lead: %v is negative", q.DeadlineLead))
	}
	if q.FairShareHalfLife < 0 || (q.FairShareHalfLife > 0 && (q.HistoryConfigMap == "" || q.Namespace == "")) {
		errs = append(errs, fmt.Errorf("fair-share-half-life: %v is negative, or set without usage-history-config-map and quota-namespace", q.FairShareHalfLife))
	}
	if q.ConfigMap != "" && (q.Namespace == "" || q.ConfigMapKey == "") {
		errs = append(errs, fmt.Errorf("quota-config-map %q needs quota-namespace and quota-config-map-key", q.ConfigMap))
	}
	return errs
}
