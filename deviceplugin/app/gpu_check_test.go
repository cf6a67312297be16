//go:build gpu

package app_test

// TestGPUCheck runs on a machine with an NVIDIA GPU, root, the driver and
// nvidia-cuda-mps-control (hack/gpu-check.sh builds hack/gpu-check/alloc.c
// and runs it). It is not part of any default test run: no GPU has run it yet.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/rota-sched/rota/pkg/contract"
)

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

func TestGPUCheck(t *testing.T) {
	if os.Getenv("ROTA_GPU_ALLOC") == "" {
		t.Skip("ROTA_GPU_ALLOC (the compiled hack/gpu-check/alloc.c) not set; run hack/gpu-check.sh")
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	backend, err := discovery.OpenNVML()
	if err != nil {
		t.Fatalf("real NVML: %v", err)
	}
	defer backend.Close()
	gpus := backend.GPUs()
	dir := t.TempDir()
	stub, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	root := filepath.Join(os.TempDir(), "rota-gpu-check-mps")
	os.RemoveAll(root)
	cfg := config.Default()
	cfg.NodeName, cfg.DevicePluginDir, cfg.PodResourcesSocket, cfg.MetricsListen = node, dir, "", ""
	cfg.MPS, cfg.MPSRoot, cfg.MPSExclusiveMode = true, root, os.Getenv("ROTA_GPU_EXCLUSIVE") == "1"
	cfg.DeviceNodes = true
	cfg.LeakInterval, cfg.LeakGrace, cfg.HostPID = 200*time.Millisecond, 0, true
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, app.Deps{Config: cfg, Backend: backend, Client: client, Metrics: metrics.New()})
	}()
	defer func() { cancel(); <-done }()
	r := &rig{ctx: ctx, stub: stub, client: client, gpus: gpus, done: done}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := stub.WaitRegistered(wctx, names.GPUMemory, 0); err != nil {
		t.Fatal(err)
	}

	// 1. Topology on real NVML.
	doc := waitTopology(t, r, 10*time.Second, func(d contract.Topology) bool { return d.MPS != nil })
	t.Logf("CHECK topology: %d GPUs, GPU 0 %s %d MiB, MPS %+v", len(doc.GPUs), doc.GPUs[0].Model, int64(doc.GPUs[0].MemoryMiB), *doc.MPS)
	if !doc.MPS.Available {
		t.Fatalf("MPS not available: %s", doc.MPS.Reason)
	}

	// 2. Two shares on GPU 0 (2 GiB and 1 GiB), each through Allocate.
	r.create(t, podSpec("a", share(gpus, 0, 2048), names.GPUMemory, 2))
	r.create(t, podSpec("b", share(gpus, 0, 1024), names.GPUMemory, 1))
	envs := map[string]map[string]string{}
	for _, n := range []int{2, 1} {
		al, err := stub.Allocate(ctx, names.GPUMemory, n, nil)
		if err != nil {
			t.Fatalf("Allocate %d: %v", n, err)
		}
		env := map[string]string{}
		for k, v := range al.Response.Envs {
			env[k] = v
		}
		env["CUDA_MPS_PIPE_DIRECTORY"] = al.Response.Mounts[0].HostPath // the host's side of the mount
		env["CUDA_VISIBLE_DEVICES"] = "0"
		envs[env["ROTA_ASSIGNED_POD"]] = env
		t.Logf("CHECK allocate %s: env %v mounts %v devices %d", env["ROTA_ASSIGNED_POD"], al.Response.Envs, al.Response.Mounts, len(al.Response.Devices))
	}
	a := envs["team-a/a"]
	out, code, _ := runAlloc(t, a, 0, 1536, 0)
	t.Logf("CHECK share a (2 GiB) allocates 1.5 GiB: exit %d: %s", code, out)
	if code != 0 {
		t.Errorf("1.5 GiB within a 2 GiB share failed")
	}
	out, code, _ = runAlloc(t, a, 0, 3072, 0)
	t.Logf("CHECK share a (2 GiB) allocates 3 GiB: exit %d: %s (want 3: refused)", code, out)
	if code != 3 {
		t.Errorf("3 GiB in a 2 GiB share was not refused: the limit is not enforced")
	}
	// Two processes of one share at once: each is limited on its own.
	_, _, hold := runAlloc(t, a, 0, 1536, 20)
	time.Sleep(3 * time.Second)
	out, code, _ = runAlloc(t, a, 0, 1536, 0)
	t.Logf("CHECK second process of share a, 1.5 GiB while the first holds 1.5 GiB: exit %d: %s (the limit is per client process)", code, out)
	_ = hold.Process.Kill()
	// A client raising its own limit.
	raised := map[string]string{}
	for k, v := range a {
		raised[k] = v
	}
	raised["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=8192M"
	out, code, _ = runAlloc(t, raised, 0, 4096, 0)
	t.Logf("CHECK share a rewrites its limit to 8 GiB, allocates 4 GiB: exit %d: %s (0: the client's value is not capped)", code, out)

	// 3. A process that unsets the MPS variables.
	out, code, _ = runAlloc(t, map[string]string{"CUDA_VISIBLE_DEVICES": gpus[0].UUID}, 0, 4096, 0)
	t.Logf("CHECK no MPS variables, 4 GiB: exit %d: %s (exclusive mode %v: want 2 with it, 0 without)", code, out, cfg.MPSExclusiveMode)
	if cfg.MPSExclusiveMode && code != 2 {
		t.Errorf("a process without MPS got a context on an EXCLUSIVE_PROCESS GPU")
	}

	// 4. Another user in the same share setup.
	out, code, _ = runAlloc(t, envs["team-a/b"], 65534, 512, 0)
	t.Logf("CHECK share b as uid 65534, 512 MiB: exit %d: %s", code, out)

	// 5. A deliberate leak: a process outside any pod holds 1 GiB.
	_, _, leaker := runAlloc(t, map[string]string{"CUDA_MPS_PIPE_DIRECTORY": a["CUDA_MPS_PIPE_DIRECTORY"], "CUDA_VISIBLE_DEVICES": "0"}, 0, 1024, 60)
	doc = waitTopology(t, r, 30*time.Second, func(d contract.Topology) bool { return d.GPUs[0].LeakedMiB >= 1024 })
	t.Logf("CHECK leak detected: GPU 0 leakedMiB %d, memoryMiB %d", int64(doc.GPUs[0].LeakedMiB), int64(doc.GPUs[0].MemoryMiB))
	_ = leaker.Process.Kill()
	doc = waitTopology(t, r, 30*time.Second, func(d contract.Topology) bool { return d.GPUs[0].LeakedMiB == 0 })
	t.Logf("CHECK leak freed: GPU 0 memoryMiB %d", int64(doc.GPUs[0].MemoryMiB))
}
