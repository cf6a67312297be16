package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/rota-sched/rota/deviceplugin/app"
	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/deviceplugin/podwatch"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

const prNode = "n1"

var prNames = contract.Default

// shortDir returns a new folder with a short path (unix socket paths are
// limited to 108 bytes; t.TempDir's include the test name).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rota-pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// listingPlugin is a device plugin for one resource that, in every
// GetPreferredAllocation and Allocate, lists the node's pod resources (as
// rota-device-plugin does to see which pod the kubelet is admitting) and
// records what it saw. Its first GetPreferredAllocation waits for gate.
type listingPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	devices  []*pluginapi.Device
	socket   string // the PodResources socket
	gate     chan struct{}
	entered  chan struct{} // closed when the first call waits at the gate

	mu    sync.Mutex
	first bool
	calls []string // "pref|alloc <resource>: <list>"
}

func (p *listingPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (p *listingPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *listingPlugin) record(ctx context.Context, call string) error {
	resp, err := listPodResources(ctx, p.socket)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, call+" "+p.resource+": "+render(resp))
	return nil
}

func (p *listingPlugin) GetPreferredAllocation(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	p.mu.Lock()
	wait := !p.first && p.gate != nil
	p.first = true
	p.mu.Unlock()
	if wait {
		close(p.entered)
		select {
		case <-p.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := p.record(ctx, "pref"); err != nil {
		return nil, err
	}
	out := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: c.AvailableDeviceIDs[:c.AllocationSize]})
	}
	return out, nil
}

func (p *listingPlugin) Allocate(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if err := p.record(ctx, "alloc"); err != nil {
		return nil, err
	}
	out := &pluginapi.AllocateResponse{}
	for range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return out, nil
}

func (p *listingPlugin) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// serve serves the plugin in dir and registers it with the stub.
func (p *listingPlugin) serve(t *testing.T, ctx context.Context, dir string, stub *kubeletstub.Stub) {
	t.Helper()
	endpoint := strings.ReplaceAll(p.resource, "/", "_") + ".sock"
	lis, err := net.Listen("unix", filepath.Join(dir, endpoint))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+stub.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version,
		Endpoint: endpoint, ResourceName: p.resource, Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := stub.WaitRegistered(wctx, p.resource, 0); err != nil {
		t.Fatal(err)
	}
}

func listPodResources(ctx context.Context, socket string) (*podresourcesapi.ListPodResourcesResponse, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
}

// render writes a List answer compactly: pod{container:ID,ID container:} …
// (namespaces left out, resources told apart by their device IDs).
func render(resp *podresourcesapi.ListPodResourcesResponse) string {
	var pods []string
	for _, p := range resp.PodResources {
		var cs []string
		for _, c := range p.Containers {
			var ids []string
			for _, d := range c.Devices {
				ids = append(ids, d.DeviceIds...)
			}
			cs = append(cs, c.Name+":"+strings.Join(ids, ","))
		}
		pods = append(pods, p.Name+"{"+strings.Join(cs, " ")+"}")
	}
	return strings.Join(pods, " ")
}

// rotaContainer is a container asking for n devices of res (none when n is 0).
func rotaContainer(name, res string, n int64) corev1.Container {
	c := corev1.Container{Name: name, Image: "busybox"}
	if n > 0 {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}
	}
	return c
}

