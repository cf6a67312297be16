// Package mps runs one CUDA MPS control daemon (nvidia-cuda-mps-control -d)
// per GPU that holds memory shares, so a share's
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT is enforced by an MPS server instead of
// being an unread environment variable.
//
// Each daemon gets its own folders under Config.Root: <root>/<uuid>/pipe
// (CUDA_MPS_PIPE_DIRECTORY, handed to share containers as a mount) and
// <root>/<uuid>/log (CUDA_MPS_LOG_DIRECTORY), and sees exactly its GPU
// (CUDA_VISIBLE_DEVICES=<uuid>). The daemon writes its PID to
// nvidia-cuda-mps-control.pid in the pipe folder; Run checks that PID every
// CheckInterval and starts a dead daemon again after an apimachinery
// wait.Backoff delay. Release stops a GPU's daemon ("quit" on its control
// pipe, SIGKILL after StopTimeout) before a whole-GPU pod gets the GPU.
//
// Where configured, the GPU's compute mode is set to EXCLUSIVE_PROCESS while
// its daemon runs (only the MPS server, one process, may then hold a CUDA
// context: a process that unsets the MPS variables gets no context) and put
// back to DEFAULT when it stops.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/pkg/contract"
)

// PIDFile is the file the control daemon writes its PID to, in its pipe
// folder.
const PIDFile = "nvidia-cuda-mps-control.pid"

// DefaultBinary is the control daemon's name, looked up in $PATH.
const DefaultBinary = "nvidia-cuda-mps-control"

// Config configures the daemons.
type Config struct {
	// Binary is nvidia-cuda-mps-control: a path, or a name looked up in $PATH.
	Binary string
	// Root is the host folder holding <uuid>/pipe and <uuid>/log. The device
	// plugin must see it at the same path as the host (hostPath mount), since
	// the kubelet mounts the host path into containers.
	Root string
	// ContainerPipeDir is where a share container sees its GPU's pipe folder
	// (its CUDA_MPS_PIPE_DIRECTORY).
	ContainerPipeDir string
	// ShmDir, when set, is a host folder mounted at /dev/shm in share
	// containers; the plugin's own /dev/shm must be the same folder (the
	// chart mounts it), so the MPS server and its clients share memory
	// segments across the containers' IPC namespaces.
	ShmDir string
	// ActiveThreadPercentage, 1..100, is set as the daemon's default
	// (set_default_active_thread_percentage) and in share containers
	// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); 0 leaves both unset.
	ActiveThreadPercentage int
	// StartTimeout bounds the wait for a started daemon's PID file.
	StartTimeout time.Duration
	// StopTimeout bounds the wait for a daemon told to quit.
	StopTimeout time.Duration
	// CheckInterval is how often Run checks that wanted daemons live.
	CheckInterval time.Duration
	// Backoff spaces restarts of a daemon that keeps dying.
	Backoff wait.Backoff
}

// Defaults fills the zero fields of c.
func (c Config) Defaults() Config {
	if c.Binary == "" {
		c.Binary = DefaultBinary
	}
	if c.ContainerPipeDir == "" {
		c.ContainerPipeDir = "/run/nvidia-mps"
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 10 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = time.Second
	}
	if c.Backoff.Duration <= 0 {
		c.Backoff = wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt32}
	}
	return c
}

// ComputeMode sets a GPU's compute mode: exclusive true is EXCLUSIVE_PROCESS,
// false is DEFAULT.
type ComputeMode func(uuid string, exclusive bool) error

// Daemons manages the control daemons of a node's GPUs. It is safe for
// concurrent use.
type Daemons struct {
	cfg     Config
	bin     string // resolved binary; "" when unavailable
	reason  string // why unavailable
	mode    ComputeMode
	metrics *metrics.Metrics

	mu   sync.Mutex
	gpus map[string]*daemon
}

type daemon struct {
	uuid    string
	wanted  bool
	pid     int
	started time.Time
	backoff wait.Backoff
	retryAt time.Time
	lastErr error
}

