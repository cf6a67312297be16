package remediation

import "fmt"

// Mode says what the controller may change.
type Mode string

const (
	// Off: the controller does not run.
	Off Mode = "off"
	// DryRun: faults are reported (events, log, metrics); nothing on the
	// cluster changes: no pod condition, no deletion, no taint.
	DryRun Mode = "dry-run"
	// On: affected pods are marked and deleted, GPUs and nodes quarantined.
	On Mode = "on"
)

// Modes lists the valid modes, for flag help.
var Modes = []Mode{Off, DryRun, On}

// ParseMode reads a --remediation value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, DryRun, On:
		return m, nil
	}
	return "", fmt.Errorf("remediation mode %q is not one of off, dry-run, on", s)
}
