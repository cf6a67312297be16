//go:build tools

// Package tools pins the Kubernetes commands that hack/k8s-tools.sh builds for
// the real-control-plane tests (test/cluster). It is a separate module so that
// k8s.io/kubernetes and its dependency graph never enter the main module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
