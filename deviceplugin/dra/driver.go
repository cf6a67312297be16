// Package dra is rota-device-plugin's Dynamic Resource Allocation mode
// (docs/dra.md): a kubelet plugin, built on
// k8s.io/dynamic-resource-allocation's kubeletplugin, that publishes the
// node's GPUs as one ResourceSlice (pkg/dra.SliceFor: one shared device per
// GPU, its memory as consumable capacity) and prepares the claims
// kube-scheduler allocated on them.
//
// Preparing a claim writes one CDI spec file for it. The container edits
// come from the same place as the device-plugin mode's Allocate answer
// (server.Containers.Response): NVIDIA_VISIBLE_DEVICES, and for a memory
// share the GPU's MPS daemon, its pipe folder and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT with the memory the claim consumed. The
// container runtime applies the file when the kubelet names its CDI device.
//
// What the slice serves: a claim's devices of this driver come from one
// request; a claim that consumed part of a GPU's memory holds that one GPU
// (each GPU has its own MPS daemon, and a container talks to one); a claim
// that consumed all of a GPU's memory, or whose allocation carries no
// consumed capacity, holds the GPU whole; a claim with admin access
// (monitoring) sees its GPUs and changes nothing on them. Anything else is refused at
// preparation with the reason, and the pod does not start.
package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/pkg/contract"
	pdra "github.com/rota-sched/rota/pkg/dra"
)

// CDIVersion is the CDI spec version the claim files declare: 0.5.0 added
// device nodes' host paths, the newest feature they use.
const CDIVersion = "0.6.0"

// ClaimEnv names the claim (namespace/name) in its containers.
const ClaimEnv = "ROTA_CLAIM"

// Responder builds what a container granted g gets (server.Containers).
type Responder interface {
	Response(ctx context.Context, g handoff.Grant) (*pluginapi.ContainerAllocateResponse, error)
}

// Driver is the DRA mode's kubeletplugin.DRAPlugin. Safe for concurrent use.
type Driver struct {
	name    string
	cdiDir  string
	respond Responder

	mu   sync.Mutex
	gpus map[string]contract.TopologyGPU // by device name (pdra.DeviceName)
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// NewDriver returns the driver called name, writing CDI spec files into
// cdiDir (a folder the container runtime reads specs from).
func NewDriver(name, cdiDir string, respond Responder) *Driver {
	return &Driver{name: name, cdiDir: cdiDir, respond: respond, gpus: map[string]contract.TopologyGPU{}}
}

// CDIKind is the CDI kind of the claims' devices: "<driver>/claim".
func (d *Driver) CDIKind() string { return d.name + "/claim" }

// SetGPUs records the node's GPUs, as published in its slice.
func (d *Driver) SetGPUs(gpus []contract.TopologyGPU) {
	m := make(map[string]contract.TopologyGPU, len(gpus))
	for _, g := range gpus {
		m[pdra.DeviceName(g.Index)] = g
	}
	d.mu.Lock()
	d.gpus = m
	d.mu.Unlock()
}

// PrepareResourceClaims prepares each claim on its own: one claim's error
// does not fail the others.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourcev1.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := d.prepare(ctx, c)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Could not prepare the claim", "claim", klog.KObj(c), "uid", c.UID)
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs}
	}
	return out, nil
}

func (d *Driver) prepare(ctx context.Context, c *resourcev1.ResourceClaim) ([]kubeletplugin.Device, error) {
	d.mu.Lock()
	gpus := d.gpus
	d.mu.Unlock()
	p, err := Plan(c, d.name, gpus)
	if err != nil {
		return nil, err
	}
	if len(p.Results) == 0 {
		return nil, nil
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: p.Grant.Env()}
	if !p.Admin {
		if resp, err = d.respond.Response(ctx, p.Grant); err != nil {
			return nil, fmt.Errorf("claim %s: %w", p.Claim, err)
		}
	}
	spec := Spec(d.CDIKind(), string(c.UID), p.Claim, resp)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeAtomically(d.specPath(c.UID), data); err != nil {
		return nil, fmt.Errorf("writing the CDI spec of claim %s: %w", p.Claim, err)
	}
	ids := append([]string{d.CDIKind() + "=" + string(c.UID)}, cdiDeviceNames(resp)...)
	devs := make([]kubeletplugin.Device, len(p.Results))
	for i, r := range p.Results {
		devs[i] = kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, ShareID: r.ShareID}
	}
	// The claim's one CDI device carries every GPU of its one request, so
	// it is named once: a container that uses the claim gets it once.
	devs[0].CDIDeviceIDs = ids
	klog.FromContext(ctx).Info("Prepared the claim", "claim", klog.KObj(c), "uid", c.UID, "gpus", p.Grant.UUIDs,
		"kind", p.Grant.Kind, "memoryMiB", int64(p.Grant.MemoryMiB), "cdiDevices", ids)
	return devs, nil
}

// UnprepareResourceClaims removes the claims' CDI spec files. A claim that
// was never prepared here has none, which is not an error. A GPU's MPS
// daemon keeps running, as in the device-plugin mode, until a claim takes
// the whole GPU.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[c.UID] = err
		klog.FromContext(ctx).Info("Unprepared the claim", "claim", c.NamespacedName, "uid", c.UID, "err", err)
	}
	return out, nil
}

// HandleError logs errors of the library's background work (publishing
// slices); it retries them itself.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus is not served: a GPU's health is published in the
// slice, as a device taint (pkg/dra.SliceFor), which keeps new claims off
// it.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (d *Driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, d.name+"_"+string(uid)+".json")
}

