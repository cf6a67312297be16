package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestAllocate(t *testing.T) {
	tests := []struct {
		name      string
		givePods  []*corev1.Pod
		giveKind  Kind
		giveIDs   []string
		wantPod   string
		wantUUIDs []string
		wantMiB   contract.MiB
		wantErr   error
		wantMsg   []string
	}{
		{
			name:     "whole GPUs match by UUID set",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 2, false), assigned(true, 81920, 2, 3))},
			giveKind: KindGPU, giveIDs: []string{uuid(3), uuid(2)},
			wantPod: "ns/a", wantUUIDs: []string{uuid(2), uuid(3)},
		},
		{
			name: "two pods with the same count are told apart by their GPUs",
			givePods: []*corev1.Pod{
				pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0)),
				pod("b", 2, container(names.GPU, 1, false), assigned(true, 81920, 1)),
			},
			giveKind: KindGPU, giveIDs: []string{uuid(1)}, wantPod: "ns/b", wantUUIDs: []string{uuid(1)},
		},
		{
			name:     "memory share gets units x unit as its limit",
			givePods: []*corev1.Pod{pod("m", 1, container(names.GPUMemory, 10, false), assigned(false, 10240, 4))},
			giveKind: KindMemory, giveIDs: mem(4, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
			wantPod: "ns/m", wantUUIDs: []string{uuid(4)}, wantMiB: 10240,
		},
		{
			name: "identical memory shares are twins, the first bound wins",
			givePods: []*corev1.Pod{
				pod("t2", 2, container(names.GPUMemory, 2, false), assigned(false, 2048, 4)),
				pod("t1", 1, container(names.GPUMemory, 2, false), assigned(false, 2048, 4)),
			},
			giveKind: KindMemory, giveIDs: mem(4, 7, 8), wantPod: "ns/t2", wantUUIDs: []string{uuid(4)}, wantMiB: 2048,
		},
		{
			name: "overlapping whole-GPU assignments are refused",
			givePods: []*corev1.Pod{
				pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0)),
				pod("b", 2, container(names.GPU, 1, false), assigned(true, 81920, 0)),
			},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantErr: ErrAmbiguous, wantMsg: []string{"ns/a, ns/b", "refusing to guess"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMatcher(node, names, 1024)
			for _, p := range tc.givePods {
				m.Upsert(p)
			}
			g, err := m.Allocate(context.Background(), tc.giveKind, tc.giveIDs, time.Millisecond)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Allocate() error = %v, want %v", err, tc.wantErr)
			}
			for _, s := range tc.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if err != nil {
				return
			}
			if g.Pod != tc.wantPod || !slices.Equal(g.UUIDs, tc.wantUUIDs) || g.MemoryMiB != tc.wantMiB {
				t.Errorf("Allocate() = %+v, want pod %s uuids %v MiB %d", g, tc.wantPod, tc.wantUUIDs, tc.wantMiB)
			}
		})
	}
}

func TestInitContainersAndSeveralContainers(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	// init container with 2 GPUs, then two app containers with 1 each: the
	// kubelet allocates 3 times; the app containers reuse the init's GPUs.
	m.Upsert(pod("p", 1, container(names.GPU, 2, true), container(names.GPU, 1, false), container(names.GPU, 1, false), assigned(true, 81920, 5, 6)))
	ctx := context.Background()
	steps := []struct {
		avail, must []string
		size        int
	}{
		{[]string{uuid(0), uuid(5), uuid(6)}, nil, 2},
		{[]string{uuid(0), uuid(5), uuid(6)}, []string{uuid(5)}, 1},
		{[]string{uuid(0), uuid(6)}, []string{uuid(6)}, 1},
	}
	for i, s := range steps {
		pref, err := m.Preferred(ctx, KindGPU, s.avail, s.must, s.size, time.Millisecond)
		ids := pref.IDs
		if err != nil {
			t.Fatalf("step %d Preferred: %v", i, err)
		}
		g, err := m.Allocate(ctx, KindGPU, ids, time.Millisecond)
		if err != nil {
			t.Fatalf("step %d Allocate(%v): %v", i, ids, err)
		}
		if g.Container != fmt.Sprintf("c%d", i) {
			t.Errorf("step %d container = %s", i, g.Container)
		}
	}
	if got := m.Allocated("uid-p", KindGPU); got != 3 {
		t.Errorf("Allocated = %d, want 3", got)
	}
}

func TestPreferredSteersToAssignment(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("a", 1, container(names.GPU, 2, false), assigned(true, 81920, 6, 2)))
	m.Upsert(pod("b", 2, container(names.GPUMemory, 3, false), assigned(false, 3072, 1)))
	all := []string{uuid(0), uuid(1), uuid(2), uuid(3), uuid(4), uuid(5), uuid(6), uuid(7)}
	pref, err := m.Preferred(context.Background(), KindGPU, all, nil, 2, time.Millisecond)
	if err != nil || !slices.Equal(pref.IDs, []string{uuid(6), uuid(2)}) || len(pref.Others) != 0 {
		t.Fatalf("Preferred(gpu) = %+v %v", pref, err)
	}
	avail := append(mem(0, 0, 1, 2), mem(1, 9, 3, 5, 4)...)
	pref, err = m.Preferred(context.Background(), KindMemory, avail, nil, 3, time.Millisecond)
	if err != nil || !slices.Equal(pref.IDs, mem(1, 3, 4, 5)) {
		t.Fatalf("Preferred(memory) = %+v %v", pref, err)
	}
	// GPU 6 is no longer available: pod a cannot be served.
	if _, err := m.Preferred(context.Background(), KindGPU, all[:6], nil, 2, time.Millisecond); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Preferred without GPU 6: err = %v", err)
	}
}
