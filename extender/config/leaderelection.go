package config

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// LeaderElection configures the active-standby pair (extender/app): the
// replicas elect a leader on a Lease; only the leader serves the verbs and
// writes to the API server, the standby keeps its informers and ledger warm
// and takes over when the lease lapses.
//
// The figures trade failover time against spurious failovers. The Lease
// records renew times to the second, so the other replicas see a renewal
// at most once a second; a killed leader's last visible renewal is 0 to
// about 1 s old, a standby sees it within 1.2 x RetryPeriod and acquires at
// its first try after LeaseDuration: with the defaults (3 s, 2 s, 0.5 s) it
// takes over 2 to about 4.5 s after the kill (measured on the real control
// plane: docs/performance.md, "Faults and load"). The leader stops serving RenewDeadline after
// its last visible renewal, LeaseDuration-RenewDeadline (1 s) before anyone
// may take over; an API server that takes no lease update for about a
// second pauses its verbs (they resume at the next renewal), one that takes
// none for RenewDeadline deposes it. client-go's own callers default to 15,
// 10 and 2 s, for a failover of 15 to 17 s. The cost is one small Lease
// update per RetryPeriod from the leader and one Lease read from a standby.
type LeaderElection struct {
	// Enabled runs the election. Off, this replica serves alone: run only
	// one (the chart refuses extender.replicas > 1 without it), or two
	// ledgers would hand out the same GPUs.
	Enabled bool `json:"enabled"`
	// LeaseDuration is how long a lease lasts after its last renewal; the
	// Lease records whole seconds.
	LeaseDuration time.Duration `json:"leaseDuration"`
	// RenewDeadline is how long the leader keeps serving after its last
	// successful renewal: less than LeaseDuration, so it stops before anyone
	// may take over.
	RenewDeadline time.Duration `json:"renewDeadline"`
	// RetryPeriod is how often the leader renews and a standby tries to
	// acquire.
	RetryPeriod time.Duration `json:"retryPeriod"`
	// Namespace and Name are the Lease's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// PodName and PodNamespace are this replica's own Pod (the downward
	// API's POD_NAME and POD_NAMESPACE): while it leads, the Pod carries
	// contract.Names.LeaderLabel, which the chart's Service selects. Empty
	// outside a pod: no label, and the identity is the host name's.
	PodName      string `json:"podName,omitempty"`
	PodNamespace string `json:"podNamespace,omitempty"`
}

// DefaultLeaderElection is the election Default uses.
func DefaultLeaderElection() LeaderElection {
	return LeaderElection{
		Enabled:       true,
		LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second,
		RetryPeriod:   500 * time.Millisecond,
		Namespace:     "kube-system",
		Name:          "rota-extender",
	}
}

// validate reports every problem of l; flag names in the messages.
func (l LeaderElection) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if l.PodName != "" && l.PodNamespace == "" {
		add("pod-namespace: empty, but pod-name is %q; set both or neither", l.PodName)
	}
	if !l.Enabled {
		return errs
	}
	switch {
	case l.LeaseDuration < time.Second:
		add("leader-elect-lease-duration: %v is below 1s", l.LeaseDuration)
	case l.LeaseDuration%time.Second != 0:
		add("leader-elect-lease-duration: %v is not a whole number of seconds, which is all a Lease records", l.LeaseDuration)
	}
	if l.RenewDeadline <= 0 || l.RenewDeadline >= l.LeaseDuration {
		add("leader-elect-renew-deadline: %v must be positive and shorter than leader-elect-lease-duration %v, so that the leader stops serving before its lease can lapse",
			l.RenewDeadline, l.LeaseDuration)
	}
	// The Lease records renew times to the second, so the other replicas
	// see a renewal at most once a second: the leader would stop serving
	// between two visible renewals with a shorter deadline.
	if l.RetryPeriod <= 0 || l.RenewDeadline < l.RetryPeriod+time.Second {
		add("leader-elect-retry-period: %v must be positive and at most leader-elect-renew-deadline - 1s (%v): the Lease records renewals to the second",
			l.RetryPeriod, l.RenewDeadline-time.Second)
	}
	for _, m := range validation.IsDNS1123Label(l.Namespace) {
		add("leader-elect-resource-namespace: %q: %s", l.Namespace, m)
	}
	for _, m := range validation.IsDNS1123Subdomain(l.Name) {
		add("leader-elect-resource-name: %q: %s", l.Name, m)
	}
	return errs
}
