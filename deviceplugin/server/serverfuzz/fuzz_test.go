package serverfuzz

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/server"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// The node, names and pods of deviceplugin/server's hostile tests
// (hostile_test.go), which this package cannot import.
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

// hostilePods: "train" owns GPUs 2,3 (one container, 2 GPUs); "two" owns
// GPUs 0,1 (two containers, 1 GPU each); "infer" has 20 GiB of GPU 6.
func hostilePods(gpus []topology.GPU) []*corev1.Pod {
	whole := func(idx ...int) contract.Assignment {
		a := contract.Assignment{Version: contract.Version, Node: hostileNode, Whole: true}
		for _, i := range idx {
			a.GPUs = append(a.GPUs, contract.AssignedGPU{Index: i, UUID: gpus[i].UUID, MemoryMiB: gpus[i].MemoryMiB})
		}
		return a
	}
	share := contract.Assignment{Version: contract.Version, Node: hostileNode,
		GPUs: []contract.AssignedGPU{{Index: 6, UUID: gpus[6].UUID, MemoryMiB: 20 * 1024}}}
	return []*corev1.Pod{
		hostilePod("train", whole(2, 3), hostileNames.GPU, 2),
		hostilePod("two", whole(0, 1), hostileNames.GPU, 1, 1),
		hostilePod("infer", share, hostileNames.GPUMemory, 20),
	}
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

// advertised is the set of device IDs a plugin of kind lists for gpus.
func advertised(k handoff.Kind, gpus []topology.GPU) map[string]bool {
	out := map[string]bool{}
	for _, d := range server.Devices(k, gpus, 1024) {
		out[d.ID] = true
	}
	return out
}

// fuzzPlugins builds both plugins over a fresh matcher holding pods (the
// hostile tests' pods, built once per target: hostilePods), with no
// informer and no socket: the handler path after decoding.
func fuzzPlugins(gpus []topology.GPU, pods []*corev1.Pod) ([2]*server.Plugin, *handoff.Matcher) {
	m := handoff.NewMatcher(hostileNode, hostileNames, 1024)
	for _, p := range pods {
		m.Upsert(p)
	}
	st := server.NewState(gpus, 1024)
	return [2]*server.Plugin{
		server.NewPlugin(handoff.KindGPU, hostileNames.GPU, st, m, 0, nil),
		server.NewPlugin(handoff.KindMemory, hostileNames.GPUMemory, st, m, 0, nil),
	}, m
}

func allocated(m *handoff.Matcher) [6]int {
	var out [6]int
	for i, uid := range []string{"uid-train", "uid-two", "uid-infer"} {
		out[2*i] = m.Allocated(uid, handoff.KindGPU)
		out[2*i+1] = m.Allocated(uid, handoff.KindMemory)
	}
	return out
}

func fuzzSeeds(f *testing.F, gpus []topology.GPU, msgs ...proto.Message) {
	for _, msg := range msgs {
		b, err := proto.Marshal(msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(false, b)
		f.Add(true, b)
	}
	f.Add(false, []byte{0x0a})
	f.Add(true, []byte{0x0a, 0x05, 0x0a, 0x03, 0xff, 0xfe, 0xfd})
}

// FuzzAllocateRequest decodes arbitrary bytes as an AllocateRequest, as the
// gRPC server does, and hands it to Allocate. Invariants: no panic; a
// refusal is InvalidArgument or FailedPrecondition and leaves the matcher
// as it was; a success answers every container, each container's devices
// are distinct devices of the plugin, and one container is allocated per
// container request.
func FuzzAllocateRequest(f *testing.F) {
	gpus := topology.FromSpec(topology.Spec{Name: hostileNode, Model: "H200", Count: 8, MemoryMiB: 144384, IslandSize: 8}).GPUs
	mem := func(gpu, from, to int) []string {
		var out []string
		for n := from; n < to; n++ {
			out = append(out, handoff.MemoryDeviceID(gpus[gpu].UUID, n))
		}
		return out
	}
	fuzzSeeds(f, gpus,
		alloc([]string{gpus[2].UUID, gpus[3].UUID}),
		alloc([]string{gpus[0].UUID}, []string{gpus[1].UUID}),
		alloc([]string{gpus[0].UUID}, []string{gpus[1].UUID}, []string{gpus[5].UUID}),
		alloc([]string{gpus[2].UUID, gpus[2].UUID}),
		alloc(mem(6, 0, 20)),
		alloc(repeat(handoff.MemoryDeviceID(gpus[6].UUID, 0), 20)),
		alloc())
	ctx := context.Background()
	pods := hostilePods(gpus)
	devices := [2]map[string]bool{advertised(handoff.KindGPU, gpus), advertised(handoff.KindMemory, gpus)}
	f.Fuzz(func(t *testing.T, memory bool, data []byte) {
		var req pluginapi.AllocateRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return // the gRPC server answers Internal before the handler
		}
		// A fresh matcher per input: a granted Allocate changes it.
		plugins, m := fuzzPlugins(gpus, pods)
		p, known := plugins[0], devices[0]
		if memory {
			p, known = plugins[1], devices[1]
		}
		before := allocated(m)
		resp, err := p.Allocate(ctx, &req)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
				t.Fatalf("Allocate error code %s: %v", c, err)
			}
			if after := allocated(m); after != before {
				t.Fatalf("refused Allocate changed the matcher: %v -> %v", before, after)
			}
			return
		}
		if len(resp.ContainerResponses) != len(req.ContainerRequests) || len(req.ContainerRequests) == 0 {
			t.Fatalf("%d container responses for %d requests", len(resp.ContainerResponses), len(req.ContainerRequests))
		}
		seen := map[string]bool{}
		for _, cr := range req.ContainerRequests {
			for _, id := range cr.DevicesIds {
				if !known[id] || seen[id] {
					t.Fatalf("Allocate granted unknown or repeated device %q", id)
				}
				seen[id] = true
			}
		}
		after := allocated(m)
		grew := 0
		for i := range after {
			grew += after[i] - before[i]
		}
		if grew != len(req.ContainerRequests) {
			t.Fatalf("%d containers allocated for %d container requests", grew, len(req.ContainerRequests))
		}
	})
}

