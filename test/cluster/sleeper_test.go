package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestSleepSeconds(t *testing.T) {
	ctr := func(cmd, args []string) corev1.Container {
		return corev1.Container{Name: "c", Command: cmd, Args: args}
	}
	for _, tc := range []struct {
		name string
		cs   []corev1.Container
		want time.Duration
		ok   bool
	}{
		{"command", []corev1.Container{ctr([]string{"sleep", "30"}, nil)}, 30 * time.Second, true},
		{"command and args", []corev1.Container{ctr([]string{"sleep"}, []string{"7"})}, 7 * time.Second, true},
		{"the longest container", []corev1.Container{ctr([]string{"sleep", "3"}, nil), ctr([]string{"sleep", "9"}, nil)}, 9 * time.Second, true},
		{"not sleep", []corev1.Container{ctr([]string{"python", "train.py"}, nil)}, 0, false},
		{"one that does not sleep", []corev1.Container{ctr([]string{"sleep", "3"}, nil), ctr(nil, nil)}, 0, false},
		{"not seconds", []corev1.Container{ctr([]string{"sleep", "1m"}, nil)}, 0, false},
		{"negative", []corev1.Container{ctr([]string{"sleep", "-1"}, nil)}, 0, false},
		{"no containers", nil, 0, false},
	} {
		got, ok := SleepSeconds(&corev1.Pod{Spec: corev1.PodSpec{Containers: tc.cs}})
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: SleepSeconds = %v, %t; want %v, %t", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// A pod's end is reported until the API server takes it: a Sleeper whose
// first reports fail (the API server restarting) still ends the pod.
func TestSleeperRetriesTheEnd(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{
			{Name: "c", Command: []string{"sleep", "0"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	client := fake.NewClientset(pod)
	var patches atomic.Int32
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if patches.Add(1) <= 3 {
			return true, nil, apierrors.NewServiceUnavailable("restarting")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := NewSleeper(client, func(string) bool { return true })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == corev1.PodSucceeded {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the pod never ended after %d patches", patches.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := patches.Load(); n < 4 {
		t.Fatalf("%d patches, want the three refused and one more", n)
	}
}
