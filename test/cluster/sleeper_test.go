package cluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
