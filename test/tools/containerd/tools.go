//go:build tools

// Package tools pins containerd 2.x, the container runtime of test/realnode's
// DRA scenario: the kubelet hands a DRA driver's devices to the runtime as
// CDI device names, which the host's containerd 1.6 ignores. hack/containerd.sh
// builds containerd and its runc shim into .cache/containerd/bin.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
)
