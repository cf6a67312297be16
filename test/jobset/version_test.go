package jobset

import (
	"os"
	"strings"
	"testing"
)

// Version is the one hack/jobset.sh builds: test/tools/versions.env and
// the tools module's go.mod pin it.
func TestJobSetVersionPinned(t *testing.T) {
	env, err := os.ReadFile("../tools/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(env), "\nJOBSET_VERSION="+Version+"\n") {
		t.Errorf("versions.env does not pin JOBSET_VERSION=%s", Version)
	}
	mod, err := os.ReadFile("../tools/jobset/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), "sigs.k8s.io/jobset "+Version+"\n") {
		t.Errorf("test/tools/jobset/go.mod does not require sigs.k8s.io/jobset %s", Version)
	}
}
