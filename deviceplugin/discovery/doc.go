// Package discovery finds a node's GPUs and reports their health events. It
// hides three backends behind the Backend interface:
//
//   - NVML: the real driver through github.com/NVIDIA/go-nvml (dlopen of
//     libnvidia-ml.so.1); OpenNVML returns ErrNoDriver when the library or
//     the kernel driver is absent;
//   - Mock: go-nvml's mock DGX servers (dgxa100, dgxh100, dgxh200, dgxb200)
//     driven through the same NVML code path, with injectable XID events;
//   - Fake: a small YAML/JSON file describing simulated GPUs, plus a health
//     file next to it that can fail a GPU at run time ("GPU-uuid=xid:79").
//
// NVML is reached only through the narrow Library interface declared here;
// nvml.Return values are turned into errors at this boundary.
//
// Discovery returns topology.GPU values (pkg/topology) with NVLink peers and
// islands filled in; it never talks to the API server or the kubelet.
// Backends are safe for concurrent use: Watch runs in one goroutine while
// Probe is called from another.
package discovery
