package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/app"
	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

const node = "h200-0"

var names = contract.Default

// rig is one plugin on the dgxh200 mock, a kubelet stub and a fake API.
type rig struct {
	ctx    context.Context
	stub   *kubeletstub.Stub
	client *fake.Clientset
	events *discovery.MockEvents
	gpus   []topology.GPU
	done   chan error
}

func start(t *testing.T, objs ...any) *rig {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir := t.TempDir()
	stub, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	backend, events, err := discovery.OpenMock("dgxh200", discovery.MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	client := fake.NewClientset(nodeObj)
	cfg := config.Default()
	cfg.NodeName = node
	cfg.DevicePluginDir = dir
	cfg.PodResourcesSocket = ""
	cfg.MetricsListen = ""
	cfg.HealthInterval = 100 * time.Millisecond
	cfg.RecoveryQuiet = 300 * time.Millisecond
	cfg.KubeletPoll = 50 * time.Millisecond
	cfg.AllocateWait = 500 * time.Millisecond
	for _, o := range objs {
		if f, ok := o.(func(*config.Config)); ok {
			f(&cfg)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &rig{ctx: ctx, stub: stub, client: client, events: events, gpus: backend.GPUs(), done: make(chan error, 1)}
	go func() {
		r.done <- app.Run(ctx, app.Deps{Config: cfg, Backend: backend, Client: client, Metrics: metrics.New()})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run() = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run() did not return after cancel")
		}
		stub.Close()
		backend.Close()
	})
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	for _, res := range []string{names.GPU, names.GPUMemory} {
		if err := stub.WaitRegistered(wctx, res, 0); err != nil {
			t.Fatalf("%s never registered: %v", res, err)
		}
	}
	return r
}

func within(t *testing.T, d time.Duration, what string, r *rig, cond func(*kubeletstub.Stub) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, d)
	defer cancel()
	if err := r.stub.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s not within %s: %v", what, d, err)
	}
}

// podSpec builds a pod bound to node asking for res per container, with an
// assignment annotation when a is not nil.
func podSpec(name string, a *contract.Assignment, res string, perContainer ...int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.Now(), Annotations: map[string]string{}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for i, n := range perContainer {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i),
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): q}}})
	}
	if a != nil {
		b, err := a.Marshal()
		if err != nil {
			panic(err)
		}
		p.Annotations[names.AssignmentAnnotation] = string(b)
	}
	return p
}

func whole(gpus []topology.GPU, idx ...int) *contract.Assignment {
	a := &contract.Assignment{Version: contract.Version, Node: node, Whole: true}
	for _, i := range idx {
		a.GPUs = append(a.GPUs, contract.AssignedGPU{Index: i, UUID: gpus[i].UUID, MemoryMiB: gpus[i].MemoryMiB})
	}
	return a
}

func share(gpus []topology.GPU, idx int, mib contract.MiB) *contract.Assignment {
	return &contract.Assignment{Version: contract.Version, Node: node,
		GPUs: []contract.AssignedGPU{{Index: idx, UUID: gpus[idx].UUID, MemoryMiB: mib}}}
}

