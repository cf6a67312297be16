package kueue

import (
	"os"
	"strings"
	"testing"
)

// Version is the one hack/kueue.sh builds (test/tools/versions.env).
func TestKueueVersionPinned(t *testing.T) {
	env, err := os.ReadFile("../tools/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "KUEUE_VERSION="); ok {
			if v != Version {
				t.Errorf("versions.env pins Kueue %s; test/kueue says %s", v, Version)
			}
			return
		}
	}
	t.Error("versions.env pins no KUEUE_VERSION")
}