func boundPod(name string, init []corev1.Container, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: prNode, InitContainers: init, Containers: containers},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// TestPodResourcesList: the stand-in's PodResources List shows, from inside
// the device plugin's calls, the pods it admitted (with their devices) and
// the pod it is admitting (with the devices its containers got so far), not
// the pods it has not reached yet; failed and released pods are gone; only
// app and sidecar containers are listed, as the kubelet does.
func TestPodResourcesList(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	dir := shortDir(t)
	stub, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	socket := filepath.Join(dir, PodResourcesSocketName)
	pr, err := startPodResources(socket, stub, prNames.GPU, prNames.GPUMemory)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()

	gpus := &listingPlugin{resource: prNames.GPU, socket: socket, gate: make(chan struct{}), entered: make(chan struct{})}
	for i := range 5 {
		gpus.devices = append(gpus.devices, &pluginapi.Device{ID: fmt.Sprintf("GPU-%d", i), Health: pluginapi.Healthy})
	}
	gpus.devices[4].Health = pluginapi.Unhealthy
	mem := &listingPlugin{resource: prNames.GPUMemory, socket: socket}
	for i := range 8 {
		mem.devices = append(mem.devices, &pluginapi.Device{ID: fmt.Sprintf("M-%d", i), Health: pluginapi.Healthy})
	}
	gpus.serve(t, ctx, dir, stub)
	mem.serve(t, ctx, dir, stub)

	client := fake.NewClientset()
	k := newKubelet(client, prNames)
	k.addNode(prNode, stub, pr)
	kctx, kcancel := context.WithCancel(ctx)
	defer func() { kcancel(); k.wait() }()
	if err := k.start(kctx); err != nil {
		t.Fatal(err)
	}
	create := func(p *corev1.Pod) {
		t.Helper()
		if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sidecar := rotaContainer("side", prNames.GPUMemory, 2)
	sidecar.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)

	// a is admitted first; its first call waits until b, c, plain and d are
	// bound too (queued behind it).
	create(boundPod("a", nil, rotaContainer("main", prNames.GPU, 1)))
	select {
	case <-gpus.entered:
	case <-ctx.Done():
		t.Fatal("a's GetPreferredAllocation never came")
	}
	create(boundPod("b", []corev1.Container{rotaContainer("setup", prNames.GPU, 1), sidecar},
		rotaContainer("c1", prNames.GPU, 1), rotaContainer("c2", "", 0)))
	create(boundPod("c", nil, rotaContainer("main", prNames.GPU, 1)))
	create(boundPod("plain", nil, rotaContainer("main", "", 0)))
	// d gets its memory unit, then no GPU is left for x2: admission fails.
	create(boundPod("d", nil, rotaContainer("x1", prNames.GPUMemory, 1), rotaContainer("x2", prNames.GPU, 1)))
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		_, err := k.lister("ns", "d")
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	close(gpus.gate)

	phases := func(want map[string]corev1.PodPhase) {
		t.Helper()
		var got map[string]corev1.PodPhase
		err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got = map[string]corev1.PodPhase{}
			pods, err := client.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, p := range pods.Items {
				got[p.Name] = p.Status.Phase
			}
			return fmt.Sprint(got) == fmt.Sprint(want), nil
		})
		if err != nil {
			t.Fatalf("pod phases %v, want %v", got, want)
		}
	}
	phases(map[string]corev1.PodPhase{"a": corev1.PodRunning, "b": corev1.PodRunning, "c": corev1.PodRunning,
		"plain": corev1.PodRunning, "d": corev1.PodFailed})

	// What the plugins saw, call by call (b's regular init container setup
	// got GPU-1 but is not listed; GPU-4 is unhealthy).
	const (
		a  = "a{main:GPU-0}"
		b1 = "b{side: c1: c2:}"
		b2 = "b{side:M-0,M-1 c1: c2:}"
		b  = "b{side:M-0,M-1 c1:GPU-2 c2:}"
		c  = "c{main:GPU-3}"
	)
	want := []string{
		"pref gpu: a{main:}", "alloc gpu: a{main:}",
		"pref gpu: " + a + " " + b1, "alloc gpu: " + a + " " + b1, // setup
		"pref gpu-memory: " + a + " " + b1, "alloc gpu-memory: " + a + " " + b1, // side
		"pref gpu: " + a + " " + b2, "alloc gpu: " + a + " " + b2, // c1
		"pref gpu: " + a + " " + b + " c{main:}", "alloc gpu: " + a + " " + b + " c{main:}",
		"pref gpu-memory: " + a + " " + b + " " + c + " plain{main:} d{x1: x2:}",
		"alloc gpu-memory: " + a + " " + b + " " + c + " plain{main:} d{x1: x2:}",
	}
	var got []string
	for _, p := range []*listingPlugin{gpus, mem} {
		got = append(got, p.Calls()...)
	}
	// Each plugin's calls in its own order (the two plugins' calls
	// interleave by admission; want lists them in that order).
	if diff := callsDiff(want, got); diff != "" {
		t.Errorf("plugin calls (short resource names) differ:\n%s", diff)
	}
	lists := func() string {
		t.Helper()
		resp, err := listPodResources(ctx, socket)
		if err != nil {
			t.Fatal(err)
		}
		return render(resp)
	}
	if got, want := lists(), a+" "+b+" "+c+" plain{main:}"; got != want {
		t.Errorf("List after admissions = %q, want %q", got, want)
	}
	// The plugin's own reader of the API sees the same.
	devs, err := podwatch.List(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(devs[1]); got != fmt.Sprintf("{ns b map[c1:map[%s:[GPU-2]] side:map[%s:[M-0 M-1]]]}", prNames.GPU, prNames.GPUMemory) {
		t.Errorf("podwatch.List b = %s", got)
	}

	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := podresourcesapi.NewPodResourcesListerClient(conn)
	one, err := api.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodNamespace: "ns", PodName: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := render(&podresourcesapi.ListPodResourcesResponse{PodResources: []*podresourcesapi.PodResources{one.PodResources}}); got != c {
		t.Errorf("Get c = %q, want %q", got, c)
	}
	if _, err := api.Get(ctx, &podresourcesapi.GetPodResourcesRequest{PodNamespace: "ns", PodName: "d"}); status.Code(err) != codes.NotFound {
		t.Errorf("Get d (failed admission) = %v, want NotFound", err)
	}
	alloc, err := api.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range alloc.Devices {
		ids = append(ids, d.DeviceIds...)
	}
	if got, want := strings.Join(ids, ","), "GPU-0,GPU-1,GPU-2,GPU-3,M-0,M-1,M-2,M-3,M-4,M-5,M-6,M-7"; got != want {
		t.Errorf("GetAllocatableResources = %s, want %s (healthy devices)", got, want)
	}

	// Released pods leave the list: a deleted, c ended.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cp, err := client.CoreV1().Pods("ns").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("ns").UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		last = lists()
		return last == b+" plain{main:}", nil
	}); err != nil {
		t.Errorf("List after a was deleted and c ended = %q, want %q", last, b+" plain{main:}")
	}
	if _, err := client.CoreV1().Pods("ns").Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a not deleted: %v", err)
	}

	// A pod released before the stand-in reaches it (deleted while queued)
	// is never listed.
	late := boundPod("late", nil, rotaContainer("main", "", 0))
	pr.remove(late.UID)
	if pr.add(late) {
		t.Error("a released pod was made active again")
	}
	if got := lists(); strings.Contains(got, "late") {
		t.Errorf("released pod listed: %s", got)
	}
}

