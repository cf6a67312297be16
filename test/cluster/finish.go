package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// FinishPod ends a running pod as the kubelet does when its containers
// exit: phase Succeeded (exit code 0) or Failed (exit code 1), every
// container terminated. There is no kubelet here, so tests end the pods
// that controllers wait for (a Job counts its Succeeded pods). The pod's
// UID is a precondition.
func FinishPod(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase) error {
	code, reason := int32(0), "Completed"
	switch phase {
	case corev1.PodSucceeded:
	case corev1.PodFailed:
		code, reason = 1, "Error"
	default:
		return fmt.Errorf("finishing pod %s/%s: phase %q, want Succeeded or Failed", pod.Namespace, pod.Name, phase)
	}
	now := metav1.NewTime(time.Now())
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
				StartedAt: pod.CreationTimestamp, FinishedAt: now}}})
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"phase": phase, "containerStatuses": statuses, "conditions": []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now},
		}},
	})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("finishing pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
