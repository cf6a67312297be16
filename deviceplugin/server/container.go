package server

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/mps"
)

// Containers says what Allocate hands a container beyond its environment.
// The zero value hands the environment only (NVIDIA_VISIBLE_DEVICES, read by
// the NVIDIA container runtime), as before.
type Containers struct {
	// MPS, when set, runs a control daemon for every GPU a memory share is
	// allocated on, and hands the share its pipe folder; a whole-GPU
	// allocation stops the GPU's daemon. When MPS is not available on the
	// node, shares get the environment only (the topology says so).
	MPS *mps.Daemons
	// DeviceNodes, when set, hands /dev/nvidiactl, /dev/nvidia-uvm,
	// /dev/nvidia-uvm-tools and /dev/nvidia<minor> of each GPU as device
	// specs: containers then reach the GPUs without the NVIDIA runtime's
	// environment mode (the image brings the CUDA user-space libraries, or
	// DriverMounts mounts the host's).
	DeviceNodes bool
	// Minor maps GPU UUIDs to their device node number (NVML).
	Minor map[string]int
	// DriverMounts are host paths mounted read-only at the same path
	// (e.g. the folder holding libcuda.so.1 and libnvidia-ml.so.1).
	DriverMounts []string
	// CDIKind, when set (e.g. "nvidia.com/gpu"), names each GPU as the CDI
	// device <kind>=<uuid> (nvidia-ctk cdi generate's UUID names); the
	// container runtime must have CDI enabled.
	CDIKind string
}

// SetContainers configures what Allocate hands containers. Call it before
// serving.
func (p *Plugin) SetContainers(c Containers) { p.containers = c }

// Response is what a container granted g gets: its environment, mounts,
// device nodes and CDI devices. It starts the MPS daemon of a memory
// share's GPU, and stops the daemons of whole GPUs. The device plugin's
// Allocate and the DRA mode's claim preparation (deviceplugin/dra) both
// build containers with it.
func (c Containers) Response(ctx context.Context, g handoff.Grant) (*pluginapi.ContainerAllocateResponse, error) {
	resp := &pluginapi.ContainerAllocateResponse{Envs: g.Env()}
	if c.MPS != nil {
		switch {
		case g.Kind == handoff.KindMemory && c.MPS.Available():
			u := g.UUIDs[0]
			if err := c.MPS.Ensure(ctx, u); err != nil {
				return nil, fmt.Errorf("the MPS control daemon for GPU %s of %s is not running: %w", u, g.Pod, err)
			}
			mounts, env := c.MPS.Container(u)
			resp.Mounts = append(resp.Mounts, mounts...)
			for k, v := range env {
				resp.Envs[k] = v
			}
		case g.Kind == handoff.KindMemory:
			klog.FromContext(ctx).Info("MPS is not available on this node; the memory share's limit is not enforced",
				"pod", g.Pod, "gpu", g.UUIDs[0], "reason", c.MPS.Status().Reason)
		default:
			for _, u := range g.UUIDs {
				if err := c.MPS.Release(ctx, u); err != nil {
					return nil, fmt.Errorf("GPU %s for %s: %w", u, g.Pod, err)
				}
			}
		}
	}
	if c.DeviceNodes {
		for _, path := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: path, Permissions: "rw"})
		}
		for _, u := range g.UUIDs {
			m, ok := c.Minor[u]
			if !ok {
				return nil, fmt.Errorf("GPU %s of %s has no known device node", u, g.Pod)
			}
			path := fmt.Sprintf("/dev/nvidia%d", m)
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: path, Permissions: "rw"})
		}
	}
	for _, path := range c.DriverMounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: path, HostPath: path, ReadOnly: true})
	}
	if c.CDIKind != "" {
		for _, u := range g.UUIDs {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: c.CDIKind + "=" + u})
		}
	}
	return resp, nil
}
