//go:build e2e

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/deviceplugin/mps"
)

// mpsStandinPackage is deviceplugin/mps/mpsfake as a program: the
// nvidia-cuda-mps-control stand-in the device plugin runs here.
const mpsStandinPackage = "github.com/rota-sched/rota/test/realnode/cmd/mps-standin"

// TestMPSDaemonLifecycle runs rota-device-plugin with --mps and the
// nvidia-cuda-mps-control stand-in (cmd/mps-standin, built into a folder of
// the test's that also holds --mps-root) on the real node:
//   - a 20 GiB share's Allocate starts its GPU's daemon: a live process of
//     the stand-in binary, started with that GPU alone visible and its pipe
//     folder, counted up in rota_device_plugin_mps_daemon_up;
//   - the share's container sees the daemon's pipe folder, mounted where
//     --mps-container-pipe-dir says: the control socket and the PID file
//     the daemon wrote, with the daemon's PID in it;
//   - its environment: CUDA_MPS_PIPE_DIRECTORY that folder,
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=20480M,
//     CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as configured (and the daemon got
//     set_default_active_thread_percentage on its control pipe);
//   - kill -9 of the daemon: the plugin starts it again (a new PID, which
//     the running container reads in its mounted folder, a control socket
//     that answers), logs the death and counts it in
//     rota_device_plugin_mps_daemon_restarts_total;
//   - a whole-GPU pod beside it gets another GPU, no CUDA_MPS_* variable
//     and no pipe folder, and the share's daemon stays up;
//   - stopping the plugin (SIGTERM) stops the daemon ("quit").
func TestMPSDaemonLifecycle(t *testing.T) {
	const (
		units         = 20 // GiB
		containerPipe = "/run/rota-mps-pipe"
		threads       = 40
	)
	began := time.Now()
	dir, root := mpsFolder(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := buildMPSStandin(ctx, t, dir)
	t.Logf("MPS stand-in built: %s (%s)", bin, time.Since(began).Round(time.Millisecond))

	e := StartT(t, Options{DevicePluginArgs: []string{
		"--mps", "--mps-binary=" + bin, "--mps-root=" + root,
		"--mps-container-pipe-dir=" + containerPipe, "--mps-active-thread-percentage=" + strconv.Itoa(threads),
	}})
	const ns = "mps"
	if err := e.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer deleteAll(ctx, t, e, ns)

	// The share: its container lists its pipe folder as it changes.
	share := e.Pod(ns, "share", Request{MemoryUnits: units}, Request{})
	share.Spec.Containers[0].Command = []string{"/" + imageBinary, "env", containerPipe}
	if _, err := e.Client.CoreV1().Pods(ns).Create(ctx, share, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := e.WaitRunning(ctx, ns, "share")
	if err != nil {
		t.Fatal(err)
	}
	uuid := mustAssignment(t, e, pod).GPUs[0].UUID
	pipe, logs := filepath.Join(root, uuid, "pipe"), filepath.Join(root, uuid, "log")

	// The daemon runs: the stand-in binary, for this GPU alone.
	pid := daemonPID(t, pipe)
	if pid == 0 {
		t.Fatalf("no live MPS daemon for GPU %s of the share: no PID file with a live PID in %s", uuid, pipe)
	}
	checkDaemonProcess(t, pid, bin, map[string]string{
		"CUDA_VISIBLE_DEVICES": uuid, "CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": logs,
	})
	wantMetric(ctx, t, e, "rota_device_plugin_mps_daemon_up", uuid, 1)
	t.Logf("share on GPU %s; its MPS daemon runs as PID %d", uuid, pid)

	// The share's environment.
	e.checkEnv(ctx, t, ns, "share", map[string]string{
		"NVIDIA_VISIBLE_DEVICES":            uuid,
		"CUDA_MPS_PIPE_DIRECTORY":           containerPipe,
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  fmt.Sprintf("0=%dM", units*1024),
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": strconv.Itoa(threads),
	})

	// The pipe folder is mounted: the container reads the daemon's socket
	// and its PID.
	listing := e.waitListing(ctx, t, ns, "share", containerPipe, servedBy(pid))
	t.Logf("the share's container sees %s: %s", containerPipe, listing)
	setThreads := "command set_default_active_thread_percentage " + strconv.Itoa(threads)
	wantControlLog(t, logs, map[string]int{"start ": 1, setThreads: 1})

	// kill -9: the plugin starts the daemon again.
	killedAt := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	var restarted int
	if err := waitUntil(ctx, 30*time.Second, "the MPS daemon of "+uuid+" started again", e.plugin, func() (bool, string) {
		restarted = daemonPID(t, pipe)
		return restarted != 0 && restarted != pid, fmt.Sprintf("PID file names %d", restarted)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("daemon PID %d killed; PID %d serves the pipe folder %s later", pid, restarted,
		time.Since(killedAt).Round(time.Millisecond))
	checkDaemonProcess(t, restarted, bin, map[string]string{"CUDA_VISIBLE_DEVICES": uuid, "CUDA_MPS_PIPE_DIRECTORY": pipe})
	wantMetric(ctx, t, e, "rota_device_plugin_mps_daemon_restarts_total", uuid, 1)
	wantMetric(ctx, t, e, "rota_device_plugin_mps_daemon_up", uuid, 1)
	wantPluginLog(t, e, "MPS control daemon died; starting it again", `gpu="`+uuid+`"`, "pid="+strconv.Itoa(pid))
	wantPluginLog(t, e, "MPS control daemon running", `gpu="`+uuid+`"`, "pid="+strconv.Itoa(restarted))
	listing = e.waitListing(ctx, t, ns, "share", containerPipe, servedBy(restarted))
	t.Logf("the running share's container sees %s: %s", containerPipe, listing)
	// The new daemon answers on its control pipe (the stand-in's client
	// mode, as the plugin talks to it).
	client := exec.CommandContext(ctx, bin)
	client.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe)
	client.Stdin = strings.NewReader("get_server_list\n")
	if out, err := client.CombinedOutput(); err != nil {
		t.Errorf("the restarted daemon does not answer on %s: %v: %s", pipe, err, out)
	}
	wantControlLog(t, logs, map[string]int{"start ": 2, setThreads: 2, "command get_server_list": 1})

	// A whole GPU beside it: another GPU, nothing of MPS.
	whole := e.Pod(ns, "whole", Request{GPUs: 1}, Request{})
	whole.Spec.Containers[0].Command = []string{"/" + imageBinary, "env", containerPipe}
	if _, err := e.Client.CoreV1().Pods(ns).Create(ctx, whole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err = e.WaitRunning(ctx, ns, "whole")
	if err != nil {
		t.Fatal(err)
	}
	wholeGPU := mustAssignment(t, e, pod).GPUs[0].UUID
	if wholeGPU == uuid {
		t.Fatalf("the whole-GPU pod got the share's GPU %s", uuid)
	}
	env, err := e.ContainerEnv(ctx, ns, "whole", "app")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range env {
		if strings.HasPrefix(k, "CUDA_MPS_") {
			t.Errorf("the whole-GPU container has %s=%s", k, v)
		}
	}
	listing = e.waitListing(ctx, t, ns, "whole", containerPipe, func(l string) bool { return l != "" })
	if !strings.HasPrefix(listing, "error ") {
		t.Errorf("the whole-GPU container sees %s: %s; want it absent", containerPipe, listing)
	}
	if _, err := os.Stat(filepath.Join(root, wholeGPU)); !os.IsNotExist(err) {
		t.Errorf("an MPS folder for the whole GPU %s: %v", wholeGPU, err)
	}
	wantMetric(ctx, t, e, "rota_device_plugin_mps_daemon_up", wholeGPU, 0)
	if now := daemonPID(t, pipe); now != restarted {
		t.Errorf("after the whole-GPU pod, the share's daemon PID is %d, want %d still", now, restarted)
	}
	if err := e.CheckPodResources(ctx); err != nil {
		t.Errorf("PodResources disagrees with the assignments:\n%v", err)
	}
	t.Logf("scenario done in %s since the start", time.Since(began).Round(time.Millisecond))
}

// buildMPSStandin builds the nvidia-cuda-mps-control stand-in into dir.
func buildMPSStandin(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, mps.DefaultBinary)
	if b, err := exec.CommandContext(ctx, "go", "build", "-o", bin, mpsStandinPackage).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", mpsStandinPackage, err, b)
	}
	return bin
}

// checkEnv fails the test unless the container of pod ns/pod has want's
// variables, as want has them.
func (e *Env) checkEnv(ctx context.Context, t *testing.T, ns, pod string, want map[string]string) {
	t.Helper()
	env, err := e.ContainerEnv(ctx, ns, pod, "app")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k := range want {
		got[k] = env[k]
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the environment of %s/%s (-want +got):\n%s", ns, pod, d)
	}
}

// mpsFolder makes the folder of the stand-in and of --mps-root (short:
// unix socket paths are limited to 108 bytes) and, once the Env is stopped
// (t.Cleanup runs this first-registered one last), fails the test if a
// daemon still runs (the plugin stops them when it stops), kills it, and
// removes the folder, kept when the test failed or ROTA_KEEP_CLUSTER=1.
func mpsFolder(t *testing.T) (dir, root string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rota-mps-")
	if err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(dir, "mps")
	t.Cleanup(func() {
		entries, _ := os.ReadDir(root)
		for _, g := range entries {
			pipe := filepath.Join(root, g.Name(), "pipe")
			if pid := daemonPID(t, pipe); pid != 0 {
				t.Errorf("the MPS daemon of GPU %s (PID %d) still runs after the device plugin stopped; killing it", g.Name(), pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() || os.Getenv("ROTA_KEEP_CLUSTER") == "1" {
			t.Logf("MPS folder kept: %s", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	return dir, root
}

// daemonPID is the PID in the pipe folder's PID file when that process is
// the stand-in and alive (not a zombie); 0 otherwise.
func daemonPID(t *testing.T, pipe string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pipe, mps.PIDFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	proc := "/proc/" + strconv.Itoa(pid)
	if exe, err := os.Readlink(proc + "/exe"); err != nil || filepath.Base(exe) != mps.DefaultBinary {
		return 0
	}
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || bytes.IndexByte([]byte("ZXx"), stat[i+2]) >= 0 {
		return 0
	}
	return pid
}

// checkDaemonProcess checks in /proc that pid runs bin with env among its
// environment.
func checkDaemonProcess(t *testing.T, pid int, bin string, env map[string]string) {
	t.Helper()
	proc := "/proc/" + strconv.Itoa(pid)
	if exe, err := os.Readlink(proc + "/exe"); err != nil || exe != bin {
		t.Errorf("daemon PID %d runs %q (%v), want the stand-in %s", pid, exe, err, bin)
	}
	raw, err := os.ReadFile(proc + "/environ")
	if err != nil {
		t.Errorf("daemon PID %d: %v", pid, err)
		return
	}
	got := map[string]string{}
	for _, kv := range strings.Split(string(raw), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, wanted := env[k]; wanted {
				got[k] = v
			}
		}
	}
	if d := cmp.Diff(env, got); d != "" {
		t.Errorf("daemon PID %d environment (-want +got):\n%s", pid, d)
	}
}

// servedBy holds for a pipe folder listing that shows the control socket
// and the PID file naming pid.
func servedBy(pid int) func(string) bool {
	return func(l string) bool {
		f := strings.Fields(l)
		return slices.Contains(f, "control[S]") && slices.Contains(f, mps.PIDFile+"="+strconv.Itoa(pid))
	}
}

// waitListing waits until the container's latest "rota-realnode: ls DIR:"
// line (cmd/rota-realnode-image env DIR) satisfies cond, and returns it.
func (e *Env) waitListing(ctx context.Context, t *testing.T, ns, pod, dir string, cond func(string) bool) string {
	t.Helper()
	prefix := "rota-realnode: ls " + dir + ": "
	var last string
	err := waitUntil(ctx, 30*time.Second, "the listing of "+dir+" in "+ns+"/"+pod, nil, func() (bool, string) {
		raw, err := e.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "app"}).Do(ctx).Raw()
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if l, ok := strings.CutPrefix(line, prefix); ok {
				last = l
			}
		}
		return cond(last), fmt.Sprintf("%q", last)
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// wantMetric waits (10 s at most) until the device plugin's metric for gpu
// is want: the plugin counts a daemon up once it answers, a moment after
// the daemon wrote its PID file.
func wantMetric(ctx context.Context, t *testing.T, e *Env, name, gpu string, want float64) {
	t.Helper()
	err := waitUntil(ctx, 10*time.Second, fmt.Sprintf("%s{gpu=%q} = %v", name, gpu, want), e.plugin, func() (bool, string) {
		got, err := e.PluginMetric(ctx, name, `gpu="`+gpu+`"`)
		if err != nil {
			return false, err.Error()
		}
		return got == want, fmt.Sprint(got)
	})
	if err != nil {
		t.Error(err)
	}
}

// wantPluginLog waits (10 s at most) until one line of the device plugin's
// log holds every part.
func wantPluginLog(t *testing.T, e *Env, parts ...string) {
	t.Helper()
	err := waitUntil(t.Context(), 10*time.Second, fmt.Sprintf("a line of the device plugin's log with all of %q", parts),
		e.plugin, func() (bool, string) {
			b, err := os.ReadFile(e.PluginLog())
			if err != nil {
				return false, err.Error()
			}
			for _, line := range strings.Split(string(b), "\n") {
				ok := true
				for _, p := range parts {
					ok = ok && strings.Contains(line, p)
				}
				if ok {
					return true, ""
				}
			}
			return false, "none yet"
		})
	if err != nil {
		t.Error(err)
	}
}

// wantControlLog checks how many lines of the stand-in's control.log
// start with each key ("start " for a daemon start, "command X" for a
// command it got on its control pipe).
func wantControlLog(t *testing.T, logs string, want map[string]int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(logs, "control.log"))
	if err != nil {
		t.Error(err)
		return
	}
	got := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		for k := range want {
			if strings.HasPrefix(l, k) {
				got[k]++
			}
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("control.log (-want +got):\n%s\n%s", d, b)
	}
}
