// Package server is the kubelet-facing side of rota-device-plugin: one
// v1beta1 DevicePlugin gRPC service per resource (<domain>/gpu and
// <domain>/gpu-memory) on unix sockets in the kubelet's device plugin
// folder, registration with the kubelet, re-registration when the kubelet
// restarts, and the device lists ListAndWatch streams.
//
// State holds the GPUs and their health and is safe for concurrent use;
// Plugin and Manager are safe for concurrent use by gRPC.
package server