// uuidRE is what a GPU UUID may contain: it names folders.
var uuidRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,127}$`)

// New resolves cfg.Binary; when it cannot be run, the Daemons say so in
// Status and Ensure refuses. mode may be nil (compute mode left alone).
func New(cfg Config, mode ComputeMode, m *metrics.Metrics) (*Daemons, error) {
	cfg = cfg.Defaults()
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("mps root %q is not an absolute path", cfg.Root)
	}
	if !filepath.IsAbs(cfg.ContainerPipeDir) {
		return nil, fmt.Errorf("mps container pipe folder %q is not an absolute path", cfg.ContainerPipeDir)
	}
	if cfg.ShmDir != "" && !filepath.IsAbs(cfg.ShmDir) {
		return nil, fmt.Errorf("mps shm folder %q is not an absolute path", cfg.ShmDir)
	}
	if p := cfg.ActiveThreadPercentage; p < 0 || p > 100 {
		return nil, fmt.Errorf("mps active thread percentage %d is not in 0..100", p)
	}
	d := &Daemons{cfg: cfg, mode: mode, metrics: m, gpus: map[string]*daemon{}}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		d.reason = fmt.Sprintf("%s not found: %v", cfg.Binary, err)
	} else {
		d.bin = bin
	}
	return d, nil
}

// Status is the node's MPS state for the topology document.
func (d *Daemons) Status() contract.TopologyMPS {
	if d.bin == "" {
		return contract.TopologyMPS{Available: false, Reason: d.reason}
	}
	return contract.TopologyMPS{Available: true}
}

// Available reports whether daemons can be started.
func (d *Daemons) Available() bool { return d.bin != "" }

// PipeDir is the host pipe folder of the GPU's daemon.
func (d *Daemons) PipeDir(uuid string) string { return filepath.Join(d.cfg.Root, uuid, "pipe") }

// LogDir is the host log folder of the GPU's daemon.
func (d *Daemons) LogDir(uuid string) string { return filepath.Join(d.cfg.Root, uuid, "log") }

// Container is what a memory-share container on the GPU gets: the pipe
// folder (and /dev/shm when configured) as mounts, CUDA_MPS_PIPE_DIRECTORY
// and, when configured, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
func (d *Daemons) Container(uuid string) ([]*pluginapi.Mount, map[string]string) {
	mounts := []*pluginapi.Mount{{ContainerPath: d.cfg.ContainerPipeDir, HostPath: d.PipeDir(uuid)}}
	if d.cfg.ShmDir != "" {
		mounts = append(mounts, &pluginapi.Mount{ContainerPath: "/dev/shm", HostPath: d.cfg.ShmDir})
	}
	env := map[string]string{"CUDA_MPS_PIPE_DIRECTORY": d.cfg.ContainerPipeDir}
	if p := d.cfg.ActiveThreadPercentage; p > 0 {
		env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(p)
	}
	return mounts, env
}

// Running lists the GPUs whose daemon is wanted, with its PID (0 while down).
func (d *Daemons) Running() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for u, g := range d.gpus {
		if g.wanted {
			out[u] = g.pid
		}
	}
	return out
}

// Ensure makes the GPU's daemon wanted and, when it is not running, starts it
// and waits for its PID file. A daemon left by an earlier plugin process
// (its PID file names a live process) is adopted.
func (d *Daemons) Ensure(ctx context.Context, uuid string) error {
	if !uuidRE.MatchString(uuid) {
		return fmt.Errorf("GPU UUID %q cannot name an MPS folder", uuid)
	}
	if d.bin == "" {
		return fmt.Errorf("MPS is not available on this node: %s", d.reason)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gpus[uuid]
	if g == nil {
		g = &daemon{uuid: uuid, backoff: d.cfg.Backoff}
		d.gpus[uuid] = g
	}
	g.wanted = true
	if g.pid != 0 && alive(g.pid) {
		return nil
	}
	if pid := d.readPID(uuid); pid != 0 && alive(pid) {
		klog.FromContext(ctx).Info("Adopted a running MPS control daemon", "gpu", uuid, "pid", pid)
		g.pid, g.started = pid, time.Now()
		d.metrics.MPSDaemon(uuid, true)
		return nil
	}
	return d.startLocked(ctx, g)
}

// Release stops the GPU's daemon (a whole-GPU pod is getting the GPU) and
// puts its compute mode back to DEFAULT.
func (d *Daemons) Release(ctx context.Context, uuid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.gpus[uuid]
	if g == nil || !g.wanted {
		return nil
	}
	return d.stopLocked(ctx, g)
}

// Run restarts wanted daemons that died until ctx is done, then stops every
// daemon.
func (d *Daemons) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(d.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StopTimeout+time.Second)
			d.mu.Lock()
			for _, g := range d.gpus {
				if g.wanted {
					if err := d.stopLocked(stop, g); err != nil {
						logger.Error(err, "Stopping the MPS control daemon", "gpu", g.uuid)
					}
				}
			}
			d.mu.Unlock()
			cancel()
			return
		case <-tick.C:
			d.Check(ctx)
		}
	}
}

// Check looks at every wanted daemon once and starts the dead ones whose
// backoff delay has passed. Run calls it every CheckInterval.
func (d *Daemons) Check(ctx context.Context) {
	logger := klog.FromContext(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	uuids := make([]string, 0, len(d.gpus))
	for u := range d.gpus {
		uuids = append(uuids, u)
	}
	slices.Sort(uuids)
	for _, u := range uuids {
		g := d.gpus[u]
		if !g.wanted {
			continue
		}
		if g.pid != 0 {
			if alive(g.pid) {
				if now.Sub(g.started) > d.cfg.Backoff.Cap {
					g.backoff = d.cfg.Backoff // it stayed up: the next death restarts at once
				}
				continue
			}
			logger.Error(nil, "MPS control daemon died; starting it again", "gpu", u, "pid", g.pid,
				"upFor", now.Sub(g.started).Round(time.Millisecond))
			d.metrics.MPSDaemon(u, false)
			g.pid = 0
			d.metrics.MPSRestart(u)
		}
		if now.Before(g.retryAt) {
			continue
		}
		if err := d.startLocked(ctx, g); err != nil {
			g.retryAt = now.Add(g.backoff.Step())
			logger.Error(err, "Starting the MPS control daemon failed; retrying", "gpu", u, "retryAt", g.retryAt)
		}
	}
}

// startLocked starts the daemon of g and waits for its PID.
func (d *Daemons) startLocked(ctx context.Context, g *daemon) error {
	logger := klog.FromContext(ctx)
	pipe, logs := d.PipeDir(g.uuid), d.LogDir(g.uuid)
	for _, dir := range []string{pipe, logs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS folder for GPU %s: %w", g.uuid, err)
		}
	}
	// Clients of any user must reach the pipes (one MPS server per user ID).
	if err := os.Chmod(pipe, 0o755); err != nil {
		return fmt.Errorf("MPS pipe folder for GPU %s: %w", g.uuid, err)
	}
	_ = os.Remove(filepath.Join(pipe, PIDFile))
	if d.mode != nil {
		if err := d.mode(g.uuid, true); err != nil {
			return fmt.Errorf("set GPU %s to EXCLUSIVE_PROCESS before starting MPS: %w", g.uuid, err)
		}
	}
	// The output goes to a file, not a pipe: the daemonized child may keep
	// inherited descriptors open, and Wait would wait for a pipe's end.
	outPath := filepath.Join(logs, "rota-start.log")
	outFile, err := os.Create(outPath)
	if err != nil {
		return fmt.Errorf("MPS start log for GPU %s: %w", g.uuid, err)
	}
	cmd := exec.CommandContext(ctx, d.bin, "-d")
	cmd.Env = d.env(g.uuid)
	cmd.Stdout, cmd.Stderr = outFile, outFile
	err = cmd.Run()
	outFile.Close()
	if err != nil {
		out, _ := os.ReadFile(outPath)
		g.lastErr = fmt.Errorf("%s -d for GPU %s: %w: %s", d.bin, g.uuid, err, bytes.TrimSpace(out))
		return g.lastErr
	}
	var pid int
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, d.cfg.StartTimeout, true, func(context.Context) (bool, error) {
		pid = d.readPID(g.uuid)
		return pid != 0 && alive(pid), nil
	})
	if err != nil {
		g.lastErr = fmt.Errorf("MPS control daemon for GPU %s wrote no live PID to %s within %s", g.uuid,
			filepath.Join(pipe, PIDFile), d.cfg.StartTimeout)
		return g.lastErr
	}
	g.pid, g.started, g.lastErr = pid, time.Now(), nil
	if p := d.cfg.ActiveThreadPercentage; p > 0 {
		if out, err := d.controlLocked(ctx, g.uuid, "set_default_active_thread_percentage "+strconv.Itoa(p)); err != nil {
			logger.Error(err, "Setting the MPS default active thread percentage failed", "gpu", g.uuid, "output", out)
		}
	}
	d.metrics.MPSDaemon(g.uuid, true)
	logger.Info("MPS control daemon running", "gpu", g.uuid, "pid", pid, "pipeDir", pipe)
	return nil
}

// stopLocked tells the daemon of g to quit, kills it after StopTimeout and
// puts the compute mode back.
func (d *Daemons) stopLocked(ctx context.Context, g *daemon) error {
	logger := klog.FromContext(ctx)
	g.wanted = false
	pid := g.pid
	g.pid = 0
	if pid == 0 {
		pid = d.readPID(g.uuid)
	}
	var errs []error
	if pid != 0 && alive(pid) {
		if out, err := d.controlLocked(ctx, g.uuid, "quit"); err != nil {
			logger.Error(err, "MPS quit failed; killing the daemon", "gpu", g.uuid, "output", out)
		}
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, d.cfg.StopTimeout, true, func(context.Context) (bool, error) {
			return !alive(pid), nil
		})
		if err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			logger.Info("MPS control daemon did not quit in time; killed", "gpu", g.uuid, "pid", pid)
		}
	}
	d.metrics.MPSDaemon(g.uuid, false)
	if d.mode != nil {
		if err := d.mode(g.uuid, false); err != nil {
			errs = append(errs, fmt.Errorf("set GPU %s back to DEFAULT compute mode: %w", g.uuid, err))
		}
	}
	logger.Info("MPS control daemon stopped", "gpu", g.uuid, "pid", pid)
	return errors.Join(errs...)
}

// controlLocked sends one command to the GPU's daemon (the control program
// without -d reads commands on stdin).
func (d *Daemons) controlLocked(ctx context.Context, uuid, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.StopTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin)
	cmd.Env = d.env(uuid)
	cmd.Stdin = strings.NewReader(command + "\n")
	out, err := cmd.CombinedOutput()
	return string(bytes.TrimSpace(out)), err
}

// env is the daemon's environment: the plugin's own without CUDA_* (a
// CUDA_VISIBLE_DEVICES of the plugin's must not leak in), plus the GPU and
// its folders.
func (d *Daemons) env(uuid string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUDA_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"CUDA_VISIBLE_DEVICES="+uuid,
		"CUDA_MPS_PIPE_DIRECTORY="+d.PipeDir(uuid),
		"CUDA_MPS_LOG_DIRECTORY="+d.LogDir(uuid))
}

// readPID reads the GPU's PID file; 0 when absent or unreadable.
func (d *Daemons) readPID(uuid string) int {
	b, err := os.ReadFile(filepath.Join(d.PipeDir(uuid), PIDFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// alive reports whether pid is a process that has not exited. A zombie
// (exited, not yet reaped: the daemonized control process is reparented,
// possibly to a parent that does not reap) counts as dead, and is reaped
// when it is this process's child.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	switch b[i+2] {
	case 'Z', 'X', 'x':
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		return false
	}
	return true
}
