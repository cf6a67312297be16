package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/metrics"
	"github.com/rota-sched/rota/deviceplugin/podwatch"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

const hostileNode = "hostile-0"

var hostileNames = contract.Default

// hostilePod is a pending pod bound to hostileNode asking for res per
// container, carrying assignment a.
func hostilePod(name string, a contract.Assignment, res string, perContainer ...int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Annotations: map[string]string{}},
		Spec:   corev1.PodSpec{NodeName: hostileNode},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for i, n := range perContainer {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i),
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}})
	}
	b, err := a.Marshal()
	if err != nil {
		panic(err)
	}
	p.Annotations[hostileNames.AssignmentAnnotation] = string(b)
	return p
}

func hostileWhole(gpus []topology.GPU, idx ...int) contract.Assignment {
	a := contract.Assignment{Version: contract.Version, Node: hostileNode, Whole: true}
	for _, i := range idx {
		a.GPUs = append(a.GPUs, contract.AssignedGPU{Index: i, UUID: gpus[i].UUID, MemoryMiB: gpus[i].MemoryMiB})
	}
	return a
}

func hostileShare(gpus []topology.GPU, idx int, mib contract.MiB) contract.Assignment {
	return contract.Assignment{Version: contract.Version, Node: hostileNode,
		GPUs: []contract.AssignedGPU{{Index: idx, UUID: gpus[idx].UUID, MemoryMiB: mib}}}
}

// hostileGPUs is the fake backend's GPUs for the hostile tests: 8 x H200.
func hostileGPUs(t testing.TB) []topology.GPU {
	t.Helper()
	spec := filepath.Join(t.TempDir(), "gpus.yaml")
	if err := os.WriteFile(spec, []byte("model: NVIDIA H200 141GB HBM3e\ncount: 8\nmemoryMiB: 144384\nislandSize: 8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := discovery.OpenFake(spec, hostileNode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b.GPUs()
}

// hostilePods: "train" owns GPUs 2,3 (one container, 2 GPUs); "two" owns
// GPUs 0,1 (two containers, 1 GPU each); "infer" has 20 GiB of GPU 6.
func hostilePods(gpus []topology.GPU) []*corev1.Pod {
	return []*corev1.Pod{
		hostilePod("train", hostileWhole(gpus, 2, 3), hostileNames.GPU, 2),
		hostilePod("two", hostileWhole(gpus, 0, 1), hostileNames.GPU, 1, 1),
		hostilePod("infer", hostileShare(gpus, 6, 20*1024), hostileNames.GPUMemory, 20),
	}
}

// hostileRig serves both plugins over real unix sockets, fed by a pod
// informer on a fake clientset, with a long-lived ListAndWatch stream open
// on each.
type hostileRig struct {
	ctx     context.Context
	dir     string
	gpus    []topology.GPU
	pods    []*corev1.Pod
	state   *State
	matcher *handoff.Matcher
	client  *fake.Clientset
	conns   [2]*grpc.ClientConn
	watches [2]*watchCount
}

// watchCount counts the device lists one ListAndWatch stream receives.
type watchCount struct {
	mu   sync.Mutex
	msgs int
	last []string
}

func (w *watchCount) get() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.msgs, w.last
}

func deviceStrings(devs []*pluginapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.ID + "=" + d.Health
	}
	return out
}

