package handoff

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestAllocateExplainsNoMatch: a request no pod matches says, for each
// pending pod asking for the resource, what it lacks.
func TestAllocateExplainsNoMatch(t *testing.T) {
	tests := []struct {
		name     string
		givePods []*corev1.Pod
		giveKind Kind
		giveIDs  []string
		wantMsg  []string
	}{
		{
			name:     "no assignment",
			givePods: []*corev1.Pod{pod("x", 1, container(names.GPU, 1, false))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantMsg: []string{"ns/x", "has no example.com/gpu-assignment annotation"},
		},
		{
			name:     "devices outside the assignment",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0))},
			giveKind: KindGPU, giveIDs: []string{uuid(5)},
			wantMsg: []string{"does not hold these devices"},
		},
		{
			name:     "count differs",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 2, false), assigned(true, 81920, 0, 1))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantMsg: []string{"container c0 asks for 2, not 1"},
		},
		{
			name:     "running pods are never matched",
			givePods: []*corev1.Pod{pod("a", 1, phase(corev1.PodRunning), container(names.GPU, 1, false), assigned(true, 81920, 0))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantMsg: []string{"no pending pod on node n1 asks for example.com/gpu"},
		},
		{
			name:     "memory share pod asking for whole GPUs",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 1, false), assigned(false, 1024, 0))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantMsg: []string{"memory share, not whole GPUs"},
		},
		{
			name:     "assignment smaller than the request",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPUMemory, 4, false), assigned(false, 2048, 0))},
			giveKind: KindMemory, giveIDs: mem(0, 0, 1, 2, 3),
			wantMsg: []string{"asks for 4 units of 1 GiB but its assignment gives 2 GiB"},
		},
		{
			name: "assignment for another node",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0), func(p *corev1.Pod) {
				k := names.AssignmentAnnotation
				p.Annotations[k] = strings.Replace(p.Annotations[k], `"node":"n1"`, `"node":"n2"`, 1)
			})},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantMsg: []string{"ns/a: assignment is for node n2"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMatcher(node, names, 1024)
			for _, p := range tc.givePods {
				m.Upsert(p)
			}
			_, err := m.Allocate(context.Background(), tc.giveKind, tc.giveIDs, time.Millisecond)
			if !errors.Is(err, ErrNoMatch) {
				t.Fatalf("Allocate() error = %v, want %v", err, ErrNoMatch)
			}
			for _, s := range tc.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestExplanationsAreBounded: an error names at most maxListed pods and
// devices, then says how many more there are.
func TestExplanationsAreBounded(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	var ids []string
	for i := range 9 {
		m.Upsert(pod(fmt.Sprintf("p%d", i), i, container(names.GPU, 2, false), assigned(true, 81920, i)))
		ids = append(ids, uuid(i))
	}
	_, err := m.Allocate(context.Background(), KindGPU, ids, time.Millisecond)
	if !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Allocate() error = %v, want %v", err, ErrNoMatch)
	}
	for _, want := range []string{"ns/p5: container c0 asks for 2, not 9; and 3 more", uuid(5) + " … 9 in all]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "ns/p6") || strings.Contains(err.Error(), uuid(6)) {
		t.Errorf("error %q names more than %d pods or devices", err, maxListed)
	}
}