func (r *rig) create(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if _, err := r.client.CoreV1().Pods(p.Namespace).Create(r.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) topology(t *testing.T) (contract.Topology, bool) {
	t.Helper()
	n, err := r.client.CoreV1().Nodes().Get(r.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := n.Annotations[names.TopologyAnnotation]
	if !ok {
		return contract.Topology{}, false
	}
	doc, err := contract.ParseTopology([]byte(v))
	if err != nil {
		t.Fatalf("topology annotation: %v", err)
	}
	return doc, true
}

func waitTopology(t *testing.T, r *rig, d time.Duration, cond func(contract.Topology) bool) contract.Topology {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		doc, ok := r.topology(t)
		if ok && cond(doc) {
			return doc
		}
		if time.Now().After(deadline) {
			t.Fatalf("topology annotation not as expected within %s: %+v", d, doc)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAdvertisesDGXH200(t *testing.T) {
	r := start(t)
	// The dgxh200 mock reports 144384 MiB per GPU: exactly 141 GiB.
	if got := r.gpus[0].MemoryMiB; got != 144384 {
		t.Fatalf("mock memory = %d MiB, want 144384", got)
	}
	within(t, 2*time.Second, "device lists", r, func(s *kubeletstub.Stub) bool {
		g, gt := s.Count(names.GPU)
		m, mt := s.Count(names.GPUMemory)
		return g == 8 && gt == 8 && m == 8*141 && mt == 8*141
	})
	for _, d := range r.stub.Devices(names.GPU) {
		if !strings.HasPrefix(d.ID, "GPU-") {
			t.Errorf("gpu device ID %q is not a GPU UUID", d.ID)
		}
	}
	if !slices.ContainsFunc(r.stub.Devices(names.GPUMemory), func(d kubeletstub.Device) bool { return d.ID == r.gpus[3].UUID+"::140" }) {
		t.Errorf("memory device %s::140 missing", r.gpus[3].UUID)
	}
	doc := waitTopology(t, r, 2*time.Second, func(contract.Topology) bool { return true })
	if len(doc.GPUs) != 8 || doc.MemoryUnitMiB != 1024 || doc.Generation != 1 {
		t.Fatalf("topology = %d GPUs, unit %d, generation %d; want 8, 1024, 1", len(doc.GPUs), doc.MemoryUnitMiB, doc.Generation)
	}
	for _, g := range doc.GPUs {
		// DGX H200: NVSwitch, all 8 GPUs in one NVLink island, 2 NUMA nodes.
		if g.Island != 0 || len(g.Peers) != 7 || g.Health != contract.Healthy || g.NUMA != g.Index/4 || g.Model != "NVIDIA H200 141GB HBM3e" {
			t.Errorf("gpu %d = %+v", g.Index, g)
		}
	}
	for _, reg := range r.stub.Registrations() {
		if !reg.Options.GetPreferredAllocationAvailable {
			t.Errorf("%s registered without GetPreferredAllocationAvailable", reg.Resource)
		}
	}
}

func unhealthyIDs(s *kubeletstub.Stub, res string) []string {
	var out []string
	for _, d := range s.Devices(res) {
		if d.Health == pluginapi.Unhealthy {
			out = append(out, d.ID)
		}
	}
	return out
}

func TestXIDMakesGPUUnhealthyAndBack(t *testing.T) {
	r := start(t)
	bad := r.gpus[5].UUID
	r.events.InjectXID(2, 13) // application XID: ignored
	r.events.InjectXID(5, 79)
	begin := time.Now()
	within(t, 2*time.Second, "XID 79 in ListAndWatch", r, func(s *kubeletstub.Stub) bool {
		return len(unhealthyIDs(s, names.GPU)) == 1 && len(unhealthyIDs(s, names.GPUMemory)) == 141
	})
	t.Logf("XID 79 reached ListAndWatch in %s", time.Since(begin))
	if got := unhealthyIDs(r.stub, names.GPU); got[0] != bad {
		t.Fatalf("unhealthy = %v, want %s", got, bad)
	}
	for _, id := range unhealthyIDs(r.stub, names.GPUMemory) {
		if !strings.HasPrefix(id, bad+"::") {
			t.Fatalf("memory device %s unhealthy, want only %s's", id, bad)
		}
	}
	doc := waitTopology(t, r, 2*time.Second, func(d contract.Topology) bool { return d.GPUs[5].Health == contract.Unhealthy })
	if doc.GPUs[5].Reason != "XID 79" || doc.GPUs[2].Health != contract.Healthy {
		t.Fatalf("topology gpu5 = %+v, gpu2 = %+v", doc.GPUs[5], doc.GPUs[2])
	}
	// Quiet period (300 ms) plus a good probe: healthy again.
	within(t, 3*time.Second, "recovery", r, func(s *kubeletstub.Stub) bool {
		return len(unhealthyIDs(s, names.GPU)) == 0 && len(unhealthyIDs(s, names.GPUMemory)) == 0
	})
	waitTopology(t, r, 2*time.Second, func(d contract.Topology) bool { return d.GPUs[5].Health == contract.Healthy })
}

func TestLostGPUStaysUnhealthyUntilAdminOverride(t *testing.T) {
	r := start(t)
	r.events.SetLost(1, true)
	within(t, 2*time.Second, "lost GPU unhealthy", r, func(s *kubeletstub.Stub) bool {
		return slices.Equal(unhealthyIDs(s, names.GPU), []string{r.gpus[1].UUID})
	})
	time.Sleep(500 * time.Millisecond) // longer than the quiet period: the probe keeps failing
	if got := unhealthyIDs(r.stub, names.GPU); len(got) != 1 {
		t.Fatalf("lost GPU recovered by itself: unhealthy = %v", got)
	}
	// The admin decides it is fine (and the GPU answers again).
	r.events.SetLost(1, false)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		names.GPUHealthAnnotation: r.gpus[1].UUID + "=healthy"}}})
	if _, err := r.client.CoreV1().Nodes().Patch(r.ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, "override", r, func(s *kubeletstub.Stub) bool { return len(unhealthyIDs(s, names.GPU)) == 0 })
}

