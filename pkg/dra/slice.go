package dra

import (
	"fmt"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rota-sched/rota/pkg/contract"
)

// Attribute and capacity names of the devices Rota's DRA mode publishes
// (docs/dra.md). Unqualified, they take the driver's domain.
const (
	AttrUUID         = "uuid"
	AttrModel        = "model"
	AttrIndex        = "index"
	AttrNUMANode     = "numaNode"
	AttrNVLinkIsland = "nvlinkIsland"
	CapacityMemory   = "memory"
	// TaintUnhealthy is the key of the device taint an unhealthy GPU gets.
	TaintUnhealthy = "unhealthy"
)

// SliceFor is the ResourceSlice spec Rota's DRA mode would publish for a
// node whose device plugin published t (docs/dra.md, "Tomorrow"): one device
// per GPU, shared by any number of claims (allowMultipleAllocations), with
// its memory as consumable capacity in the node's memory unit (a claim takes
// at least one unit, in whole units; one that names no memory takes one),
// its UUID, model, index, NUMA node and NVLink island as attributes, and an
// unhealthy GPU tainted NoSchedule with its reason. Memory leaked by
// processes of no pod is left out of the capacity, as the topology leaves it
// out of the GPU's memory.
func SliceFor(node, driver string, t contract.Topology) resourcev1.ResourceSliceSpec {
	unit := t.MemoryUnitMiB
	if unit <= 0 {
		unit = contract.DefaultMemoryUnitMiB
	}
	shared := true
	spec := resourcev1.ResourceSliceSpec{Driver: driver, NodeName: &node,
		Pool: resourcev1.ResourcePool{Name: node, Generation: t.Generation, ResourceSliceCount: 1}}
	for _, g := range t.GPUs {
		units := int64(g.MemoryMiB / unit)
		str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &s} }
		num := func(n int) resourcev1.DeviceAttribute { v := int64(n); return resourcev1.DeviceAttribute{IntValue: &v} }
		d := resourcev1.Device{
			Name: DeviceName(g.Index),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				AttrUUID: str(g.UUID), AttrModel: str(g.Model), AttrIndex: num(g.Index),
				AttrNUMANode: num(g.NUMA), AttrNVLinkIsland: num(g.Island),
			},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				CapacityMemory: {
					Value: mib(units * int64(unit)),
					RequestPolicy: &resourcev1.CapacityRequestPolicy{
						Default:    new(mib(int64(unit))),
						ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: new(mib(int64(unit))), Step: new(mib(int64(unit)))},
					},
				},
			},
			AllowMultipleAllocations: &shared,
		}
		if g.Health == contract.Unhealthy {
			d.Taints = []resourcev1.DeviceTaint{{Key: TaintUnhealthy, Value: labelValue(g.Reason), Effect: resourcev1.DeviceTaintEffectNoSchedule}}
		}
		spec.Devices = append(spec.Devices, d)
	}
	return spec
}

// DeviceName is the name of the GPU with index i in the node's slice.
func DeviceName(i int) string { return fmt.Sprintf("gpu-%d", i) }

func mib(n int64) resource.Quantity { return *resource.NewQuantity(n<<20, resource.BinarySI) }

// labelValue makes s a label value (a device taint's value): letters,
// digits, '-', '_' and '.', at most 63, starting and ending alphanumeric.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			b[i] = '-'
		}
	}
	out := string(b[:min(len(b), 63)])
	return strings.Trim(out, "-_.")
}
