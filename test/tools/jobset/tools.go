//go:build tools

// Package tools pins JobSet's controller manager, which the scenario tests
// of JobSets queued suspended run beside the control plane: hack/jobset.sh
// builds it into .cache/jobset/bin, and test/jobset applies its CRDs and
// webhooks from the module cache at the same version.
package tools

import (
	_ "sigs.k8s.io/jobset"
)