func TestKubeletRestartReregisters(t *testing.T) {
	r := start(t)
	before := len(r.stub.Registrations())
	if err := r.stub.Restart(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	within(t, 5*time.Second, "re-registration", r, func(s *kubeletstub.Stub) bool {
		g, _ := s.Count(names.GPU)
		m, _ := s.Count(names.GPUMemory)
		return len(s.Registrations()) >= before+2 && g == 8 && m == 8*141
	})
	t.Logf("re-registered %s after the kubelet restart", time.Since(begin))
}

func TestAllocateWholeGPUs(t *testing.T) {
	r := start(t)
	r.create(t, podSpec("train", whole(r.gpus, 2, 3), names.GPU, 2))
	a, err := r.stub.Allocate(r.ctx, names.GPU, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := r.gpus[2].UUID + "," + r.gpus[3].UUID
	if got := a.Response.Envs["NVIDIA_VISIBLE_DEVICES"]; got != want {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %q", got, want)
	}
	if got := a.Response.Envs["ROTA_ASSIGNED_POD"]; got != "team-a/train" {
		t.Errorf("ROTA_ASSIGNED_POD = %q", got)
	}
	if _, ok := a.Response.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; ok {
		t.Error("whole GPUs got an MPS memory limit")
	}
	// The pod is allocated now: a second request of the same shape has no owner.
	if _, err := r.stub.Allocate(r.ctx, names.GPU, 2, nil); err == nil || !strings.Contains(err.Error(), "every container already got its devices") {
		t.Errorf("second Allocate error = %v, want 'already got its devices'", err)
	}
}

func TestAllocateMemoryShare(t *testing.T) {
	r := start(t)
	r.create(t, podSpec("infer", share(r.gpus, 6, 20*1024), names.GPUMemory, 20))
	a, err := r.stub.Allocate(r.ctx, names.GPUMemory, 20, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range a.DeviceIDs {
		if !strings.HasPrefix(id, r.gpus[6].UUID+"::") {
			t.Fatalf("device %s is not on GPU 6", id)
		}
	}
	env := a.Response.Envs
	if env["NVIDIA_VISIBLE_DEVICES"] != r.gpus[6].UUID || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=20480M" || env["ROTA_GPU_MEMORY_MIB"] != "20480" {
		t.Errorf("env = %v", env)
	}
}

func TestAllocateWithoutAssignmentFails(t *testing.T) {
	r := start(t)
	r.create(t, podSpec("rogue", nil, names.GPU, 1))
	_, err := r.stub.Allocate(r.ctx, names.GPU, 1, nil)
	if err == nil {
		t.Fatal("Allocate succeeded for a pod without an assignment")
	}
	for _, want := range []string{"no pending pod on node h200-0", "team-a/rogue", "has no example.com/gpu-assignment annotation"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestTwoPendingPodsGetTheirOwnGPUs(t *testing.T) {
	r := start(t)
	r.create(t, podSpec("a", whole(r.gpus, 6), names.GPU, 1))
	r.create(t, podSpec("b", whole(r.gpus, 1, 4), names.GPU, 2))
	r.create(t, podSpec("c", share(r.gpus, 0, 8*1024), names.GPUMemory, 8))
	r.create(t, podSpec("d", share(r.gpus, 7, 8*1024), names.GPUMemory, 8))
	got := map[string]string{}
	for _, req := range []struct {
		res string
		n   int
	}{{names.GPU, 2}, {names.GPUMemory, 8}, {names.GPU, 1}, {names.GPUMemory, 8}} {
		a, err := r.stub.Allocate(r.ctx, req.res, req.n, nil)
		if err != nil {
			t.Fatal(err)
		}
		got[a.Response.Envs["ROTA_ASSIGNED_POD"]] = a.Response.Envs["NVIDIA_VISIBLE_DEVICES"]
	}
	want := map[string]string{
		"team-a/a": r.gpus[6].UUID,
		"team-a/b": r.gpus[1].UUID + "," + r.gpus[4].UUID,
		"team-a/c": r.gpus[0].UUID,
		"team-a/d": r.gpus[7].UUID,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s got %q, want %q", k, got[k], v)
		}
	}
}

func TestInformerLagIsAbsorbed(t *testing.T) {
	r := start(t)
	// The kubelet can see a binding before the plugin's informer does.
	go func() {
		time.Sleep(150 * time.Millisecond)
		r.create(t, podSpec("late", whole(r.gpus, 0), names.GPU, 1))
	}()
	a, err := r.stub.Allocate(r.ctx, names.GPU, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Response.Envs["NVIDIA_VISIBLE_DEVICES"] != r.gpus[0].UUID {
		t.Errorf("got %v", a.Response.Envs)
	}
}
