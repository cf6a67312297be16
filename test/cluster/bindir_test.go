package cluster

import (
	"strings"
	"testing"
)

func TestBinDirEnvAndMissingBinaries(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(BinDirEnv, dir)
	got, err := BinDir()
	if err != nil || got != dir {
		t.Fatalf("BinDir() = %q, %v; want %q", got, err, dir)
	}
	err = checkBinaries(dir)
	if err == nil || !strings.Contains(err.Error(), "run make k8s-tools (hack/k8s-tools.sh) first") {
		t.Errorf("checkBinaries error = %v", err)
	}
}

func TestBinDirFromRepoRoot(t *testing.T) {
	t.Setenv(BinDirEnv, "")
	got, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got, "/.cache/k8s/bin") {
		t.Errorf("BinDir() = %q, want .../.cache/k8s/bin", got)
	}
}
