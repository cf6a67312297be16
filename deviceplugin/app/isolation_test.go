package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/mps"
	"github.com/rota-sched/rota/deviceplugin/mps/mpsfake"
	"github.com/rota-sched/rota/pkg/contract"
)

// TestMain makes this test binary the nvidia-cuda-mps-control stand-in
// when run by the MPS daemons.
func TestMain(m *testing.M) { mpsfake.RunTests(m) }

// TestMPSAndLeaksEndToEnd runs the whole plugin on the dgxh200 mock with
// the MPS stand-in and a fake /proc: the topology says MPS is available; a
// share's Allocate starts its GPU's daemon and carries the pipe mount; a
// process of a pod that is gone holding 8 GiB on GPU 3 is published as
// leaked (memoryMiB lowered), raised as a Node event, and freed when NVML
// stops listing it.
func TestMPSAndLeaksEndToEnd(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	procRoot := t.TempDir()
	dir := filepath.Join(procRoot, "500")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"comm": "python\n", "cgroup": "0::/kubepods/burstable/pod0d3c5b7e-3333-4a2b-9c3d-cccccccccccc/ctr\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, func(c *config.Config) {
		c.MPS, c.MPSBinary, c.MPSRoot = true, self, root
		c.LeakInterval, c.LeakGrace, c.HostPID, c.ProcRoot = 20*time.Millisecond, 0, true, procRoot
	})
	t.Cleanup(func() {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(root, e.Name(), "pipe", mps.PIDFile))
			var pid int
			for _, c := range strings.TrimSpace(string(b)) {
				pid = pid*10 + int(c-'0')
			}
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		os.RemoveAll(root)
	})
	doc := waitTopology(t, r, 5*time.Second, func(d contract.Topology) bool { return d.MPS != nil })
	if !doc.MPS.Available {
		t.Fatalf("topology MPS = %+v, want available", doc.MPS)
	}

	r.create(t, podSpec("infer", share(r.gpus, 6, 4*1024), names.GPUMemory, 4))
	a, err := r.stub.Allocate(r.ctx, names.GPUMemory, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(root, r.gpus[6].UUID, "pipe")
	if len(a.Response.Mounts) != 1 || a.Response.Mounts[0].HostPath != pipe || a.Response.Envs["CUDA_MPS_PIPE_DIRECTORY"] != "/run/nvidia-mps" {
		t.Errorf("share response: mounts %v env %v", a.Response.Mounts, a.Response.Envs)
	}
	if _, err := os.Stat(filepath.Join(pipe, mps.PIDFile)); err != nil {
		t.Errorf("GPU 6 daemon has no PID file: %v", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("MPS folders %v, want GPU 6's only", entries)
	}

	r.events.SetProcesses(3, []nvml.ProcessInfo{{Pid: 500, UsedGpuMemory: 8 << 30}}, nil)
	doc = waitTopology(t, r, 5*time.Second, func(d contract.Topology) bool { return d.GPUs[3].LeakedMiB == 8192 })
	if g := doc.GPUs[3]; g.MemoryMiB != r.gpus[3].MemoryMiB-8192 || g.Health != contract.Healthy {
		t.Errorf("GPU 3 published as %+v", g)
	}
	ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
	defer cancel()
	for {
		evs, err := r.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs.Items {
			if e.Reason == "GPUMemoryLeaked" && strings.Contains(e.Message, "pid 500 8192 MiB") && e.InvolvedObject.Name == node {
				found = true
			}
		}
		if found {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no GPUMemoryLeaked event; events %v", evs.Items)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.events.SetProcesses(3, nil, nil)
	doc = waitTopology(t, r, 5*time.Second, func(d contract.Topology) bool { return d.GPUs[3].LeakedMiB == 0 })
	if doc.GPUs[3].MemoryMiB != r.gpus[3].MemoryMiB {
		t.Errorf("freed GPU 3 published with %d MiB", doc.GPUs[3].MemoryMiB)
	}
}