func startHostile(t *testing.T) *hostileRig {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	r := &hostileRig{ctx: ctx, dir: t.TempDir(), gpus: hostileGPUs(t)}
	r.pods = hostilePods(r.gpus)
	objs := []runtime.Object{&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: hostileNode}}}
	for _, p := range r.pods {
		objs = append(objs, p)
	}
	r.client = fake.NewClientset(objs...)
	r.matcher = handoff.NewMatcher(hostileNode, hostileNames, 1024)
	if err := podwatch.StartPods(ctx, r.client, hostileNode, r.matcher); err != nil {
		t.Fatal(err)
	}
	r.state = NewState(r.gpus, 1024)
	m := metrics.New()
	// A short wait: hostile requests that pass validation but match no pod
	// answer after it.
	const wait = 50 * time.Millisecond
	plugins := []*Plugin{
		NewPlugin(handoff.KindGPU, hostileNames.GPU, r.state, r.matcher, wait, m),
		NewPlugin(handoff.KindMemory, hostileNames.GPUMemory, r.state, r.matcher, wait, m),
	}
	done := make(chan error, 1)
	go func() { done <- NewManager(r.dir, 50*time.Millisecond, m, plugins...).Run(ctx) }()
	t.Cleanup(func() {
		for _, c := range r.conns {
			if c != nil {
				c.Close()
			}
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Manager.Run() = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Manager.Run() did not return after cancel")
		}
	})
	// The informer's handlers may run after its sync: wait until the
	// matcher steers to every pod (Preferred changes nothing).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, e1 := r.matcher.Preferred(ctx, handoff.KindGPU, []string{r.gpus[2].UUID, r.gpus[3].UUID}, nil, 2, 0)
		_, e2 := r.matcher.Preferred(ctx, handoff.KindGPU, []string{r.gpus[0].UUID, r.gpus[1].UUID}, nil, 1, 0)
		_, e3 := r.matcher.Preferred(ctx, handoff.KindMemory, r.memIDs(6, 0, 20), nil, 20, 0)
		if e1 == nil && e2 == nil && e3 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("matcher never saw the pods: %v / %v / %v", e1, e2, e3)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, p := range plugins {
		path := filepath.Join(r.dir, SocketName(p.Resource()))
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("socket %s never appeared", path)
			}
			time.Sleep(10 * time.Millisecond)
		}
		conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		r.conns[i] = conn
		r.watches[i] = r.watch(t, conn)
	}
	for i, w := range r.watches {
		for {
			if n, _ := w.get(); n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("plugin %d: no device list on ListAndWatch", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return r
}

// watch opens a ListAndWatch stream that counts what it receives.
func (r *hostileRig) watch(t *testing.T, conn *grpc.ClientConn) *watchCount {
	t.Helper()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(r.ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	w := &watchCount{}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.msgs++
			w.last = deviceStrings(resp.Devices)
			w.mu.Unlock()
		}
	}()
	return w
}

func (r *hostileRig) memIDs(gpu, from, to int) []string {
	var out []string
	for n := from; n < to; n++ {
		out = append(out, handoff.MemoryDeviceID(r.gpus[gpu].UUID, n))
	}
	return out
}

// ledgerView is everything the plugin holds: GPU health, the device lists
// a fresh ListAndWatch sends, how many containers of each pod the matcher
// has allocated, and the API objects.
type ledgerView struct {
	GPUs      []topology.GPU
	Devices   [2][]string
	Allocated map[string][2]int
	Objects   string
	Writes    []string
}

func (r *hostileRig) view(t *testing.T) ledgerView {
	t.Helper()
	v := ledgerView{Allocated: map[string][2]int{}}
	v.GPUs, _ = r.state.Snapshot()
	for i, conn := range r.conns {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			cancel()
			t.Fatalf("ListAndWatch: %v", err)
		}
		resp, err := stream.Recv()
		cancel()
		if err != nil {
			t.Fatalf("ListAndWatch Recv: %v", err)
		}
		v.Devices[i] = deviceStrings(resp.Devices)
	}
	for _, p := range r.pods {
		uid := string(p.UID)
		v.Allocated[uid] = [2]int{r.matcher.Allocated(uid, handoff.KindGPU), r.matcher.Allocated(uid, handoff.KindMemory)}
	}
	pods, err := r.client.CoreV1().Pods("").List(r.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := r.client.CoreV1().Nodes().List(r.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]any{pods.Items, nodes.Items})
	v.Objects = string(b)
	for _, a := range r.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			v.Writes = append(v.Writes, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return v
}

// rawCodec sends and receives bytes as they are, under the proto
// content-subtype, so the server's own decoder sees them.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *v.(*[]byte) = bytes.Clone(data); return nil }
func (rawCodec) Name() string                       { return "proto" }

const svc = "/v1beta1.DevicePlugin/"

// hostileCase is one hostile input to one plugin (0: gpu, 1: gpu-memory).
type hostileCase struct {
	name   string
	plugin int
	method string
	raw    []byte        // sent as is when msg is nil
	msg    proto.Message // sent through the proto codec
	want   codes.Code    // codes.OK: a documented success that changes nothing
}

// body is the bytes on the wire.
func (c hostileCase) body(t *testing.T) []byte {
	if c.msg == nil {
		return c.raw
	}
	b, err := proto.Marshal(c.msg)
	if err != nil {
		t.Fatalf("%s: marshal: %v", c.name, err)
	}
	return b
}

// sizeCode is the code a message of n bytes gets when its content is
// refused: the server's 4 MiB receive limit comes first.
func sizeCode(n int, content codes.Code) codes.Code {
	if n > KubeletMaxMessage {
		return codes.ResourceExhausted
	}
	return content
}

func alloc(ids ...[]string) *pluginapi.AllocateRequest {
	req := &pluginapi.AllocateRequest{}
	for _, c := range ids {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: c})
	}
	return req
}