// FuzzPreferredAllocationRequest decodes arbitrary bytes as a
// PreferredAllocationRequest and hands it to GetPreferredAllocation.
// Invariants: no panic; the matcher never changes; a refusal is
// InvalidArgument or FailedPrecondition; an answer gives, per container,
// exactly AllocationSize distinct available devices including every
// must-include one.
func FuzzPreferredAllocationRequest(f *testing.F) {
	gpus := topology.FromSpec(topology.Spec{Name: hostileNode, Model: "H200", Count: 8, MemoryMiB: 144384, IslandSize: 8}).GPUs
	all := make([]string, len(gpus))
	for i, g := range gpus {
		all[i] = g.UUID
	}
	var units []string
	for n := range 30 {
		units = append(units, handoff.MemoryDeviceID(gpus[6].UUID, n))
	}
	fuzzSeeds(f, gpus,
		pref(all, nil, 2), pref(all, []string{gpus[3].UUID}, 2), pref(all, nil, 1), pref(all, nil, 0),
		pref(units, nil, 20), pref(units, units[:2], 20), pref([]string{all[2], all[2]}, nil, 2),
		&pluginapi.PreferredAllocationRequest{})
	ctx := context.Background()
	// One matcher for every input: GetPreferredAllocation must never change
	// it (checked below), so the inputs all see the same pods.
	plugins, m := fuzzPlugins(gpus, hostilePods(gpus))
	f.Fuzz(func(t *testing.T, memory bool, data []byte) {
		var req pluginapi.PreferredAllocationRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		p := plugins[0]
		if memory {
			p = plugins[1]
		}
		before := allocated(m)
		resp, err := p.GetPreferredAllocation(ctx, &req)
		if after := allocated(m); after != before {
			t.Fatalf("GetPreferredAllocation changed the matcher: %v -> %v", before, after)
		}
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.FailedPrecondition {
				t.Fatalf("GetPreferredAllocation error code %s: %v", c, err)
			}
			return
		}
		if len(resp.ContainerResponses) != len(req.ContainerRequests) {
			t.Fatalf("%d container responses for %d requests", len(resp.ContainerResponses), len(req.ContainerRequests))
		}
		for i, cr := range req.ContainerRequests {
			ids := resp.ContainerResponses[i].DeviceIDs
			if len(ids) != int(cr.AllocationSize) {
				t.Fatalf("container %d: %d preferred devices for size %d", i, len(ids), cr.AllocationSize)
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if seen[id] || !slices.Contains(cr.AvailableDeviceIDs, id) {
					t.Fatalf("container %d: preferred device %q repeated or not available", i, id)
				}
				seen[id] = true
			}
			for _, id := range cr.MustIncludeDeviceIDs {
				if !seen[id] {
					t.Fatalf("container %d: must-include device %q left out", i, id)
				}
			}
		}
	})
}
