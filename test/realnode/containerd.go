package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rota-sched/rota/test/cluster"
)

// containerdConfig is containerd 1.6's configuration (version 2) with
// every path in the node's folder: root, state, sockets, runc's state and
// the CNI configuration. restrict_oom_score_adj: the tests run as root but
// without CAP_SYS_RESOURCE, and runc fails to lower a container's
// oom_score_adj below its own ("can't get final child's PID from pipe")
// unless containerd caps the value first.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = %[7]q
    SystemdCgroup = false
`

// containerd2Config is containerd 2.x's configuration (version 3), for
// the DRA scenario, with the same choices as containerdConfig, and CDI
// specs read from the node's own folder only.
const containerd2Config = `version = 3
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %[4]q
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = [%[8]q]
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[5]q]
    conf_dir = %[6]q
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    Root = %[7]q
    SystemdCgroup = false
`

// containerd2Dir is the folder of hack/containerd.sh's containerd 2.x and
// its runc shim.
func containerd2Dir() (string, error) {
	dir := os.Getenv("ROTA_CONTAINERD_BIN")
	if dir == "" {
		bin, err := cluster.BinDir() // <repo>/.cache/k8s/bin
		if err != nil {
			return "", err
		}
		dir = filepath.Join(filepath.Dir(filepath.Dir(bin)), "containerd", "bin")
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2"} {
		if !executable(filepath.Join(dir, b)) {
			return "", fmt.Errorf("%s not found in %s: run hack/containerd.sh (make containerd)", b, dir)
		}
	}
	return dir, nil
}

// loopbackCNI is the only network configuration: it lets containerd report
// the pod network ready (so the Node is Ready). The tests run hostNetwork
// pods only, which no CNI plugin touches.
const loopbackCNI = `{"cniVersion": "0.4.0", "name": "rota-realnode", "plugins": [{"type": "loopback"}]}`

// cniBinDirs are where distributions install the CNI plugins.
var cniBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// containerd is a containerd daemon with its state in one folder.
type containerd struct {
	dir    string
	socket string
	proc   *cluster.Process
}

// newContainerd prepares the host's containerd 1.6, or with v2 set the
// containerd 2.x in that folder, reading CDI specs from cdiDir.
func newContainerd(dir, v2, cdiDir string) (*containerd, error) {
	cniBin := ""
	for _, d := range cniBinDirs {
		if _, err := os.Stat(filepath.Join(d, "loopback")); err == nil {
			cniBin = d
			break
		}
	}
	if cniBin == "" {
		return nil, fmt.Errorf("no CNI loopback plugin in %s: %w", strings.Join(cniBinDirs, " or "), errMissingDeps)
	}
	c := &containerd{dir: dir, socket: filepath.Join(dir, "containerd.sock")}
	cniConf := filepath.Join(dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-loopback.conflist"), []byte(loopbackCNI), 0o644); err != nil {
		return nil, err
	}
	tmpl, bin := containerdConfig, "containerd"
	if v2 != "" {
		tmpl, bin = containerd2Config, filepath.Join(v2, "containerd")
		if err := os.MkdirAll(cdiDir, 0o755); err != nil {
			return nil, err
		}
	}
	args := []any{filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.socket,
		PauseImage, cniBin, cniConf, filepath.Join(dir, "runc")}
	if v2 != "" {
		args = append(args, cdiDir)
	}
	cfg := fmt.Sprintf(tmpl, args...)
	cfgFile := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	c.proc = newProcess("containerd", bin, filepath.Dir(dir), []string{"--config", cfgFile})
	if v2 != "" {
		// containerd 2 finds its runc shim on $PATH.
		c.proc.Env = []string{"PATH=" + v2 + string(os.PathListSeparator) + os.Getenv("PATH")}
	}
	return c, nil
}

// start starts containerd and waits until it answers.
func (c *containerd) start(ctx context.Context) error {
	if err := c.proc.Start(); err != nil {
		return err
	}
	return waitUntil(ctx, 30*time.Second, "containerd to answer", c.proc, func() (bool, string) {
		out, err := c.ctr(ctx, "version")
		if err != nil {
			return false, string(out)
		}
		return true, ""
	})
}

// ctr runs ctr against this containerd in the kubelet's namespace (k8s.io).
func (c *containerd) ctr(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.socket, "--namespace", "k8s.io"}, args...)...)
	return cmd.CombinedOutput()
}

// importImages imports an image archive.
func (c *containerd) importImages(ctx context.Context, archive string) error {
	if out, err := c.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("ctr images import: %w\n%s", err, out)
	}
	return nil
}

// shimPIDs returns the containerd-shim processes serving the containerd at
// socket (their command line names it). Shims outlive containerd by design,
// so stopping containerd leaves them running.
func shimPIDs(socket string) []int {
	if socket == "" {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// killPIDs sends SIGKILL to each pid and waits up to 10s for them to go.
func killPIDs(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for {
			if err := syscall.Kill(pid, 0); err != nil {
				break
			}
			// A zombie whose parent is gone is reaped by init; one whose
			// parent is us is reaped by the process's Wait.
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d still running 10s after SIGKILL", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
