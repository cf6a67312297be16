package config

import (
	"strings"
	"testing"
	"time"
)

// Leader election's figures must keep the leader's stop before anyone's
// takeover, and fit what a Lease records.
func TestValidateLeaderElection(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*LeaderElection)
		want string // "" : valid
	}{
		{"defaults", func(*LeaderElection) {}, ""},
		{"off ignores the figures", func(l *LeaderElection) { l.Enabled, l.LeaseDuration = false, 0 }, ""},
		{"fractional lease", func(l *LeaderElection) { l.LeaseDuration = 2500 * time.Millisecond }, "not a whole number of seconds"},
		{"renew deadline not below the lease", func(l *LeaderElection) { l.RenewDeadline = l.LeaseDuration }, "shorter than leader-elect-lease-duration"},
		{"retry too close to the deadline", func(l *LeaderElection) { l.RetryPeriod = 1500 * time.Millisecond }, "renewals to the second"},
		{"bad lease name", func(l *LeaderElection) { l.Name = "Rota_Extender" }, "leader-elect-resource-name"},
		{"pod without namespace", func(l *LeaderElection) { l.PodName = "rota-extender-0" }, "pod-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.set(&c.LeaderElection)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want it to say %q", err, tc.want)
			}
		})
	}
}
