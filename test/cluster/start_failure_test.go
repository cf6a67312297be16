//go:build e2e

package cluster_test

import (
	"strings"
	"testing"

	"github.com/rota-sched/rota/test/cluster"
)

// TestStartReportsAPIServerFailure checks that a component that dies during
// start makes Start fail fast with the end of its log in the error.
func TestStartReportsAPIServerFailure(t *testing.T) {
	c, err := cluster.Start(t.Context(), cluster.Options{Dir: t.TempDir(), APIServerArgs: []string{"--no-such-flag"}})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded with a bad API server flag")
	}
	if !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("error does not explain the failure: %v", err)
	}
}

func TestStartWithoutBinaries(t *testing.T) {
	t.Setenv(cluster.BinDirEnv, t.TempDir())
	_, err := cluster.Start(t.Context(), cluster.Options{})
	if err == nil || !strings.Contains(err.Error(), "run make k8s-tools (hack/k8s-tools.sh) first") {
		t.Errorf("Start error = %v, want the hint to build the binaries", err)
	}
}
