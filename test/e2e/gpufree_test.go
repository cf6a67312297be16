//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestGPUFreePods: with every pod sent to the extender (the chart's
// scheduler.gpuFreePods), CPU-only pods fill the node without GPUs first
// and then the GPU node the policy picks (binpack: the busier one), where
// kube-scheduler alone (LeastAllocated) would put the first one on an idle
// GPU node with the most free CPU. The extender's decision record says why.
func TestGPUFreePods(t *testing.T) {
	const name = "gpu-free"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count, spec.CPU, spec.Memory = 4, "16", "256Gi"
	gpu := nodes(ctx, t, name, "gf", 2, spec)
	if err := env.AddPlainNode(ctx, "gf-plain", map[string]string{ScenarioLabel: name}, "8", "64Gi"); err != nil {
		t.Fatal(err)
	}

	create(ctx, t, pod(ns, "train", name).GPUs(1).CPU("2").Obj())
	pods := waitPods(ctx, t, ns, "the GPU pod running", func(p []corev1.Pod) bool { return harness.Running(p) == 1 })
	busy := pods[0].Spec.NodeName
	idle := gpu[0].Spec.Name
	if idle == busy {
		idle = gpu[1].Spec.Name
	}

	for _, p := range []string{"prep-0", "prep-1"} {
		create(ctx, t, pod(ns, p, name).CPU("4").Obj())
	}
	pods = waitPods(ctx, t, ns, "2 CPU pods running", func(p []corev1.Pod) bool { return harness.Running(p) == 3 })
	for _, p := range pods {
		if strings.HasPrefix(p.Name, "prep-") && p.Spec.NodeName != "gf-plain" {
			t.Errorf("CPU-only pod %s on %s, want gf-plain (the node without GPUs)", p.Name, p.Spec.NodeName)
		}
	}
	create(ctx, t, pod(ns, "prep-2", name).CPU("4").Obj())
	pods = waitPods(ctx, t, ns, "3 CPU pods running", func(p []corev1.Pod) bool { return harness.Running(p) == 4 })
	for _, p := range pods {
		if p.Name == "prep-2" && p.Spec.NodeName != busy {
			t.Errorf("third CPU-only pod on %s, want %s (the plain node is full; binpack's GPU node: the busier one, not %s)",
				p.Spec.NodeName, busy, idle)
		}
	}
	msg, err := lastFilter(ctx, env.ExtenderURL+"/debug/pods/"+ns+"/prep-2", "fit")
	if err != nil || !strings.Contains(msg, "GPUs its CPU and memory would strand") {
		t.Errorf("decision record of prep-2 says %q (%v), want why it went where it did", msg, err)
	}
	checkInvariants(ctx, t, nil)
	note(name, "2 CPU-only pods on the node without GPUs, the third beside the GPU pod on %s, not the idle %s", busy, idle)
}