// callsDiff compares the recorded calls of both plugins (in any
// interleaving between the plugins, each plugin's own order kept) with want.
func callsDiff(want, got []string) string {
	byRes := func(calls []string) map[string][]string {
		out := map[string][]string{}
		for _, c := range calls {
			res := strings.Fields(c)[1]
			out[res] = append(out[res], c)
		}
		return out
	}
	short := func(calls []string) []string {
		out := make([]string, len(calls))
		for i, c := range calls {
			c = strings.Replace(c, " "+prNames.GPUMemory+":", " gpu-memory:", 1)
			out[i] = strings.Replace(c, " "+prNames.GPU+":", " gpu:", 1)
		}
		return out
	}
	w, g := byRes(want), byRes(short(got))
	var b strings.Builder
	for _, res := range []string{"gpu:", "gpu-memory:"} {
		if fmt.Sprint(w[res]) != fmt.Sprint(g[res]) {
			fmt.Fprintf(&b, "%s calls:\n got:  %s\n want: %s\n", strings.TrimSuffix(res, ":"),
				strings.Join(g[res], "\n       "), strings.Join(w[res], "\n       "))
		}
	}
	return b.String()
}

// TestSameShapePodsAdmittedOutOfBoundOrder runs a real rota-device-plugin
// (fake backend, in process) behind the kubelet stand-in with its
// PodResources API, as the harness runs every plugin node, and admits
// same-shape pending pods in the reverse of the order they were bound (as a
// kubelet may: it sorts a batch by creation time, with 1-second
// resolution). Each must get exactly its assigned GPU: the plugin tells
// them apart by which pod List shows being admitted, not by bound order.
func TestSameShapePodsAdmittedOutOfBoundOrder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	dir := shortDir(t)
	stub, err := kubeletstub.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stub.Close()
	socket := filepath.Join(dir, PodResourcesSocketName)
	pr, err := startPodResources(socket, stub, prNames.GPU, prNames.GPUMemory)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()

	spec := filepath.Join(dir, "gpus.yaml")
	if err := os.WriteFile(spec, []byte("model: NVIDIA H100 80GB HBM3\ncount: 4\nmemoryMiB: 81920\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	backend, err := discovery.OpenFake(spec, prNode)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: prNode}})
	cfg := config.Default()
	cfg.NodeName, cfg.DevicePluginDir, cfg.PodResourcesSocket, cfg.MetricsListen = prNode, dir+"/", socket, ""
	cfg.Backend, cfg.FakeConfig = config.BackendFake, spec
	cfg.KubeletPoll, cfg.HealthInterval, cfg.AllocateWait = 50*time.Millisecond, 100*time.Millisecond, 2*time.Second
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(pctx, app.Deps{Config: cfg, Backend: backend, Client: client, Metrics: metrics.New()})
	}()
	defer func() {
		pcancel()
		if err := <-done; err != nil {
			t.Errorf("plugin: %v", err)
		}
	}()
	for _, res := range []string{prNames.GPU, prNames.GPUMemory} {
		if err := stub.WaitRegistered(ctx, res, 0); err != nil {
			t.Fatal(err)
		}
	}
	k := newKubelet(client, prNames)
	k.addNode(prNode, stub, pr)
	n := k.node(prNode)
	gpus := topology.FromSpec(topology.Spec{Name: prNode, Model: "NVIDIA H100 80GB HBM3", Count: 4, MemoryMiB: 81920}).GPUs

	assigned := func(name string, a contract.Assignment, res string, count int64) *corev1.Pod {
		p := boundPod(name, nil, rotaContainer("main", res, count))
		b, err := a.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{prNames.AssignmentAnnotation: string(b)}
		if _, err := client.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	whole := func(i int) contract.Assignment {
		return contract.Assignment{Version: contract.Version, Node: prNode, Whole: true,
			GPUs: []contract.AssignedGPU{{Index: i, UUID: gpus[i].UUID, MemoryMiB: gpus[i].MemoryMiB}}}
	}
	share := func(i int) contract.Assignment {
		return contract.Assignment{Version: contract.Version, Node: prNode,
			GPUs: []contract.AssignedGPU{{Index: i, UUID: gpus[i].UUID, MemoryMiB: 20 * 1024}}}
	}
	// Bound in this order (the plugin's bound order): whole-GPU pods w0, w1
	// on GPUs 0 and 1, 20 GiB shares s2, s3 on GPUs 2 and 3.
	pods := []*corev1.Pod{
		assigned("w0", whole(0), prNames.GPU, 1), assigned("w1", whole(1), prNames.GPU, 1),
		assigned("s2", share(2), prNames.GPUMemory, 20), assigned("s3", share(3), prNames.GPUMemory, 20),
	}
	want := map[string]string{"w0": gpus[0].UUID, "w1": gpus[1].UUID, "s2": gpus[2].UUID, "s3": gpus[3].UUID}
	time.Sleep(200 * time.Millisecond) // let the plugin's informer see all four
	for _, i := range []int{1, 0, 3, 2} {
		if err := k.admit(ctx, n, pods[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		a, ok := k.Allocation(p.UID)
		switch {
		case !ok:
			t.Errorf("%s: not admitted", p.Name)
		case a.Err != "":
			t.Errorf("%s: admission failed: %s", p.Name, a.Err)
		case len(a.Containers) != 1:
			t.Errorf("%s: %d allocations", p.Name, len(a.Containers))
		default:
			c := a.Containers[0]
			for _, id := range c.DeviceIDs {
				if uuid, _, _ := strings.Cut(id, "::"); uuid != want[p.Name] {
					t.Errorf("%s: got device %s, assigned GPU %s", p.Name, id, want[p.Name])
					break
				}
			}
			if got := c.Envs["ROTA_ASSIGNED_POD"]; got != "ns/"+p.Name {
				t.Errorf("%s: ROTA_ASSIGNED_POD = %q", p.Name, got)
			}
			if got := c.Envs["NVIDIA_VISIBLE_DEVICES"]; got != want[p.Name] {
				t.Errorf("%s: NVIDIA_VISIBLE_DEVICES = %q, want %q", p.Name, got, want[p.Name])
			}
		}
	}
}
