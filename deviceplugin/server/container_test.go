package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/mps"
	"github.com/rota-sched/rota/deviceplugin/mps/mpsfake"
	"github.com/rota-sched/rota/pkg/contract"
)

// TestMain makes this test binary the nvidia-cuda-mps-control stand-in
// when run by the MPS daemons.
func TestMain(m *testing.M) { mpsfake.RunTests(m) }

func fakeDaemons(t *testing.T, binary string) *mps.Daemons {
	t.Helper()
	if binary == "" {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		binary = self
	}
	root, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	d, err := mps.New(mps.Config{Binary: binary, Root: root, ShmDir: "/run/rota/mps/shm", ActiveThreadPercentage: 50}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range d.Running() {
			if pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		os.RemoveAll(root)
	})
	return d
}

func mountStrings(ms []*pluginapi.Mount) []string {
	var out []string
	for _, m := range ms {
		s := m.HostPath + ":" + m.ContainerPath
		if m.ReadOnly {
			s += ":ro"
		}
		out = append(out, s)
	}
	return out
}

// TestAllocateMPSShareAndWholeGPU: a memory share's Allocate starts the
// GPU's MPS daemon (only that GPU's) and hands the pipe folder, /dev/shm,
// the MPS variables, device nodes, driver mounts and CDI names; a whole-GPU
// Allocate gets no MPS and stops a daemon left on its GPU.
func TestAllocateMPSShareAndWholeGPU(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	gpus := hostileGPUs(t)
	matcher := handoff.NewMatcher(hostileNode, hostileNames, 1024)
	matcher.Upsert(hostilePod("infer", hostileShare(gpus, 6, 20*1024), hostileNames.GPUMemory, 20))
	matcher.Upsert(hostilePod("train", hostileWhole(gpus, 2, 3), hostileNames.GPU, 2))
	state := NewState(gpus, 1024)
	daemons := fakeDaemons(t, "")
	minor := map[string]int{}
	for _, g := range gpus {
		minor[g.UUID] = g.Index + 10
	}
	cont := Containers{MPS: daemons, DeviceNodes: true, Minor: minor, DriverMounts: []string{"/usr/lib/nvidia"}, CDIKind: "nvidia.com/gpu"}
	memPlugin := NewPlugin(handoff.KindMemory, hostileNames.GPUMemory, state, matcher, 50*time.Millisecond, nil)
	memPlugin.SetContainers(cont)
	gpuPlugin := NewPlugin(handoff.KindGPU, hostileNames.GPU, state, matcher, 50*time.Millisecond, nil)
	gpuPlugin.SetContainers(cont)

	var ids []string
	for n := range 20 {
		ids = append(ids, handoff.MemoryDeviceID(gpus[6].UUID, n))
	}
	resp, err := memPlugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	share := gpus[6].UUID
	run := daemons.Running()
	if len(run) != 1 || run[share] == 0 {
		t.Fatalf("daemons running = %v, want exactly GPU 6's", run)
	}
	if _, err := os.Stat(filepath.Join(daemons.PipeDir(share), mps.PIDFile)); err != nil {
		t.Errorf("pipe folder has no PID file: %v", err)
	}
	wantMounts := []string{daemons.PipeDir(share) + ":/run/nvidia-mps", "/run/rota/mps/shm:/dev/shm", "/usr/lib/nvidia:/usr/lib/nvidia:ro"}
	if got := mountStrings(cr.Mounts); strings.Join(got, " ") != strings.Join(wantMounts, " ") {
		t.Errorf("mounts = %v, want %v", got, wantMounts)
	}
	for k, v := range map[string]string{"CUDA_MPS_PIPE_DIRECTORY": "/run/nvidia-mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "NVIDIA_VISIBLE_DEVICES": share, "ROTA_ASSIGNED_POD": "team-a/infer"} {
		if cr.Envs[k] != v {
			t.Errorf("env %s = %q, want %q", k, cr.Envs[k], v)
		}
	}
	var devs []string
	for _, d := range cr.Devices {
		devs = append(devs, d.HostPath+":"+d.Permissions)
	}
	if got := strings.Join(devs, " "); got != "/dev/nvidiactl:rw /dev/nvidia-uvm:rw /dev/nvidia-uvm-tools:rw /dev/nvidia16:rw" {
		t.Errorf("device specs = %s", got)
	}
	if len(cr.CdiDevices) != 1 || cr.CdiDevices[0].Name != "nvidia.com/gpu="+share {
		t.Errorf("CDI devices = %v", cr.CdiDevices)
	}

	// A whole-GPU pod on GPUs 2,3 after a share left a daemon on GPU 2.
	if err := daemons.Ensure(ctx, gpus[2].UUID); err != nil {
		t.Fatal(err)
	}
	left := daemons.Running()[gpus[2].UUID]
	resp, err = gpuPlugin.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{gpus[2].UUID, gpus[3].UUID}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr = resp.ContainerResponses[0]
	if _, ok := cr.Envs["CUDA_MPS_PIPE_DIRECTORY"]; ok {
		t.Errorf("whole GPU got MPS: %v", cr.Envs)
	}
	if _, ok := cr.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; ok {
		t.Errorf("whole GPU got a memory limit: %v", cr.Envs)
	}
	if got := mountStrings(cr.Mounts); len(got) != 1 {
		t.Errorf("whole GPU mounts = %v, want the driver mount only", got)
	}
	if _, ok := daemons.Running()[gpus[2].UUID]; ok {
		t.Errorf("daemon of GPU 2 still wanted after a whole-GPU allocation")
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(left) + "/stat"); err == nil && !strings.Contains(string(b), ") Z") {
		t.Errorf("daemon %d of GPU 2 still running: %s", left, b)
	}
	if len(cr.CdiDevices) != 2 || len(cr.Devices) != 5 {
		t.Errorf("whole GPU: CDI %v, devices %d", cr.CdiDevices, len(cr.Devices))
	}
}

