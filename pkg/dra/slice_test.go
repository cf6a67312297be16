package dra

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestSliceFor(t *testing.T) {
	topo := contract.Topology{Version: contract.Version, MemoryUnitMiB: 1024, Generation: 3, GPUs: []contract.TopologyGPU{
		{Index: 0, UUID: "GPU-a", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, NUMA: 0, Island: 0, Health: contract.Healthy},
		{Index: 1, UUID: "GPU-b", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920 - 1536, NUMA: 1, Island: 1,
			Health: contract.Unhealthy, Reason: "XID 79: GPU has fallen off the bus (and a very long explanation that goes on and on)"},
	}}
	s := SliceFor("n1", "gpu.rota.example.com", topo)
	if *s.NodeName != "n1" || s.Driver != "gpu.rota.example.com" || s.Pool.Generation != 3 || len(s.Devices) != 2 {
		t.Fatalf("slice = %+v", s)
	}
	d0, d1 := s.Devices[0], s.Devices[1]
	if d0.Name != "gpu-0" || !*d0.AllowMultipleAllocations || *d0.Attributes[AttrUUID].StringValue != "GPU-a" ||
		*d0.Attributes[AttrNVLinkIsland].IntValue != 0 || *d1.Attributes[AttrNUMANode].IntValue != 1 {
		t.Errorf("device 0 = %+v, device 1 attributes %+v", d0, d1.Attributes)
	}
	mem := d0.Capacity[CapacityMemory]
	if mem.Value.Value() != 80<<30 || mem.RequestPolicy.Default.Value() != 1<<30 ||
		mem.RequestPolicy.ValidRange.Min.Value() != 1<<30 || mem.RequestPolicy.ValidRange.Step.Value() != 1<<30 {
		t.Errorf("memory capacity = %+v", mem)
	}
	// Leaked memory leaves a GPU with 78.5 GiB: 78 whole units.
	m1 := d1.Capacity[CapacityMemory]
	if got := m1.Value.Value(); got != 78<<30 {
		t.Errorf("device 1 memory = %d, want 78 GiB (whole units)", got)
	}
	if len(d0.Taints) != 0 || len(d1.Taints) != 1 || d1.Taints[0].Key != TaintUnhealthy {
		t.Fatalf("taints: %v, %v", d0.Taints, d1.Taints)
	}
	if v := d1.Taints[0].Value; len(validation.IsValidLabelValue(v)) > 0 || !strings.HasPrefix(v, "XID-79") {
		t.Errorf("taint value %q is not a label value naming the XID: %v", v, validation.IsValidLabelValue(v))
	}
	// A node in DRA mode is never Rota's to place on through the device
	// plugin: the slice names its GPUs.
	read, ok := FromSlice(sliceOf(s))
	if !ok || rules.Why([]string{"GPU-a", "GPU-b"}, []Slice{read}, nil) == "" {
		t.Error("the slice Rota's DRA mode publishes does not make its node DRA-managed")
	}
}

func FuzzLabelValue(f *testing.F) {
	f.Add("XID 79")
	f.Add("---")
	f.Fuzz(func(t *testing.T, s string) {
		if v := labelValue(s); len(validation.IsValidLabelValue(v)) > 0 {
			t.Fatalf("labelValue(%q) = %q: %v", s, v, validation.IsValidLabelValue(v))
		}
	})
}
