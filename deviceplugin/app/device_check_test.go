//go:build gpu

package app_test

// TestDeviceCheck is the GPU part of hack/device-check.sh (docs/device-check.md).
// ROTA_DEVICE_CHECK=real runs the device plugin on the machine's NVML with
// MPS (root, an NVIDIA driver, nvidia-cuda-mps-control, GPU 0 idle) and
// ROTA_GPU_ALLOC, the compiled hack/gpu-check/alloc.c. ROTA_DEVICE_CHECK=rehearse
// runs the same steps on go-nvml's dgxh100 mock with the MPS stand-in: the
// plumbing is exercised, and every finding that needs a GPU is "unproven".
// Each finding is a CHECK line in the log and a row of
// $ROTA_DEVICE_CHECK_OUT/checks.json. A call the machine refuses (a sandbox)
// is unproven, not failed.

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/deviceplugin/app"
	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/deviceplugin/mps"
	"github.com/rota-sched/rota/pkg/contract"
)

// finding is one row of the device check's report.
type finding struct {
	Check    string `json:"check"`
	Verdict  string `json:"verdict"` // pass, fail, unproven, info
	Observed string `json:"observed"`
}

type findings struct {
	t    *testing.T
	rows []finding
}

func (f *findings) add(check, verdict, format string, args ...any) {
	f.t.Helper()
	obs := fmt.Sprintf(format, args...)
	f.rows = append(f.rows, finding{Check: check, Verdict: verdict, Observed: obs})
	f.t.Logf("CHECK %s: %s: %s", verdict, check, obs)
	if verdict == "fail" {
		f.t.Errorf("%s failed: %s", check, obs)
	}
}

// passIf adds pass when ok, else fail.
func (f *findings) passIf(ok bool, check, format string, args ...any) {
	f.t.Helper()
	v := "fail"
	if ok {
		v = "pass"
	}
	f.add(check, v, format, args...)
}

func (f *findings) write(dir string) {
	if dir == "" {
		return
	}
	b, _ := json.MarshalIndent(f.rows, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "checks.json"), append(b, '\n'), 0o644); err != nil {
		f.t.Errorf("writing checks.json: %v", err)
	}
}

// smiGPU is one GPU as nvidia-smi reports it.
type smiGPU struct {
	UUID, Name, MIG, ComputeMode string
	MemoryMiB                    int64
}

// nvidiaSMI reads the GPUs from nvidia-smi's CSV query.
func nvidiaSMI() ([]smiGPU, error) {
	out, err := exec.Command("nvidia-smi", "--query-gpu=uuid,name,memory.total,mig.mode.current,compute_mode",
		"--format=csv,noheader,nounits").Output()
	if err != nil {
		return nil, err
	}
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return nil, err
	}
	var gpus []smiGPU
	for _, r := range recs {
		if len(r) < 5 {
			continue
		}
		mem, _ := strconv.ParseInt(strings.TrimSpace(r[2]), 10, 64)
		gpus = append(gpus, smiGPU{UUID: strings.TrimSpace(r[0]), Name: strings.TrimSpace(r[1]), MemoryMiB: mem,
			MIG: strings.TrimSpace(r[3]), ComputeMode: strings.TrimSpace(r[4])})
	}
	return gpus, nil
}

