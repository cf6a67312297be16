package cluster

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRunningPatch(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "uid-1"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "i"}},
			Containers:     []corev1.Container{{Name: "a", Image: "x"}, {Name: "b", Image: "y"}},
		},
	}
	data, err := runningPatch(pod, "172.16.0.1", "10.128.0.7", time.Unix(100, 0))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct{ UID string }
		Status   corev1.PodStatus
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.UID != "uid-1" {
		t.Errorf("patch uid precondition = %q, want uid-1", got.Metadata.UID)
	}
	s := got.Status
	if s.Phase != corev1.PodRunning || s.PodIP != "10.128.0.7" || s.HostIP != "172.16.0.1" {
		t.Errorf("status = %s %s %s", s.Phase, s.PodIP, s.HostIP)
	}
	if len(s.ContainerStatuses) != 2 || s.ContainerStatuses[1].State.Running == nil || !s.ContainerStatuses[1].Ready {
		t.Errorf("container statuses = %+v", s.ContainerStatuses)
	}
	if len(s.InitContainerStatuses) != 1 || s.InitContainerStatuses[0].State.Terminated == nil {
		t.Errorf("init container statuses = %+v", s.InitContainerStatuses)
	}
	ready := false
	for _, c := range s.Conditions {
		ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Errorf("conditions %+v lack Ready=True", s.Conditions)
	}
}

func TestNeedsWork(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		pod  corev1.Pod
		want bool
	}{
		{corev1.Pod{}, true},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, true},
		{corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, false},
		{corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, true},
	} {
		if got := needsWork(&tc.pod); got != tc.want {
			t.Errorf("needsWork(phase %q, deleting %v) = %v, want %v", tc.pod.Status.Phase, tc.pod.DeletionTimestamp != nil, got, tc.want)
		}
	}
}
