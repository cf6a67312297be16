//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pdra "github.com/rota-sched/rota/pkg/dra"
)

// TestDRAMemoryShare runs rota-device-plugin in DRA mode (--dra-mode, with
// --mps and the nvidia-cuda-mps-control stand-in) on the real node, whose
// kubelet talks to containerd 2.x with CDI on (hack/containerd.sh), beside
// kube-controller-manager's resourceclaim controller:
//   - the plugin registers with the kubelet and publishes the node's
//     ResourceSlice: one device per GPU, shared, its 80 GiB as consumable
//     memory, with the GPU's UUID;
//   - a pod whose claim template asks a DeviceClass of the driver for
//     20 GiB of one GPU is allocated by kube-scheduler's DRA plugin (the
//     claim's consumed capacity is 20Gi), prepared by the plugin, and runs;
//   - its container has NVIDIA_VISIBLE_DEVICES the allocated GPU's UUID,
//     CUDA_MPS_PINNED_DEVICE_MEM_LIMIT 0=20480M, CUDA_MPS_PIPE_DIRECTORY and
//     the claim's name, and sees the GPU's MPS daemon's pipe folder mounted:
//     all of it put there by containerd from the CDI spec the plugin wrote;
//   - the GPU's MPS daemon (the stand-in) runs for that GPU alone;
//   - a second pod asking for 70 GiB is placed on another GPU: 20 + 70 GiB
//     do not fit in one GPU's 80;
//   - a GPU that fails (Xid 79 in the fake backend) is tainted NoSchedule
//     in the slice;
//   - deleting the pods unprepares the claims: their CDI specs go.
func TestDRAMemoryShare(t *testing.T) {
	const (
		containerPipe = "/run/rota-mps-pipe"
		class         = "gpu-share.example.com"
	)
	began := time.Now()
	dir, root := mpsFolder(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	bin := buildMPSStandin(ctx, t, dir)
	e := StartT(t, Options{DRA: true, DevicePluginArgs: []string{
		"--mps", "--mps-binary=" + bin, "--mps-root=" + root, "--mps-container-pipe-dir=" + containerPipe,
	}})
	driver := "gpu." + e.Names.Domain

	// The slice.
	slice, err := e.Slice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slice.Spec.Driver != driver || len(slice.Spec.Devices) != DefaultGPUs.Count {
		t.Fatalf("slice of driver %s with %d devices, want %s with %d", slice.Spec.Driver, len(slice.Spec.Devices), driver, DefaultGPUs.Count)
	}
	uuids := map[string]string{} // device name → UUID
	for _, d := range slice.Spec.Devices {
		mem := d.Capacity[pdra.CapacityMemory].Value
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || mem.Cmp(resource.MustParse("80Gi")) != 0 {
			t.Fatalf("device %s: shared=%v memory=%s, want shared with 80Gi of consumable memory", d.Name, d.AllowMultipleAllocations, mem.String())
		}
		uuids[d.Name] = *d.Attributes[pdra.AttrUUID].StringValue
	}
	t.Logf("ResourceSlice %s: %d shared devices of 80Gi (%s)", slice.Name, len(slice.Spec.Devices), time.Since(began).Round(time.Millisecond))

	const ns = "dra"
	if err := e.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer deleteAll(ctx, t, e, ns)
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}},
	}}
	if _, err := e.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = e.Client.ResourceV1().DeviceClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	}()

	// share creates a pod whose claim template asks for gib GiB of one GPU,
	// waits until it runs, and returns its claim.
	share := func(name string, gib int) *resourcev1.ResourceClaim {
		t.Helper()
		tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
					Capacity: &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{
						pdra.CapacityMemory: resource.MustParse(strconv.Itoa(gib) + "Gi")}},
				}}},
			}}}}
		if _, err := e.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := e.Pod(ns, name, Request{}, Request{})
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl.Name}}
		p.Spec.Containers[0].Command = []string{"/" + imageBinary, "env", containerPipe}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		if _, err := e.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod, err := e.WaitRunning(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			t.Fatalf("pod %s runs without a generated claim: %+v", name, pod.Status.ResourceClaimStatuses)
		}
		c, err := e.Client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := share("share", 20)
	res := c.Status.Allocation.Devices.Results
	if len(res) != 1 || res[0].Driver != driver {
		t.Fatalf("claim %s allocated %+v, want one device of %s", c.Name, res, driver)
	}
	if got := res[0].ConsumedCapacity[pdra.CapacityMemory]; got.Cmp(resource.MustParse("20Gi")) != 0 {
		t.Fatalf("claim %s consumed %s of %s's memory, want 20Gi", c.Name, got.String(), res[0].Device)
	}
	uuid := uuids[res[0].Device]
	t.Logf("claim %s: 20Gi of %s (%s), pod running (%s)", c.Name, res[0].Device, uuid, time.Since(began).Round(time.Millisecond))

	// The share's environment, from the claim's CDI spec.
	e.checkEnv(ctx, t, ns, "share", map[string]string{
		"NVIDIA_VISIBLE_DEVICES":           uuid,
		"CUDA_MPS_PIPE_DIRECTORY":          containerPipe,
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
		"ROTA_CLAIM":                       ns + "/" + c.Name,
		"ROTA_ASSIGNED_POD":                ns + "/share",
	})
	pipe := filepath.Join(root, uuid, "pipe")
	pid := daemonPID(t, pipe)
	if pid == 0 {
		t.Fatalf("no live MPS daemon for GPU %s of the claim: no PID file with a live PID in %s", uuid, pipe)
	}
	checkDaemonProcess(t, pid, bin, map[string]string{"CUDA_VISIBLE_DEVICES": uuid, "CUDA_MPS_PIPE_DIRECTORY": pipe})
	listing := e.waitListing(ctx, t, ns, "share", containerPipe, servedBy(pid))
	t.Logf("the share's container sees %s: %s", containerPipe, listing)
	specs, _ := filepath.Glob(filepath.Join(e.CDIDir, "*.json"))
	if len(specs) != 1 {
		t.Fatalf("CDI specs %v, want the claim's one", specs)
	}

	// 70 GiB more cannot share the 20 GiB's GPU.
	big := share("big", 70)
	bigDev := big.Status.Allocation.Devices.Results[0].Device
	if bigDev == res[0].Device {
		t.Fatalf("claim %s (70Gi) allocated on %s, which holds 20Gi already", big.Name, bigDev)
	}
	e.checkEnv(ctx, t, ns, "big", map[string]string{
		"NVIDIA_VISIBLE_DEVICES": uuids[bigDev], "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=71680M"})

	// A GPU that fails (Xid 79) is tainted in the slice, so no new claim
	// lands on it.
	var failed string
	for name := range uuids {
		if name != res[0].Device && name != bigDev {
			failed = name
			break
		}
	}
	if err := os.WriteFile(e.HealthFile, []byte(uuids[failed]+"=xid:79\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, 30*time.Second, "device "+failed+" tainted in the slice", e.plugin, func() (bool, string) {
		s, err := e.Slice(ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, d := range s.Spec.Devices {
			if d.Name == failed {
				return len(d.Taints) == 1 && d.Taints[0].Key == pdra.TaintUnhealthy &&
					d.Taints[0].Effect == resourcev1.DeviceTaintEffectNoSchedule, fmt.Sprint(d.Taints)
			}
		}
		return false, "no device " + failed
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("GPU %s (%s) failed: tainted NoSchedule in the slice", failed, uuids[failed])

	// Deleting the pods unprepares their claims.
	if err := e.DeletePods(ctx, ns, "share", "big"); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, time.Minute, "the claims' CDI specs to go", e.plugin, func() (bool, string) {
		specs, _ := filepath.Glob(filepath.Join(e.CDIDir, "*.json"))
		return len(specs) == 0, strings.Join(specs, " ")
	}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(e.Dir, "rota-device-plugin.log")); err == nil && !strings.Contains(string(b), "Unprepared the claim") {
		t.Errorf("the plugin's log has no unprepared claim")
	}
	t.Logf("scenario done in %s", time.Since(began).Round(time.Millisecond))
}