func pref(available, must []string, size int32) *pluginapi.PreferredAllocationRequest {
	return &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: available, MustIncludeDeviceIDs: must, AllocationSize: size}}}
}

func repeat(id string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = id
	}
	return out
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// wire builds protobuf bytes by hand.
type wire []byte

func (w wire) bytes(num protowire.Number, b []byte) wire {
	return protowire.AppendBytes(protowire.AppendTag(w, num, protowire.BytesType), b)
}
func (w wire) varint(num protowire.Number, v uint64) wire {
	return protowire.AppendVarint(protowire.AppendTag(w, num, protowire.VarintType), v)
}

// hostileCases lists the inputs; every plugin method gets the raw ones.
func (r *hostileRig) hostileCases() []hostileCase {
	g := func(i int) string { return r.gpus[i].UUID }
	mem := func(gpu, n int) string { return handoff.MemoryDeviceID(g(gpu), n) }
	long := strings.Repeat("GPU-", 1<<18) // 1 MiB
	huge := strings.Repeat("x", 5<<20)    // over the 4 MiB receive limit
	lots := numbered("x", 100000)
	lotsReal := repeat(g(2), 100000)
	var cases []hostileCase
	// Anything over the server's 4 MiB receive limit is refused before it
	// is decoded: ResourceExhausted.
	add := func(plugin int, method, name string, msg proto.Message, want codes.Code) {
		want = sizeCode(proto.Size(msg), want)
		cases = append(cases, hostileCase{name: name, plugin: plugin, method: method, msg: msg, want: want})
	}
	addRaw := func(plugin int, method, name string, raw []byte, want codes.Code) {
		want = sizeCode(len(raw), want)
		cases = append(cases, hostileCase{name: name, plugin: plugin, method: method, raw: raw, want: want})
	}
	inv, pre := codes.InvalidArgument, codes.FailedPrecondition

	// Allocate, whole GPUs. "train" asks for 2 of GPUs 2,3; "two" for 1
	// and 1 of GPUs 0,1.
	for _, c := range []struct {
		name string
		req  *pluginapi.AllocateRequest
		want codes.Code
	}{
		{"empty request", alloc(), inv},
		{"one container, no devices", alloc(nil), inv},
		{"1000 containers, no devices", alloc(make([][]string, 1000)...), inv},
		{"unknown device", alloc([]string{"GPU-does-not-exist"}), inv},
		{"unknown device next to real ones", alloc([]string{g(2), "GPU-does-not-exist"}), inv},
		{"empty device ID", alloc([]string{""}), inv},
		{"duplicate device", alloc([]string{g(2), g(2)}), inv},
		{"device in two containers", alloc([]string{g(0)}, []string{g(0)}), inv},
		{"more devices than the node has", alloc(append([]string{g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7)}, g(2))), inv},
		{"1e5 unknown IDs", alloc(lots), inv},
		{"1e5 copies of a real ID", alloc(lotsReal), inv},
		{"1e5 containers of one real ID", alloc(func() [][]string {
			out := make([][]string, 100000)
			for i := range out {
				out[i] = []string{g(4)}
			}
			return out
		}()...), inv},
		{"5 MiB ID: over the receive limit", alloc([]string{huge}), codes.ResourceExhausted},
		{"1 MiB ID", alloc([]string{long}), inv},
		{"NUL in an ID", alloc([]string{g(2)[:8] + "\x00" + g(2)[8:]}), inv},
		{"ID with a trailing NUL", alloc([]string{g(2) + "\x00", g(3)}), inv},
		{"gpu-memory IDs to the gpu plugin", alloc([]string{mem(2, 0), mem(3, 0)}), inv},
		{"mixed resources", alloc([]string{g(2), mem(3, 0)}), inv},
		{"real devices no pod asks for", alloc([]string{g(4), g(5)}), pre},
		{"half of a pod's devices", alloc([]string{g(2)}), pre},
		{"another pod's devices in the same request", alloc([]string{g(2), g(0)}), pre},
		// The first two containers match "two"; the third matches no pod:
		// the whole request fails and "two" must stay unallocated.
		{"containers matched then one refused", alloc([]string{g(0)}, []string{g(1)}, []string{g(5)}), pre},
		{"a pod's two containers then a duplicate", alloc([]string{g(0)}, []string{g(1)}, []string{g(1)}), inv},
	} {
		add(0, "Allocate", c.name, c.req, c.want)
	}
	// Allocate, gpu-memory. "infer" asks for 20 units of GPU 6.
	twenty := r.memIDs(6, 0, 20)
	for _, c := range []struct {
		name string
		req  *pluginapi.AllocateRequest
		want codes.Code
	}{
		{"empty request", alloc(), inv},
		{"20 copies of one unit", alloc(repeat(mem(6, 0), 20)), inv},
		{"a unit past the GPU's memory", alloc(append(r.memIDs(6, 0, 19), mem(6, 999))), inv},
		{"a unit number not in canonical form", alloc(append(r.memIDs(6, 0, 19), g(6)+"::019")), inv},
		{"negative unit", alloc(append(r.memIDs(6, 0, 19), g(6)+"::-1")), inv},
		{"unit of an unknown GPU", alloc(append(r.memIDs(6, 0, 19), "GPU-x::19")), inv},
		{"whole-GPU IDs to the memory plugin", alloc([]string{g(6)}), inv},
		{"all 1128 units and one more", alloc(append(r.memIDs(0, 0, 141*8), mem(0, 0))), inv},
		{"units split over two containers", alloc(r.memIDs(6, 0, 10), r.memIDs(6, 10, 20)), pre},
		{"the right count on another GPU", alloc(r.memIDs(5, 0, 20)), pre},
		{"one unit too few", alloc(twenty[:19]), pre},
		{"1e5 unknown IDs", alloc(lots), inv},
	} {
		add(1, "Allocate", c.name, c.req, c.want)
	}
	// GetPreferredAllocation.
	two := []string{g(2), g(3)}
	all := []string{g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7)}
	for _, c := range []struct {
		name   string
		plugin int
		req    *pluginapi.PreferredAllocationRequest
		want   codes.Code
	}{
		{"empty request", 0, &pluginapi.PreferredAllocationRequest{}, inv},
		{"size 0", 0, pref(two, nil, 0), inv},
		{"size -1", 0, pref(two, nil, -1), inv},
		{"size MinInt32", 0, pref(two, nil, math.MinInt32), inv},
		{"size MaxInt32", 0, pref(all, nil, math.MaxInt32), inv},
		{"size larger than available", 0, pref(two, nil, 3), inv},
		{"no devices available", 0, pref(nil, nil, 1), inv},
		{"must-include not available", 0, pref([]string{g(2)}, []string{g(3)}, 1), inv},
		{"must-include larger than size", 0, pref(two, two, 1), inv},
		{"duplicate available", 0, pref([]string{g(2), g(2)}, nil, 2), inv},
		{"duplicate must-include", 0, pref(two, []string{g(2), g(2)}, 2), inv},
		{"unknown available", 0, pref([]string{g(2), "GPU-nope"}, nil, 2), inv},
		{"NUL in an available ID", 0, pref([]string{g(2), g(3) + "\x00"}, nil, 2), inv},
		{"1 MiB ID", 0, pref([]string{long}, nil, 1), inv},
		{"5 MiB ID", 0, pref([]string{huge}, nil, 1), codes.ResourceExhausted},
		{"1e5 unknown IDs", 0, pref(lots, nil, 2), inv},
		{"1e5 copies of a real ID", 0, pref(lotsReal, nil, 2), inv},
		{"mixed resources", 0, pref([]string{g(2), mem(3, 0)}, nil, 2), inv},
		{"1000 containers of size 0", 0, &pluginapi.PreferredAllocationRequest{ContainerRequests: func() []*pluginapi.ContainerPreferredAllocationRequest {
			out := make([]*pluginapi.ContainerPreferredAllocationRequest, 1000)
			for i := range out {
				out[i] = &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: two}
			}
			return out
		}()}, inv},
		{"real devices no pod asks for", 0, pref([]string{g(4), g(5)}, nil, 1), pre},
		{"must-include another pod's GPU", 0, pref(all, []string{g(0)}, 2), pre},
		{"memory: 20 copies of one unit", 1, pref(repeat(mem(6, 0), 20), nil, 20), inv},
		{"memory: unit past the GPU's memory", 1, pref(append(r.memIDs(6, 0, 19), mem(6, 999)), nil, 20), inv},
		{"memory: whole-GPU IDs", 1, pref(all, nil, 1), inv},
		{"memory: size 0", 1, pref(twenty, nil, 0), inv},
		{"memory: one unit too few available", 1, pref(twenty[:19], nil, 19), pre},
	} {
		add(c.plugin, "GetPreferredAllocation", c.name, c.req, c.want)
	}
	// PreStartContainer is a no-op (the plugin does not ask for it:
	// PreStartRequired is false): any decodable request gets the empty
	// answer. GetDevicePluginOptions answers its options to any Empty.
	for _, ids := range [][]string{nil, {"GPU-does-not-exist"}, {g(2), g(2)}, lots} {
		add(0, "PreStartContainer", fmt.Sprintf("%d device IDs", len(ids)), &pluginapi.PreStartContainerRequest{DevicesIds: ids}, codes.OK)
	}
	add(0, "PreStartContainer", "5 MiB ID", &pluginapi.PreStartContainerRequest{DevicesIds: []string{huge}}, codes.ResourceExhausted)

	// Raw bytes, to every method of both plugins: protobuf-go refuses
	// these while decoding (Internal: "grpc: error unmarshalling request").
	nested := wire(nil)
	for range 20000 { // start-group tags nested past protobuf-go's depth limit
		nested = protowire.AppendTag(nested, 99, protowire.StartGroupType)
	}
	deepLen := []byte{}
	for range 1000 { // 1000 nested length-delimited unknown fields: skipped, not parsed
		deepLen = wire(nil).bytes(99, deepLen)
	}
	garbage := []struct {
		name string
		raw  []byte
	}{
		{"truncated tag", []byte{0x80}},
		{"truncated length", []byte{0x0a}},
		{"length past the end", []byte{0x0a, 0x10, 'G', 'P', 'U'}},
		{"field number 0", []byte{0x02, 0x00}},
		{"wire type 7", []byte{0x0f, 0x00}},
		{"end group without start", []byte{0x0c}},
		{"unterminated group", []byte{0x0b, 0x08, 0x01}},
		{"overlong varint", append(wire(nil).varint(99, 0)[:1], bytes.Repeat([]byte{0xff}, 11)...)},
		{"20000 nested groups", nested},
		{"4 KiB of 0xff", bytes.Repeat([]byte{0xff}, 4096)},
		{"random-looking bytes", []byte("\x0a\x05\x0a\x03\xff\xfe\xfd\x12\x80")},
	}
	methods := []string{"GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate", "PreStartContainer"}
	for plugin := range 2 {
		for _, m := range methods {
			for _, gb := range garbage {
				addRaw(plugin, m, "raw: "+gb.name, gb.raw, codes.Internal)
			}
			addRaw(plugin, m, "raw: 5 MiB unknown field", wire(nil).bytes(99, []byte(huge)), codes.ResourceExhausted)
		}
	}
	// Non-UTF-8 strings (the proto codec refuses to send them; proto3
	// strings must be UTF-8, so the server refuses them too).
	bad := "GPU-\xff\xfe"
	addRaw(0, "Allocate", "raw: non-UTF-8 device ID", wire(nil).bytes(1, wire(nil).bytes(1, []byte(bad))), codes.Internal)
	addRaw(0, "GetPreferredAllocation", "raw: non-UTF-8 available ID", wire(nil).bytes(1, wire(nil).bytes(1, []byte(bad)).varint(3, 1)), codes.Internal)
	addRaw(0, "GetPreferredAllocation", "raw: non-UTF-8 must-include ID", wire(nil).bytes(1, wire(nil).bytes(1, []byte(g(2))).bytes(2, []byte(bad)).varint(3, 1)), codes.Internal)
	addRaw(0, "PreStartContainer", "raw: non-UTF-8 device ID", wire(nil).bytes(1, []byte(bad)), codes.Internal)
	// Wrong-typed fields: protobuf-go keeps a known field sent with another
	// wire type as an unknown field, so these decode to requests without
	// that field and are refused as such.
	for _, c := range []struct {
		name, method string
		raw          []byte
	}{
		{"container_requests as a varint", "Allocate", wire(nil).varint(1, 7)},
		{"devices_ids as a varint", "Allocate", wire(nil).bytes(1, wire(nil).varint(1, 7))},
		{"container_requests as a fixed64", "Allocate", protowire.AppendFixed64(protowire.AppendTag(nil, 1, protowire.Fixed64Type), 7)},
		{"allocation_size as bytes", "GetPreferredAllocation", wire(nil).bytes(1, wire(nil).bytes(1, []byte(g(2))).bytes(3, []byte("1")))},
		{"allocation_size 2^40 (int32 wraps to 0)", "GetPreferredAllocation", wire(nil).bytes(1, wire(nil).bytes(1, []byte(g(2))).varint(3, 1<<40))},
		{"allocation_size -1 as 10-byte varint", "GetPreferredAllocation", wire(nil).bytes(1, wire(nil).bytes(1, []byte(g(2))).varint(3, math.MaxUint64))},
		{"only unknown fields", "Allocate", wire(nil).varint(99, 1).bytes(100, []byte("x"))},
		{"1000 nested unknown messages", "Allocate", deepLen},
		{"1000 nested unknown messages", "GetPreferredAllocation", deepLen},
		{"an Allocate request to GetPreferredAllocation", "GetPreferredAllocation", must(proto.Marshal(alloc(two)))},
		{"a GetPreferredAllocation request for no pod to Allocate", "Allocate", must(proto.Marshal(pref([]string{g(4)}, nil, 1)))},
	} {
		want := inv
		if c.name == "a GetPreferredAllocation request for no pod to Allocate" {
			// Field 1 of both container messages is a list of IDs: this is
			// a well-formed Allocate for GPU 4, which no pod owns.
			want = pre
		}
		addRaw(0, c.method, "raw: "+c.name, c.raw, want)
	}
	// Empty and ListAndWatch take google.protobuf.Empty-like messages:
	// unknown fields decode, and they answer as usual.
	addRaw(0, "GetDevicePluginOptions", "raw: unknown fields in Empty", wire(nil).varint(5, 1).bytes(6, deepLen), codes.OK)
	addRaw(1, "ListAndWatch", "raw: unknown fields in Empty", wire(nil).varint(5, 1).bytes(6, deepLen), codes.OK)
	return cases
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// send sends one case over the plugin's socket and returns its status.
func (r *hostileRig) send(t *testing.T, c hostileCase) *status.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	in := c.body(t)
	conn := r.conns[c.plugin]
	if c.method == "ListAndWatch" {
		stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, svc+c.method, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			return status.Convert(err)
		}
		// SendMsg fails with io.EOF when the server has answered already;
		// RecvMsg returns the status either way.
		_ = stream.SendMsg(&in)
		_ = stream.CloseSend()
		var out []byte
		err = stream.RecvMsg(&out)
		if err == nil {
			var resp pluginapi.ListAndWatchResponse
			if uerr := proto.Unmarshal(out, &resp); uerr != nil {
				t.Errorf("%s: ListAndWatch sent undecodable bytes: %v", c.name, uerr)
			}
		}
		return status.Convert(err)
	}
	var out []byte
	return status.Convert(conn.Invoke(ctx, svc+c.method, &in, &out, grpc.ForceCodec(rawCodec{})))
}