// TestAllocateShareWithoutMPS: MPS configured but the binary missing — the
// share gets its environment only, and the document says why.
func TestAllocateShareWithoutMPS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	gpus := hostileGPUs(t)
	matcher := handoff.NewMatcher(hostileNode, hostileNames, 1024)
	matcher.Upsert(hostilePod("infer", hostileShare(gpus, 6, 2*1024), hostileNames.GPUMemory, 2))
	state := NewState(gpus, 1024)
	daemons := fakeDaemons(t, "/nonexistent/nvidia-cuda-mps-control")
	st := daemons.Status()
	state.SetMPS(&st)
	p := NewPlugin(handoff.KindMemory, hostileNames.GPUMemory, state, matcher, 50*time.Millisecond, nil)
	p.SetContainers(Containers{MPS: daemons})
	ids := []string{handoff.MemoryDeviceID(gpus[6].UUID, 0), handoff.MemoryDeviceID(gpus[6].UUID, 1)}
	resp, err := p.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	if len(cr.Mounts) != 0 || cr.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=2048M" || cr.Envs["CUDA_MPS_PIPE_DIRECTORY"] != "" {
		t.Errorf("response = %v", cr)
	}
	doc, _ := state.Document()
	if doc.MPS == nil || doc.MPS.Available || !strings.Contains(doc.MPS.Reason, "not found") {
		t.Errorf("document MPS = %+v", doc.MPS)
	}
}

// TestAllocateRefusedWhenDaemonCannotStart: MPS available but the GPU's
// daemon fails to start — the Allocate is refused (the share would run
// unenforced) and the container's devices are taken back.
func TestAllocateRefusedWhenDaemonCannotStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	t.Setenv(mpsfake.FailEnv, "1")
	gpus := hostileGPUs(t)
	matcher := handoff.NewMatcher(hostileNode, hostileNames, 1024)
	matcher.Upsert(hostilePod("infer", hostileShare(gpus, 6, 1024), hostileNames.GPUMemory, 1))
	p := NewPlugin(handoff.KindMemory, hostileNames.GPUMemory, NewState(gpus, 1024), matcher, 50*time.Millisecond, nil)
	p.SetContainers(Containers{MPS: fakeDaemons(t, "")})
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{handoff.MemoryDeviceID(gpus[6].UUID, 0)}}}}
	_, err := p.Allocate(ctx, req)
	if err == nil || !strings.Contains(err.Error(), "MPS control daemon for GPU "+gpus[6].UUID+" of team-a/infer is not running") {
		t.Fatalf("Allocate() = %v", err)
	}
	if n := matcher.Allocated("uid-infer", handoff.KindMemory); n != 0 {
		t.Errorf("refused container still counted allocated: %d", n)
	}
	os.Unsetenv(mpsfake.FailEnv)
	if _, err := p.Allocate(ctx, req); err != nil {
		t.Errorf("retry after the daemon can start: %v", err)
	}
}

// TestDocumentLeaks: leaked memory lowers the published capacity, never
// below the live pods' assignments or one unit; a GPU left with less than a
// unit free is published Unhealthy; clearing restores the document.
func TestDocumentLeaks(t *testing.T) {
	gpus := h200(t)
	s := NewState(gpus, 1024)
	before, _ := s.Document()
	_, ch := s.Document()
	if !s.SetLeaks(map[string]Leak{gpus[0].UUID: {Leaked: 4096}, gpus[1].UUID: {Leaked: 100000, Floor: 60000}, gpus[2].UUID: {Leaked: 144000}}) {
		t.Fatal("SetLeaks reported no change")
	}
	select {
	case <-ch:
	default:
		t.Error("SetLeaks did not signal a change")
	}
	if s.SetLeaks(map[string]Leak{gpus[0].UUID: {Leaked: 4096}, gpus[1].UUID: {Leaked: 100000, Floor: 60000}, gpus[2].UUID: {Leaked: 144000}, gpus[3].UUID: {}}) {
		t.Error("the same leaks reported as a change")
	}
	doc, _ := s.Document()
	if err := doc.Validate(); err != nil {
		t.Fatal(err)
	}
	g := doc.GPUs
	if g[0].MemoryMiB != 144384-4096 || g[0].LeakedMiB != 4096 || g[0].Health != contract.Healthy {
		t.Errorf("GPU 0: %+v", g[0])
	}
	if g[1].MemoryMiB != 60000 || g[1].LeakedMiB != 100000 || g[1].Health != contract.Unhealthy || !strings.Contains(g[1].Reason, "100000 MiB held by processes of no pod") {
		t.Errorf("GPU 1 (floor above what is left): %+v", g[1])
	}
	if g[2].MemoryMiB != 1024 || g[2].Health != contract.Unhealthy {
		t.Errorf("GPU 2 (almost all leaked): %+v", g[2])
	}
	if g[3].LeakedMiB != 0 || g[3].MemoryMiB != 144384 {
		t.Errorf("GPU 3: %+v", g[3])
	}
	s.SetLeaks(nil)
	after, _ := s.Document()
	b1, _ := before.Marshal()
	b2, _ := after.Marshal()
	if string(b1) != string(b2) {
		t.Errorf("cleared leaks: %s, want %s", b2, b1)
	}
}
