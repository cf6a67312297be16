// Package dra decides whether a node's GPUs are managed by Dynamic Resource
// Allocation, where Rota must stay out: two bookkeepers of one GPU (Rota's
// ledger and kube-scheduler's DRA allocator) would each hand it out.
//
// A node is DRA-managed when one of its node-local ResourceSlices
//   - comes from a driver named in the cluster's list of GPU drivers, or
//   - names, in a string attribute of one of its devices, a GPU UUID that
//     Rota's topology of that node also names (a GPU driver Rota was not
//     told about), or
//   - comes from any driver while a DeviceClass maps one of Rota's resource
//     names (spec.extendedResourceName): kube-scheduler may then serve a pod
//     asking for Rota's resource with that driver's devices.
//
// The package reads what the adapters (the extender's informers, the device
// plugin's lists) convert with FromSlice and FromClass; it holds no clients.
package dra

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// Slice is what Rota reads of one ResourceSlice published for one node.
type Slice struct {
	Name, Driver, Node string
	// Strings are the string attribute values of its devices (a GPU
	// driver names each GPU's UUID in one).
	Strings []string
}

// FromSlice reads a ResourceSlice; ok is false for a slice that is not
// published for one node (spec.nodeName unset: network-attached devices,
// not a node's GPUs).
func FromSlice(s *resourcev1.ResourceSlice) (Slice, bool) {
	if s == nil || s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
		return Slice{}, false
	}
	out := Slice{Name: s.Name, Driver: s.Spec.Driver, Node: *s.Spec.NodeName}
	for _, d := range s.Spec.Devices {
		for _, a := range d.Attributes {
			if a.StringValue != nil && *a.StringValue != "" {
				out.Strings = append(out.Strings, *a.StringValue)
			}
		}
	}
	return out, true
}

// NodeSlices reads, of a list of ResourceSlices, those published for node.
func NodeSlices(node string, items []resourcev1.ResourceSlice) []Slice {
	var out []Slice
	for i := range items {
		if s, ok := FromSlice(&items[i]); ok && s.Node == node {
			out = append(out, s)
		}
	}
	return out
}

// Class is what Rota reads of one DeviceClass.
type Class struct {
	Name string
	// ExtendedResource is spec.extendedResourceName ("" when unset).
	ExtendedResource string
}

// FromClass reads a DeviceClass.
func FromClass(c *resourcev1.DeviceClass) Class {
	out := Class{Name: c.Name}
	if c.Spec.ExtendedResourceName != nil {
		out.ExtendedResource = *c.Spec.ExtendedResourceName
	}
	return out
}

// Classes reads a list of DeviceClasses.
func Classes(items []resourcev1.DeviceClass) []Class {
	out := make([]Class, len(items))
	for i := range items {
		out[i] = FromClass(&items[i])
	}
	return out
}

// Rules say which DRA objects collide with Rota.
type Rules struct {
	// GPUDrivers are the DRA drivers whose devices are GPUs.
	GPUDrivers []string
	// Resources are Rota's extended resource names (whole GPUs, memory).
	Resources []string
	// ModeDriver is the driver of Rota's own DRA mode (ModeDriver), which
	// Why names as such.
	ModeDriver string
}

// NewRules returns the rules for Rota's resource names and the GPU drivers.
func NewRules(gpuDrivers []string, names contract.Names) Rules {
	return Rules{GPUDrivers: gpuDrivers, Resources: []string{names.GPU, names.GPUMemory}, ModeDriver: ModeDriver(names.Domain)}
}

// ModeDriver is the default driver name of Rota's DRA mode for a domain:
// gpu.<domain>.
func ModeDriver(domain string) string { return "gpu." + domain }

// UUIDs returns the UUIDs of a node's GPUs, as Why takes them.
func UUIDs(n *topology.Node) []string {
	out := make([]string, len(n.GPUs))
	for i, g := range n.GPUs {
		out[i] = g.UUID
	}
	return out
}

// Mapped returns the classes that map one of Rota's resource names to DRA
// devices, sorted by name.
func (r Rules) Mapped(classes []Class) []Class {
	var out []Class
	for _, c := range classes {
		if c.ExtendedResource != "" && slices.Contains(r.Resources, c.ExtendedResource) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Class) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Why says why a node's GPUs are DRA-managed, or "" when they are not.
// uuids are the GPUs Rota's topology names on the node (none when it has
// not published one), nodeSlices the node's ResourceSlices, classes every
// DeviceClass. The first rule that holds, in the package's order, on the
// slices sorted by name, gives the answer, so it does not change with the
// order the informers list them in.
func (r Rules) Why(uuids []string, nodeSlices []Slice, classes []Class) string {
	if len(nodeSlices) == 0 {
		return ""
	}
	ss := slices.Clone(nodeSlices)
	slices.SortFunc(ss, func(a, b Slice) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range ss {
		if s.Driver == r.ModeDriver && r.ModeDriver != "" {
			return fmt.Sprintf("its GPUs are served by Rota's DRA mode (driver %s, ResourceSlice %s): "+
				"pods take them through ResourceClaims, not Rota's extended resources", s.Driver, s.Name)
		}
		if slices.Contains(r.GPUDrivers, s.Driver) {
			return fmt.Sprintf("its GPUs are published by DRA driver %s (ResourceSlice %s); "+
				"Rota stays off a node whose GPUs DRA allocates, or both would hand them out", s.Driver, s.Name)
		}
	}
	for _, s := range ss {
		for _, v := range s.Strings {
			if slices.Contains(uuids, v) {
				return fmt.Sprintf("DRA driver %s publishes GPU %s (ResourceSlice %s), which Rota's device plugin also advertises; "+
					"Rota stays off a node whose GPUs DRA allocates (add the driver to the GPU drivers list to say so plainly)", s.Driver, v, s.Name)
			}
		}
	}
	if m := r.Mapped(classes); len(m) > 0 {
		s := ss[0]
		return fmt.Sprintf("DeviceClass %s maps %s to DRA devices, and DRA driver %s publishes devices here (ResourceSlice %s); "+
			"kube-scheduler may serve Rota's resource with them", m[0].Name, m[0].ExtendedResource, s.Driver, s.Name)
	}
	return ""
}

// Nodes returns the names of the nodes the slices are for, sorted, each
// once.
func Nodes(ss []Slice) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Node)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseDrivers reads a comma-separated list of DRA driver names, as flags
// give it: blanks are dropped, and each name must be a DNS subdomain in
// lower case, as the API requires of spec.driver.
func ParseDrivers(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(f); len(errs) > 0 {
			return nil, fmt.Errorf("DRA driver name %q: %s (like gpu.nvidia.com)", f, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}
