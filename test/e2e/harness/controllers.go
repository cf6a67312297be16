package harness

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/cluster"
)

// StartControllerManager starts kube-controller-manager with only the
// named controllers (e.g. "job") for the scenarios that run workload
// controllers; the control plane has none otherwise. It runs until Stop,
// for every later scenario too: a second call with the same controllers
// does nothing. Each controller acts as its own ServiceAccount in
// kube-system (test/cluster StartControllerManager).
func (e *Env) StartControllerManager(ctx context.Context, controllers ...string) error {
	return e.Cluster.StartControllerManager(ctx, controllers...)
}

// FinishPod ends a running pod as the kubelet does when its containers
// exit (phase Succeeded or Failed); the kubelet stand-in never does.
func (e *Env) FinishPod(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase) error {
	return cluster.FinishPod(ctx, e.Client, pod, phase)
}
