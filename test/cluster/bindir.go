package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that overrides BinDir.
const BinDirEnv = "ROTA_K8S_BIN"

const mainModule = "github.com/rota-sched/rota"

// Binary names, as hack/k8s-tools.sh writes them.
const (
	etcdBin      = "etcd"
	apiServerBin = "kube-apiserver"
	schedulerBin = "kube-scheduler"
)

// BinDir returns the folder that holds the control-plane binaries: $ROTA_K8S_BIN
// when set, else .cache/k8s/bin under the repository root (found by walking up
// from the working directory to the go.mod of github.com/rota-sched/rota).
// It does not check that the binaries are there; Start does.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("locating .cache/k8s/bin: %w (or set %s)", err, BinDirEnv)
	}
	return filepath.Join(root, ".cache", "k8s", "bin"), nil
}

// checkBinaries reports the first control-plane binary missing from dir.
func checkBinaries(dir string) error {
	for _, name := range []string{etcdBin, apiServerBin, schedulerBin} {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
			continue
		}
		return fmt.Errorf("%s not found in %s: run make k8s-tools (hack/k8s-tools.sh) first", name, dir)
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if mod, err := moduleName(filepath.Join(dir, "go.mod")); err == nil && mod == mainModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + mainModule + " above the working directory")
		}
		dir = parent
	}
}

func moduleName(goMod string) (string, error) {
	f, err := os.Open(goMod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", goMod)
}
