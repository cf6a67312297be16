package report

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// gpuPod is a running pod on node with a Rota assignment and annotations.
func gpuPod(t *testing.T, ns, name, node string, a contract.Assignment, ann map[string]string, conds ...corev1.PodCondition) corev1.Pod {
	t.Helper()
	a.Node, a.Version = node, "v1"
	b, err := a.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{contract.Default.AssignmentAnnotation: string(b)}
	for k, v := range ann {
		all[k] = v
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: all},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: conds}}
}

func TestTopPods(t *testing.T) {
	names := contract.Default
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	whole2 := contract.Assignment{Whole: true, GPUs: []contract.AssignedGPU{{Index: 0, UUID: "GPU-0", MemoryMiB: 81920}, {Index: 1, UUID: "GPU-1", MemoryMiB: 81920}}}
	share := contract.Assignment{GPUs: []contract.AssignedGPU{{Index: 2, UUID: "GPU-2", MemoryMiB: 10240}}}
	idleCond := corev1.PodCondition{Type: corev1.PodConditionType(names.GPUIdleCondition), Status: corev1.ConditionTrue,
		Message: "GPU utilization 1% has stayed below 5% for 30m0s (since 2026-07-01T11:15:00Z)"}
	done := gpuPod(t, "ml", "done", "n1", share, nil)
	done.Status.Phase = corev1.PodSucceeded
	in := Input{Now: now, Pods: []corev1.Pod{
		gpuPod(t, "ml", "busy", "n1", whole2, map[string]string{names.GPUUtilizationAnnotation: "sm=80,usedMiB=60000"}),
		gpuPod(t, "ml", "sleepy", "n1", share, map[string]string{names.GPUUtilizationAnnotation: "sm=1,usedMiB=512",
			names.IdleSinceAnnotation: "2026-07-01T11:15:00Z"}, idleCond),
		gpuPod(t, "ml", "new", "n2", share, nil),
		gpuPod(t, "web", "low", "n2", share, map[string]string{names.GPUUtilizationAnnotation: "sm=10"}),
		gpuPod(t, "web", "bad", "n2", share, map[string]string{names.GPUUtilizationAnnotation: "sm=lots"}),
		done,
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "cpu"}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	}}
	since := time.Date(2026, 7, 1, 11, 15, 0, 0, time.UTC)
	got := TopPods(in, Options{Names: names}, "", "")
	want := Pods{Idle: 1, Unpublished: 1, Pods: []PodUse{
		{Pod: "ml/sleepy", Node: "n1", GPUs: 1, AssignedMiB: 10240, Utilization: &contract.PodUtilization{SMPercent: 1, UsedMiB: 512},
			Idle: true, IdleSince: &since, IdleFor: "45m0s", IdleMessage: idleCond.Message},
		{Pod: "web/low", Node: "n2", GPUs: 1, AssignedMiB: 10240, Utilization: &contract.PodUtilization{SMPercent: 10}},
		{Pod: "ml/busy", Node: "n1", GPUs: 2, Whole: true, AssignedMiB: 163840, Utilization: &contract.PodUtilization{SMPercent: 80, UsedMiB: 60000}},
		{Pod: "ml/new", Node: "n2", GPUs: 1, AssignedMiB: 10240},
		{Pod: "web/bad", Node: "n2", GPUs: 1, AssignedMiB: 10240, Problem: `gpu utilization "sm=lots": sm="lots" is not a non-negative integer`},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("TopPods() (-want +got):\n%s", diff)
	}
	if got := TopPods(in, Options{Names: names}, "web", ""); len(got.Pods) != 2 {
		t.Errorf("namespace web: %+v", got.Pods)
	}
	if got := TopPods(in, Options{Names: names}, "", "n1"); len(got.Pods) != 2 || got.Idle != 1 {
		t.Errorf("node n1: %+v", got)
	}
}