// ClaimPlan is what a claim's allocation asks of this node.
type ClaimPlan struct {
	// Claim is namespace/name.
	Claim string
	// Results are the allocation's results of this driver.
	Results []resourcev1.DeviceRequestAllocationResult
	// Grant is the containers' share, as the device-plugin mode's Allocate
	// would grant it.
	Grant handoff.Grant
	// Admin says the claim asked for admin access (monitoring): its
	// containers see the GPUs, and nothing is started or stopped for them,
	// above all not the MPS daemon of shares running there.
	Admin bool
}

// Plan reads c's allocation for driver on a node with gpus (by device
// name). It refuses what the mode does not serve (see the package comment).
func Plan(c *resourcev1.ResourceClaim, driver string, gpus map[string]contract.TopologyGPU) (ClaimPlan, error) {
	p := ClaimPlan{Claim: c.Namespace + "/" + c.Name}
	if c.Status.Allocation == nil {
		return p, fmt.Errorf("claim %s is not allocated", p.Claim)
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == driver {
			p.Results = append(p.Results, r)
		}
	}
	if len(p.Results) == 0 {
		return p, nil
	}
	p.Grant.Pod = p.Claim
	if len(c.Status.ReservedFor) == 1 && c.Status.ReservedFor[0].Resource == "pods" {
		p.Grant.Pod = c.Namespace + "/" + c.Status.ReservedFor[0].Name
		p.Grant.PodUID = string(c.Status.ReservedFor[0].UID)
	}
	shares := 0
	for _, r := range p.Results {
		if r.Request != p.Results[0].Request {
			return p, fmt.Errorf("claim %s has devices of requests %q and %q: this driver serves one request per claim",
				p.Claim, p.Results[0].Request, r.Request)
		}
		g, ok := gpus[r.Device]
		if !ok {
			return p, fmt.Errorf("claim %s names device %s, which this node does not have", p.Claim, r.Device)
		}
		if slices.Contains(p.Grant.UUIDs, g.UUID) {
			return p, fmt.Errorf("claim %s holds device %s twice", p.Claim, r.Device)
		}
		p.Grant.UUIDs = append(p.Grant.UUIDs, g.UUID)
		if r.AdminAccess != nil && *r.AdminAccess {
			p.Admin = true
			continue
		}
		q, ok := r.ConsumedCapacity[pdra.CapacityMemory]
		if !ok {
			continue // no consumable capacity: the device is the claim's alone
		}
		if q.Sign() <= 0 {
			return p, fmt.Errorf("claim %s consumed %s of device %s's memory", p.Claim, q.String(), r.Device)
		}
		// AsInt64, not Value: Value reads a quantity past int64 (1e30) as 0.
		v, exact := q.AsInt64()
		mib := contract.MiB(v >> 20)
		if !exact || v%(1<<20) != 0 || mib > g.MemoryMiB {
			return p, fmt.Errorf("claim %s consumed %s of device %s, which has %d MiB", p.Claim, q.String(), r.Device, g.MemoryMiB)
		}
		if mib < g.MemoryMiB {
			shares++
			p.Grant.MemoryMiB = mib
		}
	}
	switch {
	case p.Admin && shares > 0:
		return p, fmt.Errorf("claim %s mixes admin access with a memory share", p.Claim)
	case shares == 0:
		p.Grant.Kind, p.Grant.MemoryMiB = handoff.KindGPU, 0
	case len(p.Results) == 1:
		p.Grant.Kind = handoff.KindMemory
	default:
		return p, fmt.Errorf("claim %s takes a memory share of one of %d GPUs: a claim may share one GPU only "+
			"(each GPU has its own MPS daemon); ask for whole GPUs, or one share per claim", p.Claim, len(p.Results))
	}
	return p, nil
}

// Spec is the CDI spec of a claim's one device, named by its UID: the
// container edits of resp (environment, mounts, device nodes) and the claim's
// name in ClaimEnv.
func Spec(kind, uid, claim string, resp *pluginapi.ContainerAllocateResponse) cdispec.Spec {
	var e cdispec.ContainerEdits
	env := make([]string, 0, len(resp.Envs)+1)
	for k, v := range resp.Envs {
		env = append(env, k+"="+v)
	}
	env = append(env, ClaimEnv+"="+claim)
	sort.Strings(env)
	e.Env = env
	for _, m := range resp.Mounts {
		opts := []string{"rbind", "rw"}
		if m.ReadOnly {
			opts[1] = "ro"
		}
		e.Mounts = append(e.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts})
	}
	for _, n := range resp.Devices {
		e.DeviceNodes = append(e.DeviceNodes, &cdispec.DeviceNode{Path: n.ContainerPath, HostPath: n.HostPath, Permissions: n.Permissions})
	}
	return cdispec.Spec{Version: CDIVersion, Kind: kind, Devices: []cdispec.Device{{Name: uid, ContainerEdits: e}}}
}

// cdiDeviceNames are the CDI devices resp names itself (the device-plugin
// mode's --cdi-kind, e.g. nvidia.com/gpu=<uuid>).
func cdiDeviceNames(resp *pluginapi.ContainerAllocateResponse) []string {
	out := make([]string, 0, len(resp.CdiDevices))
	for _, c := range resp.CdiDevices {
		out = append(out, c.Name)
	}
	return out
}

// writeAtomically writes data to a temporary file beside name and renames
// it, so the container runtime never reads half a spec.
func writeAtomically(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-"+filepath.Base(name))
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}