func TestDeviceCheck(t *testing.T) {
	mode := os.Getenv("ROTA_DEVICE_CHECK")
	if mode != "real" && mode != "rehearse" {
		t.Skip("ROTA_DEVICE_CHECK is not real or rehearse; run hack/device-check.sh")
	}
	real := mode == "real"
	out := os.Getenv("ROTA_DEVICE_CHECK_OUT")
	f := &findings{t: t}
	defer f.write(out)

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var backend *discovery.NVML
	var events *discovery.MockEvents
	var err error
	if real {
		backend, err = discovery.OpenNVML()
	} else {
		backend, events, err = discovery.OpenMock("dgxh100", discovery.MockOptions{})
	}
	if err != nil {
		f.add("NVML opens", "fail", "%v", err)
		return
	}
	defer backend.Close()
	gpus := backend.GPUs()
	f.add("NVML opens", "pass", "%d GPUs, GPU 0 %s, %d MiB", len(gpus), gpus[0].Model, int64(gpus[0].MemoryMiB))

	dir := t.TempDir()
	stub, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	root, err := os.MkdirTemp("", "rota-device-check-mps")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	cfg := config.Default()
	cfg.NodeName, cfg.DevicePluginDir, cfg.PodResourcesSocket, cfg.MetricsListen = node, dir, "", ""
	cfg.MPS, cfg.MPSRoot, cfg.MPSExclusiveMode = true, root, os.Getenv("ROTA_GPU_EXCLUSIVE") == "1"
	if !real {
		self, _ := os.Executable()
		cfg.MPSBinary = self // the MPS stand-in (mpsfake, TestMain)
	}
	cfg.DeviceNodes = real
	cfg.HealthInterval, cfg.RecoveryQuiet = 500*time.Millisecond, time.Hour
	cfg.LeakInterval, cfg.LeakGrace, cfg.HostPID = 200*time.Millisecond, 0, true
	cfg.UsageInterval, cfg.UsageWindow, cfg.PublishUtilization = time.Second, 5*time.Second, true
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Deps{Config: cfg, Backend: backend, Client: client, Metrics: metrics.New()})
	}()
	defer func() {
		cancel()
		<-done
	}()
	r := &rig{ctx: ctx, stub: stub, client: client, gpus: gpus, done: done}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := stub.WaitRegistered(wctx, names.GPUMemory, 0); err != nil {
		f.add("plugin registers with the kubelet", "fail", "%v", err)
		return
	}

	// Discovery: Rota's topology against nvidia-smi.
	doc := waitTopology(t, r, 20*time.Second, func(d contract.Topology) bool { return d.MPS != nil })
	if out != "" {
		b, _ := json.MarshalIndent(doc, "", "  ")
		_ = os.WriteFile(filepath.Join(out, "topology.json"), b, 0o644)
	}
	islands := map[int]int{}
	for _, g := range doc.GPUs {
		islands[g.Island]++
	}
	f.add("topology published", "info", "%d GPUs, %d NVLink islands, GPU 0: %s %s, %d MiB, NUMA %d",
		len(doc.GPUs), len(islands), doc.GPUs[0].UUID, doc.GPUs[0].Model, int64(doc.GPUs[0].MemoryMiB), doc.GPUs[0].NUMA)
	smi, err := nvidiaSMI()
	compute := ""
	switch {
	case !real:
		f.add("topology matches nvidia-smi", "unproven", "rehearsal: no nvidia-smi")
	case err != nil:
		f.add("topology matches nvidia-smi", "unproven", "nvidia-smi: %v", err)
	default:
		var diffs []string
		if len(smi) != len(doc.GPUs) {
			diffs = append(diffs, fmt.Sprintf("nvidia-smi lists %d GPUs, Rota %d", len(smi), len(doc.GPUs)))
		}
		for i := range min(len(smi), len(doc.GPUs)) {
			s, g := smi[i], doc.GPUs[i]
			if s.UUID != g.UUID {
				diffs = append(diffs, fmt.Sprintf("GPU %d UUID %s vs %s", i, s.UUID, g.UUID))
			}
			if s.Name != g.Model {
				diffs = append(diffs, fmt.Sprintf("GPU %d model %q vs %q", i, s.Name, g.Model))
			}
			// Rota publishes whole memory units, rounded down.
			if d := s.MemoryMiB - int64(gpus[i].MemoryMiB); d < 0 || d > 1024 {
				diffs = append(diffs, fmt.Sprintf("GPU %d memory %d MiB vs %d MiB", i, s.MemoryMiB, int64(gpus[i].MemoryMiB)))
			}
		}
		compute = smi[0].ComputeMode
		f.passIf(len(diffs) == 0, "topology matches nvidia-smi", "UUID, model, memory of %d GPUs; MIG mode %s; compute mode %s; differences: %v",
			len(smi), smi[0].MIG, smi[0].ComputeMode, diffs)
	}
	exclusive := compute == "Exclusive_Process" || cfg.MPSExclusiveMode

	// Health: NVML's event set.
	time.Sleep(time.Second)
	if w := backend.WatchedGPUs(); w > 0 {
		f.add("XID and ECC events registered", "pass", "%d of %d GPUs registered with NVML's event set", w, len(gpus))
	} else {
		f.add("XID and ECC events registered", "unproven", "no GPU registered for NVML events (not supported here, or refused)")
	}
	if real {
		f.add("an XID marks the GPU unhealthy", "unproven", "an XID cannot be injected from user space on a real GPU; the path is exercised on the mock")
	} else {
		events.InjectXID(1, 79)
		unhealthy := waitFor(10*time.Second, func() bool { d, _ := r.topology(t); return len(d.GPUs) > 1 && d.GPUs[1].Health == contract.Unhealthy })
		d, _ := r.topology(t)
		f.passIf(unhealthy, "an XID marks the GPU unhealthy", "mock XID 79 on GPU 1: %s %q", d.GPUs[1].Health, d.GPUs[1].Reason)
	}

	// MPS: the plugin's daemon and two shares on GPU 0.
	if !doc.MPS.Available {
		f.add("MPS daemon available", "unproven", "the plugin could not run MPS here: %s", doc.MPS.Reason)
		for _, c := range mpsChecks {
			f.add(c, "unproven", "no MPS daemon here")
		}
		return
	}
	f.add("MPS daemon available", "pass", "%+v", *doc.MPS)
	r.create(t, podSpec("a", share(gpus, 0, 2048), names.GPUMemory, 2))
	r.create(t, podSpec("b", share(gpus, 0, 1024), names.GPUMemory, 1))
	envs := map[string]map[string]string{}
	for _, n := range []int{2, 1} {
		al, err := stub.Allocate(ctx, names.GPUMemory, n, nil)
		if err != nil {
			f.add("shares allocated", "fail", "Allocate %d units: %v", n, err)
			return
		}
		env := map[string]string{}
		for k, v := range al.Response.Envs {
			env[k] = v
		}
		if len(al.Response.Mounts) > 0 {
			env["CUDA_MPS_PIPE_DIRECTORY"] = al.Response.Mounts[0].HostPath // the host's side of the mount
		}
		env["CUDA_VISIBLE_DEVICES"] = "0"
		envs[env["ROTA_ASSIGNED_POD"]] = env
	}
	a, b := envs["team-a/a"], envs["team-a/b"]
	f.passIf(a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "" && b["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "",
		"shares get an MPS memory limit", "a: %s, b: %s, pipe %s", a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], b["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], a["CUDA_MPS_PIPE_DIRECTORY"])

	// The daemon killed: the plugin starts it again.
	pidFile := filepath.Join(root, gpus[0].UUID, "pipe", mps.PIDFile)
	oldPID := readPID(pidFile)
	if oldPID <= 0 {
		f.add("a killed MPS daemon is restarted", "fail", "no daemon PID in %s", pidFile)
	} else {
		_ = syscall.Kill(oldPID, syscall.SIGKILL)
		newPID := 0
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if p := readPID(pidFile); p > 0 && p != oldPID && syscall.Kill(p, 0) == nil {
				newPID = p
				break
			}
		}
		f.passIf(newPID > 0, "a killed MPS daemon is restarted", "kill -9 of PID %d; new daemon PID %d", oldPID, newPID)
	}

	alloc := os.Getenv("ROTA_GPU_ALLOC")
	if !real || alloc == "" {
		why := "rehearsal: no GPU"
		if real {
			why = "no allocation helper (ROTA_GPU_ALLOC: hack/gpu-check/alloc.c did not compile)"
		}
		for _, c := range gpuChecks {
			f.add(c, "unproven", "%s", why)
		}
		return
	}
	outp, code, _ := runAlloc(t, a, 0, 1536, 0)
	f.passIf(code == 0, "inside its limit a share allocates", "share a (2 GiB) allocates 1.5 GiB: exit %d: %s", code, outp)
	outp, code, _ = runAlloc(t, a, 0, 3072, 0)
	f.passIf(code == 3, "past its limit a share is refused", "share a (2 GiB) allocates 3 GiB: exit %d (3: refused): %s", code, outp)
	_, _, hold := runAlloc(t, a, 0, 1536, 20)
	time.Sleep(3 * time.Second)
	outp, code, _ = runAlloc(t, a, 0, 1536, 0)
	f.add("two processes of one share", "info", "a second 1.5 GiB while the first holds 1.5 GiB: exit %d: %s (the limit is per client process)", code, outp)
	_ = hold.Process.Kill()
	raised := map[string]string{}
	for k, v := range a {
		raised[k] = v
	}
	raised["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8192M"
	outp, code, _ = runAlloc(t, raised, 0, 4096, 0)
	f.add("a share that raises its own limit", "info", "limit rewritten to 8 GiB, allocates 4 GiB: exit %d (0: the server does not cap the client's value): %s", code, outp)
	outp, code, _ = runAlloc(t, map[string]string{"CUDA_VISIBLE_DEVICES": gpus[0].UUID}, 0, 4096, 0)
	if exclusive {
		f.passIf(code == 2, "a process without the MPS variables", "4 GiB on an EXCLUSIVE_PROCESS GPU: exit %d (2: no context): %s", code, outp)
	} else {
		f.add("a process without the MPS variables", "unproven", "compute mode %q is not EXCLUSIVE_PROCESS (not changed here): exit %d: %s", compute, code, outp)
	}
	outp, code, _ = runAlloc(t, b, 65534, 512, 0)
	f.add("a share's process as another user", "info", "share b as uid 65534, 512 MiB: exit %d: %s", code, outp)

	// A leak: a process of no pod holds 1 GiB on GPU 0.
	_, _, leaker := runAlloc(t, map[string]string{"CUDA_MPS_PIPE_DIRECTORY": a["CUDA_MPS_PIPE_DIRECTORY"], "CUDA_VISIBLE_DEVICES": "0"}, 0, 1024, 60)
	leaked := waitFor(20*time.Second, func() bool { d, _ := r.topology(t); return len(d.GPUs) > 0 && d.GPUs[0].LeakedMiB >= 1024 })
	d, _ := r.topology(t)
	f.passIf(leaked, "leaked memory is reported and unpublished", "GPU 0 leakedMiB %d, memoryMiB %d (of %d)", int64(d.GPUs[0].LeakedMiB), int64(d.GPUs[0].MemoryMiB), int64(gpus[0].MemoryMiB))
	_ = leaker.Process.Kill()
	freed := waitFor(30*time.Second, func() bool { d, _ := r.topology(t); return len(d.GPUs) > 0 && d.GPUs[0].LeakedMiB == 0 })
	f.passIf(freed, "leaked memory is returned when the process ends", "GPU 0 leakedMiB back to 0: %v", freed)

	// Utilization: a CUDA load (gpu-alloc load) inside pod a's cgroup.
	pod, err := client.CoreV1().Pods("team-a").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		f.add("a CUDA load shows in the pod's utilization", "unproven", "pod a: %v", err)
		return
	}
	cg := filepath.Join("/sys/fs/cgroup", "rota-device-check", "kubepods", "pod"+string(pod.UID))
	if err := os.MkdirAll(cg, 0o755); err != nil {
		f.add("a CUDA load shows in the pod's utilization", "unproven", "cannot make a pod cgroup here: %v", err)
		return
	}
	defer os.Remove(cg)
	cmd := exec.CommandContext(ctx, alloc, "load", "20")
	cmd.Env = os.Environ()
	for k, v := range a {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		f.add("a CUDA load shows in the pod's utilization", "unproven", "start %s load: %v", alloc, err)
		return
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		f.add("a CUDA load shows in the pod's utilization", "unproven", "cannot move the load into the pod cgroup: %v", err)
		return
	}
	var util string
	shown := waitFor(25*time.Second, func() bool {
		p, err := client.CoreV1().Pods("team-a").Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			return false
		}
		util = p.Annotations[names.GPUUtilizationAnnotation]
		v, err := strconv.ParseFloat(strings.TrimSuffix(util, "%"), 64)
		return err == nil && v > 0
	})
	f.passIf(shown, "a CUDA load shows in the pod's utilization", "pod a's %s annotation: %q", names.GPUUtilizationAnnotation, util)
}

// runAlloc runs the allocation helper with env (MPS variables as a share
// container gets them, with the host pipe folder), as uid when not 0. With
// hold > 0 it returns the started command (holding its memory); else it
// waits (60 s at most) and returns the output and exit code.
func runAlloc(t *testing.T, env map[string]string, uid uint32, mib, hold int) (string, int, *exec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(60+hold)*time.Second)
	cmd := exec.CommandContext(ctx, os.Getenv("ROTA_GPU_ALLOC"), fmt.Sprint(mib), fmt.Sprint(hold))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	if hold > 0 {
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait(); cancel() }()
		return "", 0, cmd
	}
	defer cancel()
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return strings.TrimSpace(string(out)), code, nil
}

// gpuChecks need a real GPU and the allocation helper; mpsChecks need the
// MPS daemon too.
var (
	gpuChecks = []string{"inside its limit a share allocates", "past its limit a share is refused",
		"a share that raises its own limit", "a process without the MPS variables", "a share's process as another user",
		"leaked memory is reported and unpublished", "a CUDA load shows in the pod's utilization"}
	mpsChecks = append([]string{"shares get an MPS memory limit", "a killed MPS daemon is restarted"}, gpuChecks...)
)

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
