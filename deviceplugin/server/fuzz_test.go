package server

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/pkg/topology"
)

// fuzzPlugins builds both plugins over a fresh matcher holding the hostile
// tests' pods (no informer, no socket: the handler path after decoding).
func fuzzPlugins(gpus []topology.GPU) ([2]*Plugin, *handoff.Matcher) {
	m := handoff.NewMatcher(hostileNode, hostileNames, 1024)
	for _, p := range hostilePods(gpus) {
		m.Upsert(p)
	}
	st := NewState(gpus, 1024)
	return [2]*Plugin{
		NewPlugin(handoff.KindGPU, hostileNames.GPU, st, m, 0, nil),
		NewPlugin(handoff.KindMemory, hostileNames.GPUMemory, st, m, 0, nil),
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
	f.Fuzz(func(t *testing.T, memory bool, data []byte) {
		var req pluginapi.AllocateRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return // the gRPC server answers Internal before the handler
		}
		plugins, m := fuzzPlugins(gpus)
		p := plugins[0]
		if memory {
			p = plugins[1]
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
		known := p.advertised()
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
	f.Fuzz(func(t *testing.T, memory bool, data []byte) {
		var req pluginapi.PreferredAllocationRequest
		if err := proto.Unmarshal(data, &req); err != nil {
			return
		}
		plugins, m := fuzzPlugins(gpus)
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
