package config

import (
	"fmt"
	"time"
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
	// HoldTTL is how long room stays held for an admitted pod that has not
	// bound; after it the pod goes wherever it fits.
	HoldTTL time.Duration `json:"holdTTL"`
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
}

// DefaultQueue is the queue controller's default configuration.
func DefaultQueue() Queue {
	return Queue{Enabled: true, Namespace: "rota-system", ConfigMap: "rota-quota", ConfigMapKey: "quota.yaml",
		Interval: time.Second, HoldTTL: 5 * time.Minute, ConditionInterval: 10 * time.Second, ConditionQPS: 20,
		UrgentPriority: 1000000, Reclaim: true}
}

func (q Queue) validate() []error {
	var errs []error
	if q.Interval <= 0 {
		errs = append(errs, fmt.Errorf("queue-interval: %v is not positive", q.Interval))
	}
	if q.HoldTTL <= 0 {
		errs = append(errs, fmt.Errorf("admission-hold-ttl: %v is not positive", q.HoldTTL))
	}
	if q.ConditionInterval <= 0 || q.ConditionQPS <= 0 {
		errs = append(errs, fmt.Errorf("queue-condition-interval and queue-condition-qps must be positive"))
	}
	if q.ConfigMap != "" && (q.Namespace == "" || q.ConfigMapKey == "") {
		errs = append(errs, fmt.Errorf("quota-config-map %q needs quota-namespace and quota-config-map-key", q.ConfigMap))
	}
	return errs
}
