//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestPodGroupGang runs a control plane of its own with Kubernetes' gang
// API on (the GenericWorkload feature gate, beta and off by default in
// v1.37; scheduling.k8s.io/v1beta1 served), where kube-scheduler runs its
// own pod-group cycle. Two pods of a PodGroup whose policy is a gang of 2
// (and that name no gang of Rota's) are named Rota's gang by the webhook,
// admitted together by Rota's queue with room held in one leaf, and bound
// together by kube-scheduler's cycle, which asks the extender about each
// member on its own: both run in the leaf that holds them both.
func TestPodGroupGang(t *testing.T) {
	scenario(t, "podgroup")
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	gates := "--feature-gates=GenericWorkload=true"
	e, err := harness.Start(ctx, harness.Options{Queueing: true, RemoveDir: true, Logf: t.Logf,
		APIServerArgs: []string{gates, "--runtime-config=scheduling.k8s.io/v1beta1=true"}, SchedulerArgs: []string{gates}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	leaf := e.Names.Domain + "/leaf"
	var specs []harness.GPUNodeSpec
	for i, l := range []string{"pg-a", "pg-b", "pg-b"} {
		specs = append(specs, harness.GPUNodeSpec{Name: fmt.Sprintf("pg-%d", i), Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8,
			Labels: map[string]string{leaf: l}})
	}
	if _, err := e.AddGPUNodes(ctx, specs...); err != nil {
		t.Fatal(err)
	}
	const ns = "e2e-podgroup"
	if err := e.CreateNamespace(ctx, ns, ""); err != nil {
		t.Fatal(err)
	}
	two := int32(2)
	if _, err := e.Client.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: two}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PodGroup workers (is scheduling.k8s.io/v1beta1 served?): %v", err)
	}
	group := "workers"
	for i := range 2 {
		p := harness.Pod(ns, fmt.Sprintf("worker-%d", i)).GPUs(8).Obj()
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
		if _, err := e.CreatePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := e.WaitPods(ctx, ns, func(p []corev1.Pod) bool { return harness.Running(p) == 2 })
	if err != nil {
		t.Fatalf("waiting for the PodGroup's two pods to run: %v\n%s", err, describe(context.Background(), pods))
	}
	for _, p := range pods {
		if p.Labels[e.Names.GangLabel] != "workers" || p.Annotations[e.Names.GangSizeAnnotation] != "2" {
			t.Errorf("pod %s: gang %q size %q; want the PodGroup's gang workers of 2", p.Name, p.Labels[e.Names.GangLabel], p.Annotations[e.Names.GangSizeAnnotation])
		}
		n, err := e.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l := n.Labels[leaf]; l != "pg-b" {
			t.Errorf("pod %s runs on %s in leaf %q; want pg-b, the leaf that holds both", p.Name, p.Spec.NodeName, l)
		}
	}
}
