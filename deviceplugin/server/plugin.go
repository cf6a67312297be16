package server

import (
	"context"
	"errors"
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
// the kubelet to the devices of the pod's assignment (see README).
func (p *Plugin) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	logger := klog.FromContext(ctx)
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		pref, err := p.matcher.Preferred(ctx, p.kind, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize), p.wait)
		if err != nil {
			logger.Info("No preferred allocation", "resource", p.resource, "size", cr.AllocationSize, "err", err.Error())
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
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		g, err := p.matcher.Allocate(ctx, p.kind, cr.DevicesIds, p.wait)
		if err != nil {
			reason := "other"
			switch {
			case errors.Is(err, handoff.ErrNoMatch):
				reason = "no_match"
			case errors.Is(err, handoff.ErrAmbiguous):
				reason = "ambiguous"
			}
			p.metrics.Allocate(p.resource, time.Since(start), reason)
			logger.Info("Allocate refused", "resource", p.resource, "devices", cr.DevicesIds, "err", err.Error())
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
		logger.Info("Allocated", kv...)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: g.Env()})
	}
	p.metrics.Allocate(p.resource, time.Since(start), "")
	return resp, nil
}

// PreStartContainer implements pluginapi.DevicePluginServer; nothing to do.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
