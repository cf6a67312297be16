package leak

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
)

// proc writes a fake /proc entry.
func proc(t *testing.T, root string, pid int, comm, cgroup string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"comm": comm, "cgroup": cgroup} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	uidA    = "0d3c5b7e-1111-4a2b-9c3d-aaaaaaaaaaaa"
	uidB    = "0d3c5b7e-2222-4a2b-9c3d-bbbbbbbbbbbb"
	uidGone = "0d3c5b7e-3333-4a2b-9c3d-cccccccccccc"
)

func TestProcFSOwner(t *testing.T) {
	root := t.TempDir()
	proc(t, root, 10, "python", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+strings.ReplaceAll(uidA, "-", "_")+".slice/cri-containerd-abc.scope")
	proc(t, root, 11, "python", "12:memory:/kubepods/besteffort/pod"+uidB+"/0123\n0::/")
	proc(t, root, 12, "nvidia-cuda-mps", "0::/system.slice/containerd.service")
	fs := ProcFS{Root: root}
	for pid, want := range map[uint32]Owner{
		10: {PodUID: uidA, Comm: "python", Cgroup: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uidA, "-", "_") + ".slice/cri-containerd-abc.scope"},
		11: {PodUID: uidB, Comm: "python", Cgroup: "/"},
		12: {Comm: "nvidia-cuda-mps", Cgroup: "/system.slice/containerd.service"},
		13: {Gone: true},
	} {
		if got := fs.Owner(pid); !reflect.DeepEqual(got, want) {
			t.Errorf("Owner(%d) = %+v, want %+v", pid, got, want)
		}
	}
}

