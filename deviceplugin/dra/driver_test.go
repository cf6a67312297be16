package dra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/server"
	"github.com/rota-sched/rota/pkg/contract"
	pdra "github.com/rota-sched/rota/pkg/dra"
)

const testDriver = "gpu.example.com"

func testGPUs() []contract.TopologyGPU {
	return []contract.TopologyGPU{
		{Index: 0, UUID: "GPU-aaaa", MemoryMiB: 80 * 1024},
		{Index: 1, UUID: "GPU-bbbb", MemoryMiB: 80 * 1024},
	}
}

func gpuMap() map[string]contract.TopologyGPU {
	m := map[string]contract.TopologyGPU{}
	for _, g := range testGPUs() {
		m[pdra.DeviceName(g.Index)] = g
	}
	return m
}

type result struct {
	request, driver, device string
	memory                  string // "" = no consumed capacity
}

func claim(results ...result) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "train-gpu", UID: "c1"}}
	c.Status.Allocation = &resourcev1.AllocationResult{}
	for _, r := range results {
		a := resourcev1.DeviceRequestAllocationResult{Request: r.request, Driver: r.driver, Pool: "node-a", Device: r.device}
		if r.memory != "" {
			a.ConsumedCapacity = map[resourcev1.QualifiedName]resource.Quantity{pdra.CapacityMemory: resource.MustParse(r.memory)}
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, a)
	}
	c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "train-0", UID: "p1"}}
	return c
}

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		claim   *resourcev1.ResourceClaim
		kind    handoff.Kind
		uuids   []string
		mib     contract.MiB
		results int
		err     string
	}{
		{name: "20Gi share", claim: claim(result{"gpu", testDriver, "gpu-1", "20Gi"}),
			kind: handoff.KindMemory, uuids: []string{"GPU-bbbb"}, mib: 20 * 1024, results: 1},
		{name: "all the memory is the whole GPU", claim: claim(result{"gpu", testDriver, "gpu-0", "80Gi"}),
			kind: handoff.KindGPU, uuids: []string{"GPU-aaaa"}, results: 1},
		{name: "no consumed capacity is the whole GPU", claim: claim(result{"gpu", testDriver, "gpu-0", ""}),
			kind: handoff.KindGPU, uuids: []string{"GPU-aaaa"}, results: 1},
		{name: "two whole GPUs", claim: claim(result{"gpu", testDriver, "gpu-0", ""}, result{"gpu", testDriver, "gpu-1", "80Gi"}),
			kind: handoff.KindGPU, uuids: []string{"GPU-aaaa", "GPU-bbbb"}, results: 2},
		{name: "another driver's devices are not ours", claim: claim(result{"nic", "nic.example.org", "eth0", ""}, result{"gpu", testDriver, "gpu-0", "1Gi"}),
			kind: handoff.KindMemory, uuids: []string{"GPU-aaaa"}, mib: 1024, results: 1},
		{name: "nothing of ours", claim: claim(result{"nic", "nic.example.org", "eth0", ""})},
		{name: "shares of two GPUs", claim: claim(result{"gpu", testDriver, "gpu-0", "10Gi"}, result{"gpu", testDriver, "gpu-1", "10Gi"}),
			err: "a claim may share one GPU only"},
		{name: "two requests", claim: claim(result{"a", testDriver, "gpu-0", ""}, result{"b", testDriver, "gpu-1", ""}),
			err: "one request per claim"},
		{name: "unknown device", claim: claim(result{"gpu", testDriver, "gpu-7", "1Gi"}), err: "which this node does not have"},
		{name: "same device twice", claim: claim(result{"gpu", testDriver, "gpu-0", ""}, result{"gpu", testDriver, "gpu-0", ""}),
			err: "twice"},
		{name: "more than the GPU has", claim: claim(result{"gpu", testDriver, "gpu-0", "81Gi"}), err: "which has 81920 MiB"},
		{name: "part of a MiB", claim: claim(result{"gpu", testDriver, "gpu-0", "1000Ki"}), err: "which has"},
		{name: "nothing consumed", claim: claim(result{"gpu", testDriver, "gpu-0", "0"}), err: "consumed 0"},
		{name: "not allocated", claim: &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "x"}},
			err: "is not allocated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Plan(tc.claim, testDriver, gpuMap())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to say %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Results) != tc.results {
				t.Fatalf("results = %d, want %d", len(p.Results), tc.results)
			}
			if tc.results == 0 {
				return
			}
			g := p.Grant
			if g.Kind != tc.kind || !slices.Equal(g.UUIDs, tc.uuids) || g.MemoryMiB != tc.mib {
				t.Fatalf("grant = %v %v %d MiB, want %v %v %d MiB", g.Kind, g.UUIDs, g.MemoryMiB, tc.kind, tc.uuids, tc.mib)
			}
			if g.Pod != "ml/train-0" || g.PodUID != "p1" {
				t.Fatalf("grant's pod = %s (%s), want the claim's one consumer ml/train-0 (p1)", g.Pod, g.PodUID)
			}
		})
	}
}

