package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/metrics"
)

// Plugin serves the DevicePlugin API for one resource.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	kind     handoff.Kind
	resource string
	state    *State
	matcher  *handoff.Matcher
	wait     time.Duration
	metrics  *metrics.Metrics
	// containers says what Allocate hands beyond the environment (SetContainers).
	containers Containers
}

var _ pluginapi.DevicePluginServer = (*Plugin)(nil)

// NewPlugin serves resource (of kind k) from state; Allocate matches pods
// with matcher, waiting up to wait for the informer to show them.
func NewPlugin(k handoff.Kind, resource string, state *State, matcher *handoff.Matcher, wait time.Duration, m *metrics.Metrics) *Plugin {
	return &Plugin{kind: k, resource: resource, state: state, matcher: matcher, wait: wait, metrics: m}
}

// Resource is the extended resource name this plugin serves.
func (p *Plugin) Resource() string { return p.resource }

// GetDevicePluginOptions implements pluginapi.DevicePluginServer.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the full device list
// now and after every health change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	logger := klog.FromContext(stream.Context())
	for {
		gpus, changed := p.state.Snapshot()
		devs := Devices(p.kind, gpus, p.state.UnitMiB())
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		logger.V(4).Info("Sent device list", "resource", p.resource, "devices", len(devs))
		select {
		case <-changed:
		case <-stream.Context().Done(): // also when the gRPC server stops
			return nil
		}
	}
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer: it steers
// the kubelet to the devices of the pod's assignment (see deviceplugin/README.md).
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	logger := klog.FromContext(ctx)
	if err := p.checkPreferred(req); err != nil {
		logger.Error(err, "Malformed GetPreferredAllocation refused", "resource", p.resource)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		pref, err := p.matcher.Preferred(ctx, p.kind, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), p.wait)
		if err != nil {
			logger.Error(err, "No preferred allocation", "resource", p.resource, "size", cr.AllocationSize)
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		switch {
		case pref.Admitting:
			logger.V(2).Info("Preferred allocation for the pod the kubelet is admitting (PodResources)",
				"resource", p.resource, "size", cr.AllocationSize, "pod", pref.Pod, "devices", pref.IDs, "notAdmitting", pref.NotAdmitting)
		case len(pref.Others) > 0:
			logger.Info("Preferred allocation steered to the earliest-bound pod; others wait for the same shape",
				"resource", p.resource, "size", cr.AllocationSize, "pod", pref.Pod, "devices", pref.IDs, "others", pref.Others,
				"podResourcesErr", pref.PodResourcesErr)
		}
		ids := pref.IDs
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate implements pluginapi.DevicePluginServer: it finds the one pod the
// devices belong to and hands the container that pod's GPUs.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	if err := p.checkAllocate(req); err != nil {
		p.metrics.Allocate(p.resource, time.Since(start), "invalid")
		logger.Error(err, "Malformed Allocate refused", "resource", p.resource)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &pluginapi.AllocateResponse{}
	var granted []handoff.Grant
	for _, cr := range req.ContainerRequests {
		g, err := p.matcher.Allocate(ctx, p.kind, cr.DevicesIds, p.wait)
		if err != nil {
			// All or nothing: the kubelet discards the whole response, so
			// the containers matched before this one are not allocated.
			for i := len(granted) - 1; i >= 0; i-- {
				p.matcher.Undo(granted[i])
			}
			reason := "other"
			switch {
			case errors.Is(err, handoff.ErrNoMatch):
				reason = "no_match"
			case errors.Is(err, handoff.ErrAmbiguous):
				reason = "ambiguous"
			}
			p.metrics.Allocate(p.resource, time.Since(start), reason)
			logger.Error(err, "Allocate refused", "resource", p.resource, "devices", cr.DevicesIds)
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		kv := []any{"resource", p.resource, "pod", g.Pod, "container", g.Container,
			"gpus", g.UUIDs, "memoryMiB", int64(g.MemoryMiB), "twins", g.Twins}
		if g.Admitting {
			kv = append(kv, "byPodResources", true, "notAdmitting", g.NotAdmitting)
		}
		if g.PodResourcesErr != "" {
			kv = append(kv, "podResourcesErr", g.PodResourcesErr)
		}
		granted = append(granted, g)
		cresp, err := p.containers.Response(ctx, g)
		if err != nil {
			for i := len(granted) - 1; i >= 0; i-- {
				p.matcher.Undo(granted[i])
			}
			p.metrics.Allocate(p.resource, time.Since(start), "mps")
			logger.Error(err, "Allocate refused", "resource", p.resource, "devices", cr.DevicesIds)
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		logger.Info("Allocated", kv...)
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	p.metrics.Allocate(p.resource, time.Since(start), "")
	return resp, nil
}

// advertised is the set of device IDs this plugin lists in ListAndWatch
// (healthy or not).
func (p *Plugin) advertised() map[string]bool {
	gpus, _ := p.state.Snapshot()
	devs := Devices(p.kind, gpus, p.state.UnitMiB())
	out := make(map[string]bool, len(devs))
	for _, d := range devs {
		out[d.ID] = true
	}
	return out
}

// checkIDs checks that every ID is a device of this plugin and appears once
// in seen.
func checkIDs(what string, ids []string, known, seen map[string]bool) error {
	for _, id := range ids {
		if !known[id] {
			return fmt.Errorf("%s: %s is not a device of this resource", what, quote(id))
		}
		if seen[id] {
			return fmt.Errorf("%s: device %s is listed twice", what, quote(id))
		}
		seen[id] = true
	}
	return nil
}

// checkAllocate refuses requests the kubelet never sends: no containers,
// a container without devices, devices this plugin does not list, or one
// device listed twice (devices are exclusive, across containers too).
func (p *Plugin) checkAllocate(req *pluginapi.AllocateRequest) error {
	if len(req.ContainerRequests) == 0 {
		return errors.New("the request has no container requests")
	}
	known, seen := p.advertised(), map[string]bool{}
	for i, cr := range req.ContainerRequests {
		if len(cr.DevicesIds) == 0 {
			return fmt.Errorf("container request %d asks for zero %s devices", i, p.resource)
		}
		if len(cr.DevicesIds) > len(known) {
			return fmt.Errorf("container request %d asks for %d %s devices; the node has %d", i, len(cr.DevicesIds), p.resource, len(known))
		}
		if err := checkIDs(fmt.Sprintf("container request %d", i), cr.DevicesIds, known, seen); err != nil {
			return err
		}
	}
	return nil
}

// checkPreferred refuses preferred-allocation requests the kubelet never
// sends: no containers, a size that is not positive or larger than the
// available devices, unknown or repeated IDs, fewer available devices than
// must be included, or must-include devices missing from the available ones
// (the kubelet passes available ⊇ mustInclude).
func (p *Plugin) checkPreferred(req *pluginapi.PreferredAllocationRequest) error {
	if len(req.ContainerRequests) == 0 {
		return errors.New("the request has no container requests")
	}
	known := p.advertised()
	for i, cr := range req.ContainerRequests {
		what := fmt.Sprintf("container request %d", i)
		size := int(cr.AllocationSize)
		switch {
		case size <= 0:
			return fmt.Errorf("%s: allocation size %d", what, cr.AllocationSize)
		case size > len(cr.AvailableDeviceIDs):
			return fmt.Errorf("%s: allocation size %d but %d devices available", what, size, len(cr.AvailableDeviceIDs))
		case len(cr.MustIncludeDeviceIDs) > size:
			return fmt.Errorf("%s: %d must-include devices for an allocation of %d", what, len(cr.MustIncludeDeviceIDs), size)
		}
		avail := map[string]bool{}
		if err := checkIDs(what+" available", cr.AvailableDeviceIDs, known, avail); err != nil {
			return err
		}
		must := map[string]bool{}
		for _, id := range cr.MustIncludeDeviceIDs {
			if !avail[id] {
				return fmt.Errorf("%s: must-include device %s is not among the available devices", what, quote(id))
			}
			if must[id] {
				return fmt.Errorf("%s must-include: device %s is listed twice", what, quote(id))
			}
			must[id] = true
		}
	}
	return nil
}

// quote quotes an ID for an error message, cut to 64 bytes.
func quote(id string) string {
	if len(id) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", id[:64], len(id))
	}
	return fmt.Sprintf("%q", id)
}

// PreStartContainer implements pluginapi.DevicePluginServer; nothing to do.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