// TestDetectLeaksOnMock runs the detector on a go-nvml mock DGX H100 with
// process lists: processes of the assigned pods, an MPS server, a pod that
// is gone, a pod on a GPU it was not given, a host process, a PID without a
// /proc entry; the grace period; freeing when NVML stops listing a PID.
func TestDetectLeaksOnMock(t *testing.T) {
	n, ev, err := discovery.OpenMock("dgxh100", discovery.MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	u0, u1 := n.GPUs()[0].UUID, n.GPUs()[1].UUID
	root := t.TempDir()
	pod := func(uid string) string { return "0::/kubepods/burstable/pod" + uid + "/ctr" }
	proc(t, root, 100, "python", pod(uidA)) // pod A, assigned GPU 0
	proc(t, root, 101, "nvidia-cuda-mps", "0::/kubepods/burstable/podffffffff-ffff-ffff-ffff-ffffffffffff/dp")
	proc(t, root, 102, "python", pod(uidGone))    // pod finished or deleted
	proc(t, root, 103, "python", pod(uidB))       // pod B is live but assigned GPU 1
	proc(t, root, 104, "train", "0::/user.slice") // outside Kubernetes
	// 105: no /proc entry.
	ev.SetProcesses(0,
		[]nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 300 << 20}, {Pid: 102, UsedGpuMemory: 4 << 30}, {Pid: 104, UsedGpuMemory: 1 << 30}, {Pid: 105, UsedGpuMemory: 2 << 30}},
		[]nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 8 << 30}, {Pid: 103, UsedGpuMemory: 512 << 20}})
	ev.SetProcesses(1, []nvml.ProcessInfo{{Pid: 103, UsedGpuMemory: 6 << 30}}, nil)

	assigned := map[string][]handoff.GPUPod{u0: {{UID: uidA, Pod: "ns/a", MemoryMiB: 10240}}, u1: {{UID: uidB, Pod: "ns/b", Whole: true}}}
	live := map[string]string{uidA: "ns/a", uidB: "ns/b"}
	d := NewDetector(Config{Grace: time.Minute, HostPID: true}, n.Processes, ProcFS{Root: root}.Owner)
	t0 := time.Unix(1000, 0)
	gpus := []string{u0, u1}

	got, errs := d.Scan(t0, gpus, assigned, live)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if g := got[u0]; g.LeakedMiB != 0 || len(g.Processes) != 0 || len(g.Pending) != 4 {
		t.Fatalf("within the grace period: %+v", g)
	}
	got, _ = d.Scan(t0.Add(59*time.Second), gpus, assigned, live)
	if got[u0].LeakedMiB != 0 {
		t.Fatalf("leak counted before the grace period ended: %+v", got[u0])
	}
	got, _ = d.Scan(t0.Add(time.Minute), gpus, assigned, live)
	g := got[u0]
	if g.LeakedMiB != 4096+512+1024+2048 {
		t.Errorf("leaked = %d MiB, want 7680", g.LeakedMiB)
	}
	var pids []uint32
	whys := map[uint32]string{}
	for _, p := range g.Processes {
		pids = append(pids, p.PID)
		whys[p.PID] = p.Why
		if !p.Since.Equal(t0) {
			t.Errorf("pid %d since %v, want %v", p.PID, p.Since, t0)
		}
	}
	if !reflect.DeepEqual(pids, []uint32{102, 103, 104, 105}) {
		t.Errorf("leaked PIDs = %v, want 102..105 (not the assigned pod's 100, not the MPS server 101)", pids)
	}
	for pid, want := range map[uint32]string{102: "pod " + uidGone + " is gone or finished", 103: "pod ns/b is not assigned this GPU",
		104: "not in a pod (cgroup /user.slice, command train)", 105: "no longer exists"} {
		if !strings.Contains(whys[pid], want) {
			t.Errorf("pid %d: why %q lacks %q", pid, whys[pid], want)
		}
	}
	if got[u1].LeakedMiB != 0 {
		t.Errorf("GPU 1 (pod B's own) leaked %d", got[u1].LeakedMiB)
	}
	if s := g.Summary(); !strings.Contains(s, "pid 102 4096 MiB (pod "+uidGone) {
		t.Errorf("Summary() = %s", s)
	}

	// Freed: the gone pod's process exits; pod B gets GPU 0 too (it is
	// assigned now); the host process stays.
	ev.SetProcesses(0, []nvml.ProcessInfo{{Pid: 104, UsedGpuMemory: 1 << 30}, {Pid: 105, UsedGpuMemory: 2 << 30}},
		[]nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 8 << 30}, {Pid: 103, UsedGpuMemory: 512 << 20}})
	assigned[u0] = append(assigned[u0], handoff.GPUPod{UID: uidB, Pod: "ns/b"})
	got, _ = d.Scan(t0.Add(2*time.Minute), gpus, assigned, live)
	if got[u0].LeakedMiB != 1024+2048 {
		t.Errorf("after the exit: leaked = %d MiB (%s), want 3072", got[u0].LeakedMiB, got[u0].Summary())
	}
	// A PID that comes back after being freed starts a new grace period.
	ev.SetProcesses(0, []nvml.ProcessInfo{{Pid: 102, UsedGpuMemory: 4 << 30}}, nil)
	got, _ = d.Scan(t0.Add(3*time.Minute), gpus, assigned, live)
	if got[u0].LeakedMiB != 0 || len(got[u0].Pending) != 1 {
		t.Errorf("returning PID: %+v", got[u0])
	}

	// Without host PIDs a PID with no /proc entry is not counted.
	nohost := NewDetector(Config{Grace: 0}, n.Processes, ProcFS{Root: root}.Owner)
	ev.SetProcesses(0, []nvml.ProcessInfo{{Pid: 105, UsedGpuMemory: 2 << 30}}, nil)
	if got, _ := nohost.Scan(t0, gpus, assigned, live); got[u0].LeakedMiB != 0 {
		t.Errorf("without hostPID an invisible PID counted: %+v", got[u0])
	}
	// A failing list is reported and leaves the GPU out.
	ev.SetLost(0, true)
	got, errs = d.Scan(t0.Add(4*time.Minute), gpus, assigned, live)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "compute processes") {
		t.Errorf("errs = %v", errs)
	}
	if _, ok := got[u0]; ok {
		t.Errorf("lost GPU in the result: %+v", got[u0])
	}
}