// recorder is a Responder that records the grants and answers as
// server.Containers does without MPS.
type recorder struct{ grants []handoff.Grant }

func (r *recorder) Response(ctx context.Context, g handoff.Grant) (*pluginapi.ContainerAllocateResponse, error) {
	r.grants = append(r.grants, g)
	resp, err := server.Containers{}.Response(ctx, g)
	if err != nil {
		return nil, err
	}
	resp.Mounts = append(resp.Mounts, &pluginapi.Mount{HostPath: "/run/rota/mps/GPU-bbbb/pipe", ContainerPath: "/run/nvidia-mps"})
	resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: "/dev/nvidia1", ContainerPath: "/dev/nvidia1", Permissions: "rw"})
	resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: "nvidia.com/gpu=GPU-bbbb"})
	return resp, nil
}

func TestPrepareWritesTheClaimsCDISpec(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	d, dir := newTestDriver(t, rec)
	share := claim(result{"gpu", testDriver, "gpu-1", "20Gi"})
	bad := claim(result{"gpu", testDriver, "gpu-9", "20Gi"})
	bad.UID = "c2"
	out, err := d.PrepareResourceClaims(ctx, []*resourcev1.ResourceClaim{share, bad})
	if err != nil {
		t.Fatal(err)
	}
	if out["c2"].Err == nil {
		t.Fatalf("a claim naming an unknown device prepared: %+v", out["c2"])
	}
	res := out["c1"]
	if res.Err != nil || len(res.Devices) != 1 {
		t.Fatalf("prepare = %+v", res)
	}
	dev := res.Devices[0]
	wantIDs := []string{testDriver + "/claim=c1", "nvidia.com/gpu=GPU-bbbb"}
	if dev.DeviceName != "gpu-1" || dev.PoolName != "node-a" || !slices.Equal(dev.Requests, []string{"gpu"}) ||
		!slices.Equal(dev.CDIDeviceIDs, wantIDs) {
		t.Fatalf("device = %+v, want gpu-1 of node-a for request gpu with CDI devices %v", dev, wantIDs)
	}
	if len(rec.grants) != 1 || rec.grants[0].Kind != handoff.KindMemory || rec.grants[0].MemoryMiB != 20*1024 {
		t.Fatalf("grants = %+v", rec.grants)
	}

	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || filepath.Base(files[0]) != testDriver+"_c1.json" {
		t.Fatalf("files = %v, want one spec for claim c1 (and no temporary file)", files)
	}
	var spec cdispec.Spec
	data, _ := os.ReadFile(files[0])
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Kind != testDriver+"/claim" || len(spec.Devices) != 1 || spec.Devices[0].Name != "c1" {
		t.Fatalf("spec = %s", data)
	}
	e := spec.Devices[0].ContainerEdits
	for _, want := range []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M", "NVIDIA_VISIBLE_DEVICES=GPU-bbbb",
		"ROTA_ASSIGNED_POD=ml/train-0", "ROTA_CLAIM=ml/train-gpu", "ROTA_GPU_MEMORY_MIB=20480"} {
		if !slices.Contains(e.Env, want) {
			t.Errorf("env %v lacks %s", e.Env, want)
		}
	}
	if len(e.Mounts) != 1 || e.Mounts[0].ContainerPath != "/run/nvidia-mps" || !slices.Equal(e.Mounts[0].Options, []string{"rbind", "rw"}) {
		t.Errorf("mounts = %+v", e.Mounts)
	}
	if len(e.DeviceNodes) != 1 || e.DeviceNodes[0].Path != "/dev/nvidia1" || e.DeviceNodes[0].HostPath != "/dev/nvidia1" {
		t.Errorf("device nodes = %+v", e.DeviceNodes)
	}

	// Preparing again (the kubelet retries after a restart) rewrites it.
	if out, _ := d.PrepareResourceClaims(ctx, []*resourcev1.ResourceClaim{share}); out["c1"].Err != nil {
		t.Fatal(out["c1"].Err)
	}
	un, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "train-gpu"}, UID: "c1"},
		{NamespacedName: types.NamespacedName{Namespace: "ml", Name: "never"}, UID: "c9"},
	})
	if err != nil || un["c1"] != nil || un["c9"] != nil {
		t.Fatalf("unprepare = %v, %v", un, err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Fatalf("files after unprepare = %v", files)
	}
}

func TestPrepareWholeGPUs(t *testing.T) {
	rec := &recorder{}
	d, dir := newTestDriver(t, rec)
	c := claim(result{"gpu", testDriver, "gpu-0", ""}, result{"gpu", testDriver, "gpu-1", ""})
	out, _ := d.PrepareResourceClaims(context.Background(), []*resourcev1.ResourceClaim{c})
	res := out["c1"]
	if res.Err != nil || len(res.Devices) != 2 || len(res.Devices[0].CDIDeviceIDs) == 0 || len(res.Devices[1].CDIDeviceIDs) != 0 {
		t.Fatalf("prepare = %+v: want two devices, the claim's CDI device named once", res)
	}
	data := specFile(t, dir)
	if !strings.Contains(string(data), "NVIDIA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb") || strings.Contains(string(data), "CUDA_MPS") {
		t.Fatalf("spec = %s: want both GPUs and no MPS limit", data)
	}
}

