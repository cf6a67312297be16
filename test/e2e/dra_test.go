//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/deviceplugin/server"
	"github.com/rota-sched/rota/pkg/contract"
	pkgdra "github.com/rota-sched/rota/pkg/dra"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestDRACoexistence: a node whose GPUs a DRA driver publishes is never
// double-booked. On the real API server (resource.k8s.io/v1 served; the
// slice Rota's DRA mode would publish is first checked valid, dry run):
//   - dra-0 runs a rota-device-plugin; the test publishes a ResourceSlice
//     of driver gpu.nvidia.com (in the chart's list of GPU drivers) for it.
//     The plugin stops advertising its GPUs (its plugin sockets go) and
//     puts a GPUsManagedByDRA Warning event on the Node.
//   - dra-1 has no plugin (the harness keeps its capacity), so only the
//     extender can keep work off it: a slice of a driver Rota was not told
//     about names one of its GPUs' UUIDs. A 2-GPU pod is refused with the
//     reason, in its FailedScheduling event and in kubectl rota why.
//   - When dra-1's slice goes, the extender touches the refused pod and it
//     runs there well before kube-scheduler's five-minute retry; when
//     dra-0's goes, its plugin registers again and a new pod runs there.
func TestDRACoexistence(t *testing.T) {
	const name = "dra"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	withPlugin := h100
	withPlugin.Count, withPlugin.Plugin = 2, true
	plain := h100
	plain.Count = 2
	dra0 := nodes(ctx, t, name, "dra", 1, withPlugin)[0]
	dra1 := nodes(ctx, t, name, "dra-plain", 1, plain)[0]
	if err := dra0.Stub.WaitRegistered(ctx, env.Names.GPU, 0); err != nil {
		t.Fatal(err)
	}
	slices := env.Client.ResourceV1().ResourceSlices()

	// The ResourceSlice Rota's DRA mode would publish for dra-0 (docs/dra.md)
	// is valid here, and the API server keeps its consumable memory
	// (DRAConsumableCapacity, beta and on in v1.37). Dry run: nothing stored.
	nodeObj, err := env.Client.CoreV1().Nodes().Get(ctx, dra0.Spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := contract.ParseTopology([]byte(nodeObj.Annotations[env.Names.TopologyAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	modeSlice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "dra-mode-check"},
		Spec: pkgdra.SliceFor("dra-mode-check", "gpu.rota.example.com", topo)}
	got, err := slices.Create(ctx, modeSlice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("the API server refuses the slice Rota's DRA mode would publish: %v", err)
	}
	if d := got.Spec.Devices[0]; d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations ||
		d.Capacity[pkgdra.CapacityMemory].RequestPolicy == nil {
		t.Errorf("the API server dropped the consumable memory of Rota's DRA-mode slice: %+v", d)
	}

	publish := func(node *harness.GPUNode, driver string) string {
		t.Helper()
		n, uuid := node.Spec.Name, node.UUID(0)
		s := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: n + "-" + driver},
			Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &n,
				Pool: resourcev1.ResourcePool{Name: n, ResourceSliceCount: 1},
				Devices: []resourcev1.Device{{Name: "gpu-0", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"uuid": {StringValue: &uuid}}}}},
		}
		if _, err := slices.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating a ResourceSlice (is resource.k8s.io/v1 served?): %v", err)
		}
		t.Cleanup(func() { _ = slices.Delete(context.Background(), s.Name, metav1.DeleteOptions{}) })
		return s.Name
	}
	nvidia := publish(dra0, "gpu.nvidia.com")
	acme := publish(dra1, "gpu.acme.example")

	// dra-0's device plugin stops advertising, and says so on the Node.
	sock := filepath.Join(dra0.Dir, "dp", server.SocketName(env.Names.GPU))
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := os.Stat(sock)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Fatalf("the device plugin of dra-0 still serves %s with a DRA driver publishing its GPUs", sock)
	}
	var event string
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + dra0.Spec.Name + ",reason=GPUsManagedByDRA"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		event = evs.Items[0].Message
		return true, nil
	})
	if err != nil || !strings.Contains(event, "gpu.nvidia.com") {
		t.Fatalf("no GPUsManagedByDRA event on dra-0 naming the driver (got %q): %v", event, err)
	}
	t.Logf("dra-0 event: %s", event)

	// Neither node takes b; dra-1's capacity is whole, so the refusal
	// there is the extender's.
	create(ctx, t, pod(ns, "b", name).GPUs(2).Obj())
	refusal := waitRefusal(ctx, t, ns, "DRA driver gpu.acme.example publishes GPU "+dra1.UUID(0), "b")
	t.Logf("b: %s", refusal)
	bin := buildKubectlRota(ctx, t)
	why := runKubectlRota(ctx, t, bin, "why", "b", "-n", ns, "--extender-url", env.ExtenderURL)
	for _, want := range []string{"DRA driver gpu.acme.example", "DRA driver gpu.nvidia.com"} {
		if !strings.Contains(why, want) {
			t.Errorf("kubectl rota why b does not say %q", want)
		}
	}
	if strings.Contains(why, "it fits now") {
		t.Errorf("kubectl rota why b says b fits now, on nodes whose GPUs DRA manages")
	}

	// dra-1's slice goes: b is touched and runs there.
	opened := time.Now()
	if err := slices.Delete(ctx, acme, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(ctx, t, ns, "b bound", func(ps []corev1.Pod) bool { return harness.Bound(ps) == 1 })
	if got := byName(pods, "b").Spec.NodeName; got != dra1.Spec.Name {
		t.Fatalf("b bound to %s, want %s", got, dra1.Spec.Name)
	}
	t.Logf("b bound %v after dra-1's slice went", time.Since(opened).Round(time.Second))

	// dra-0's slice goes: its plugin registers again, and c runs there.
	if err := slices.Delete(ctx, nvidia, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dra0.Stub.WaitRegistered(ctx, env.Names.GPU, 1); err != nil {
		t.Fatalf("the device plugin of dra-0 did not register again once the slice was gone: %v", err)
	}
	create(ctx, t, pod(ns, "c", name).GPUs(2).Obj())
	pods = waitPods(ctx, t, ns, "c bound", func(ps []corev1.Pod) bool { return harness.Bound(ps) == 2 })
	if got := byName(pods, "c").Spec.NodeName; got != dra0.Spec.Name {
		t.Fatalf("c bound to %s, want %s", got, dra0.Spec.Name)
	}
	checkInvariants(ctx, t, nil)
	note(name, "DRA drivers' ResourceSlices kept GPU work off their nodes until they went")
}
