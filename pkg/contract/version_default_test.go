//go:build !rotanext

package contract

import "testing"

// The release build writes v1 exactly as Rota wrote it before the version
// rule, signatures included (the golden signatures were computed by the
// code before it), so a reader from before the rule reads it.
func TestReleaseBuildWrites(t *testing.T) {
	if Version != "v1" || NextVersion != "v2" {
		t.Fatalf("Version %s, NextVersion %s: update writtenByBuild", Version, NextVersion)
	}
	checkWrites(t, writtenByBuild["release"])
}
