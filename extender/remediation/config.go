package remediation

import (
	"errors"
	"fmt"
	"time"

	"github.com/rota-sched/rota/pkg/remediation"
)

// Config is the controller's configuration (flags in cmd/rota-extender).
type Config struct {
	// Mode: off, dry-run or on.
	Mode remediation.Mode `json:"mode"`
	// Interval is how often the controller reconciles.
	Interval time.Duration `json:"interval"`
	// HeartbeatTimeout: a node whose Lease was not renewed for this long
	// has stopped reporting (nodes without a Lease are judged by Ready).
	HeartbeatTimeout time.Duration `json:"heartbeatTimeout"`
	// GracePeriod of a deletion when the pod asks for none; the pod's
	// checkpoint-grace annotation, up to MaxCheckpointGrace, replaces it.
	GracePeriod        time.Duration `json:"gracePeriod"`
	MaxCheckpointGrace time.Duration `json:"maxCheckpointGrace"`
	// Evictions (workloads: a pod alone or a whole gang) per minute and
	// burst, cluster-wide and per faulty node.
	EvictionsPerMinute     float64 `json:"evictionsPerMinute"`
	EvictionBurst          int     `json:"evictionBurst"`
	NodeEvictionsPerMinute float64 `json:"nodeEvictionsPerMinute"`
	NodeEvictionBurst      int     `json:"nodeEvictionBurst"`
	// QuarantineThreshold failures within QuarantineWindow quarantine a GPU
	// or node (0 disables quarantine).
	QuarantineThreshold int           `json:"quarantineThreshold"`
	QuarantineWindow    time.Duration `json:"quarantineWindow"`
	// RecoveryQuiet is how long a recovered GPU or node stays healthy
	// before it takes new work.
	RecoveryQuiet time.Duration `json:"recoveryQuiet"`
}

// Default returns the defaults: off; 40 s heartbeat timeout (the node
// lifecycle controller's grace); 30 s deletion grace; 20 workloads per
// minute cluster-wide, 10 per node; 5 failures in 10 minutes quarantine;
// 1 minute recovery quiet period (on top of the device plugin's own).
func Default() Config {
	return Config{
		Mode:                   remediation.Off,
		Interval:               time.Second,
		HeartbeatTimeout:       40 * time.Second,
		GracePeriod:            30 * time.Second,
		MaxCheckpointGrace:     10 * time.Minute,
		EvictionsPerMinute:     20,
		EvictionBurst:          20,
		NodeEvictionsPerMinute: 10,
		NodeEvictionBurst:      10,
		QuarantineThreshold:    5,
		QuarantineWindow:       10 * time.Minute,
		RecoveryQuiet:          time.Minute,
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, err := remediation.ParseMode(string(c.Mode)); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"remediation-interval", c.Interval}, {"node-heartbeat-timeout", c.HeartbeatTimeout},
		{"quarantine-window", c.QuarantineWindow}} {
		if d.v <= 0 {
			add("%s: %s is not positive", d.name, d.v)
		}
	}
	if c.GracePeriod < 0 || c.MaxCheckpointGrace < 0 || c.RecoveryQuiet < 0 {
		add("eviction-grace-period, max-checkpoint-grace and recovery-quiet must not be negative")
	}
	if c.EvictionsPerMinute <= 0 || c.NodeEvictionsPerMinute <= 0 || c.EvictionBurst < 1 || c.NodeEvictionBurst < 1 {
		add("eviction rates must be positive and bursts at least 1")
	}
	if c.QuarantineThreshold < 0 {
		add("quarantine-threshold: %d is negative", c.QuarantineThreshold)
	}
	return errors.Join(errs...)
}