// TestHostileGRPC sends truncated, oversized, deeply nested, wrong-typed
// and nonsensical requests to every method of both plugins over their unix
// sockets. Every one is refused with the listed code (or gets the listed
// no-op answer) and the plugin's state, its ListAndWatch streams and the
// API objects are unchanged; afterwards the real requests still succeed.
func TestHostileGRPC(t *testing.T) {
	r := startHostile(t)
	before := r.view(t)
	cases := r.hostileCases()
	byCode := map[codes.Code]int{}
	perMethod := map[string]int{}
	for _, c := range cases {
		st := r.send(t, c)
		byCode[st.Code()]++
		perMethod[c.method]++
		if st.Code() != c.want {
			t.Errorf("%s %s (plugin %d, %d bytes): %s %q, want %s", c.method, c.name, c.plugin, len(c.body(t)), st.Code(), cut(st.Message()), c.want)
		}
		if len(st.Message()) > 4096 {
			t.Errorf("%s %s: %d-byte error message", c.method, c.name, len(st.Message()))
		}
		if after := r.view(t); !reflect.DeepEqual(before, after) {
			t.Fatalf("%s %s changed the plugin's state:\nbefore %+v\nafter  %+v", c.method, c.name, summary(before), summary(after))
		}
	}
	for i, w := range r.watches {
		if n, last := w.get(); n != 1 || !reflect.DeepEqual(last, before.Devices[i]) {
			t.Errorf("plugin %d: the open ListAndWatch stream got %d device lists (want 1), last equal: %v", i, n, reflect.DeepEqual(last, before.Devices[i]))
		}
	}
	var ms []string
	for m, n := range perMethod {
		ms = append(ms, fmt.Sprintf("%s %d", m, n))
	}
	sort.Strings(ms)
	var cs []string
	for c, n := range byCode {
		cs = append(cs, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(cs)
	t.Logf("hostile inputs: surface=deviceplugin-grpc sent=%d crashes=0 state-changes=0; by method: %s; by code: %s",
		len(cases), strings.Join(ms, ", "), strings.Join(cs, ", "))

	// The plugin still works: the kubelet's real requests succeed, which
	// also shows no hostile request used up a pod's containers.
	client := func(i int) pluginapi.DevicePluginClient { return pluginapi.NewDevicePluginClient(r.conns[i]) }
	if _, err := client(0).GetDevicePluginOptions(r.ctx, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		plugin int
		ids    []string
		pod    string
	}{
		{0, []string{r.gpus[2].UUID, r.gpus[3].UUID}, "team-a/train"},
		{0, []string{r.gpus[0].UUID}, "team-a/two"},
		{0, []string{r.gpus[1].UUID}, "team-a/two"},
		{1, r.memIDs(6, 0, 20), "team-a/infer"},
	} {
		resp, err := client(c.plugin).Allocate(r.ctx, alloc(c.ids))
		if err != nil {
			t.Fatalf("Allocate %v after the hostile inputs: %v", c.ids, err)
		}
		if got := resp.ContainerResponses[0].Envs["ROTA_ASSIGNED_POD"]; got != c.pod {
			t.Errorf("Allocate %v went to %s, want %s", c.ids, got, c.pod)
		}
	}
}

func cut(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

func summary(v ledgerView) string {
	return fmt.Sprintf("allocated %v, %d+%d devices, %d object bytes, writes %v", v.Allocated, len(v.Devices[0]), len(v.Devices[1]), len(v.Objects), v.Writes)
}

// TestSocketMode checks the plugin sockets are created 0600 (only the
// kubelet, as root, connects) and the bind folder is gone.
func TestSocketMode(t *testing.T) {
	r := startHostile(t)
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		t.Fatal(err)
	}
	var socks int
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case fi.Mode().Type() == fs.ModeSocket:
			socks++
			if got := fi.Mode().Perm(); got != SocketMode {
				t.Errorf("%s mode %v, want %v", e.Name(), got, SocketMode)
			}
		case strings.HasPrefix(e.Name(), ".rota-"):
			t.Errorf("bind folder %s left behind", e.Name())
		}
	}
	if socks != 2 {
		t.Errorf("%d sockets in %s, want 2", socks, r.dir)
	}
	if SocketMode&0o077 != 0 {
		t.Errorf("SocketMode %v lets others connect", SocketMode)
	}
}