// An admin-access claim (monitoring) sees its GPU and stops nothing: a
// whole-GPU grant would stop the MPS daemon of the shares running there.
func TestPrepareAdminAccessLeavesTheGPUAlone(t *testing.T) {
	rec := &recorder{}
	d, dir := newTestDriver(t, rec)
	c := claim(result{"gpu", testDriver, "gpu-1", ""})
	admin := true
	c.Status.Allocation.Devices.Results[0].AdminAccess = &admin
	out, _ := d.PrepareResourceClaims(context.Background(), []*resourcev1.ResourceClaim{c})
	if out["c1"].Err != nil || len(out["c1"].Devices) != 1 {
		t.Fatalf("prepare = %+v", out["c1"])
	}
	if len(rec.grants) != 0 {
		t.Fatalf("an admin-access claim went through the containers' grant (which stops a whole GPU's MPS daemon): %+v", rec.grants)
	}
	if data := specFile(t, dir); !strings.Contains(string(data), "NVIDIA_VISIBLE_DEVICES=GPU-bbbb") {
		t.Fatalf("spec = %s", data)
	}
	mixed := claim(result{"gpu", testDriver, "gpu-0", ""}, result{"gpu", testDriver, "gpu-1", "1Gi"})
	mixed.Status.Allocation.Devices.Results[0].AdminAccess = &admin
	if _, err := Plan(mixed, testDriver, gpuMap()); err == nil || !strings.Contains(err.Error(), "admin access") {
		t.Fatalf("admin access with a share: %v", err)
	}
}

// With the device-plugin mode's --device-nodes and --driver-mounts, a
// claim's CDI spec carries the same device nodes and mounts an Allocate
// answer would: server.Containers builds both.
func TestPrepareDeviceNodes(t *testing.T) {
	d, dir := newTestDriver(t, server.Containers{DeviceNodes: true, Minor: map[string]int{"GPU-aaaa": 0, "GPU-bbbb": 1},
		DriverMounts: []string{"/usr/lib/nvidia"}})
	out, _ := d.PrepareResourceClaims(context.Background(), []*resourcev1.ResourceClaim{claim(result{"gpu", testDriver, "gpu-1", ""})})
	if out["c1"].Err != nil {
		t.Fatal(out["c1"].Err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(specFile(t, dir), &spec); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.HostPath+"->"+n.Path+":"+n.Permissions)
	}
	want := []string{"/dev/nvidiactl->/dev/nvidiactl:rw", "/dev/nvidia-uvm->/dev/nvidia-uvm:rw",
		"/dev/nvidia-uvm-tools->/dev/nvidia-uvm-tools:rw", "/dev/nvidia1->/dev/nvidia1:rw"}
	if !slices.Equal(nodes, want) {
		t.Errorf("device nodes %v, want %v", nodes, want)
	}
	m := spec.Devices[0].ContainerEdits.Mounts
	if len(m) != 1 || m[0].HostPath != "/usr/lib/nvidia" || m[0].ContainerPath != "/usr/lib/nvidia" || !slices.Contains(m[0].Options, "ro") {
		t.Errorf("mounts %+v, want the driver folder read-only", m)
	}
}

// newTestDriver is a driver of testGPUs writing into a folder of the test's.
func newTestDriver(t *testing.T, r Responder) (*Driver, string) {
	dir := t.TempDir()
	d := NewDriver(testDriver, dir, r)
	d.SetGPUs(testGPUs())
	return d, dir
}

// specFile reads claim c1's CDI spec.
func specFile(t *testing.T, dir string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, testDriver+"_c1.json"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func FuzzPlan(f *testing.F) {
	f.Add("gpu", testDriver, "gpu-1", "20Gi", "gpu", "gpu-0", "")
	f.Add("a", testDriver, "gpu-0", "80Gi", "b", "gpu-1", "1Gi")
	f.Add("gpu", testDriver, "gpu-0", "-1", "gpu", "gpu-0", "1e30")
	f.Fuzz(func(t *testing.T, req1, drv1, dev1, mem1, req2, dev2, mem2 string) {
		var rs []result
		for _, r := range []result{{req1, drv1, dev1, mem1}, {req2, testDriver, dev2, mem2}} {
			if r.memory != "" {
				if _, err := resource.ParseQuantity(r.memory); err != nil {
					r.memory = ""
				}
			}
			rs = append(rs, r)
		}
		p, err := Plan(claim(rs...), testDriver, gpuMap())
		if err != nil {
			return
		}
		g := p.Grant
		switch g.Kind {
		case handoff.KindMemory:
			if len(g.UUIDs) != 1 || g.MemoryMiB <= 0 || g.MemoryMiB >= 80*1024 {
				t.Fatalf("share grant %+v out of bounds", g)
			}
		case handoff.KindGPU:
			if len(g.UUIDs) != len(p.Results) || g.MemoryMiB != 0 {
				t.Fatalf("whole grant %+v for %d results", g, len(p.Results))
			}
		}
	})
}
