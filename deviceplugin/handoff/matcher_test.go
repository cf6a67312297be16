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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
)

const node = "n1"

var names = contract.Default

func uuid(i int) string { return fmt.Sprintf("GPU-%04d", i) }

type podOpt func(*corev1.Pod)

func pod(name string, seq int, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Unix(int64(seq), 0)), Annotations: map[string]string{}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func container(res string, n int64, init bool) podOpt {
	return func(p *corev1.Pod) {
		c := corev1.Container{Name: fmt.Sprintf("c%d", len(p.Spec.Containers)+len(p.Spec.InitContainers)),
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}}
		if init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
	}
}

func assigned(whole bool, mib contract.MiB, idx ...int) podOpt {
	return func(p *corev1.Pod) {
		a := contract.Assignment{Version: contract.Version, Node: node, Whole: whole}
		for _, i := range idx {
			a.GPUs = append(a.GPUs, contract.AssignedGPU{Index: i, UUID: uuid(i), MemoryMiB: mib})
		}
		b, err := a.Marshal()
		if err != nil {
			panic(err)
		}
		p.Annotations[names.AssignmentAnnotation] = string(b)
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func mem(gpu int, units ...int) []string {
	var out []string
	for _, u := range units {
		out = append(out, MemoryDeviceID(uuid(gpu), u))
	}
	return out
}

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
			name:     "no assignment",
			givePods: []*corev1.Pod{pod("x", 1, container(names.GPU, 1, false))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantErr: ErrNoMatch, wantMsg: []string{"ns/x", "has no example.com/gpu-assignment annotation"},
		},
		{
			name:     "devices outside the assignment",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0))},
			giveKind: KindGPU, giveIDs: []string{uuid(5)},
			wantErr: ErrNoMatch, wantMsg: []string{"does not hold these devices"},
		},
		{
			name:     "count differs",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 2, false), assigned(true, 81920, 0, 1))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantErr: ErrNoMatch, wantMsg: []string{"container c0 asks for 2, not 1"},
		},
		{
			name:     "running pods are never matched",
			givePods: []*corev1.Pod{pod("a", 1, phase(corev1.PodRunning), container(names.GPU, 1, false), assigned(true, 81920, 0))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantErr: ErrNoMatch, wantMsg: []string{"no pending pod on node n1 asks for example.com/gpu"},
		},
		{
			name:     "memory share pod asking for whole GPUs",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 1, false), assigned(false, 1024, 0))},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantErr: ErrNoMatch, wantMsg: []string{"memory share, not whole GPUs"},
		},
		{
			name:     "assignment smaller than the request",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPUMemory, 4, false), assigned(false, 2048, 0))},
			giveKind: KindMemory, giveIDs: mem(0, 0, 1, 2, 3),
			wantErr: ErrNoMatch, wantMsg: []string{"asks for 4 units of 1 GiB but its assignment gives 2 GiB"},
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
		{
			name: "assignment for another node",
			givePods: []*corev1.Pod{pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0), func(p *corev1.Pod) {
				k := names.AssignmentAnnotation
				p.Annotations[k] = strings.Replace(p.Annotations[k], `"node":"n1"`, `"node":"n2"`, 1)
			})},
			giveKind: KindGPU, giveIDs: []string{uuid(0)},
			wantErr: ErrNoMatch, wantMsg: []string{"ns/a: assignment is for node n2"},
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

func TestReconcileMarksAllocatedAndFindsMismatches(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0)))
	m.Upsert(pod("b", 2, container(names.GPU, 1, false), assigned(true, 81920, 1)))
	mm := m.Reconcile([]PodDevices{
		{Namespace: "ns", Name: "a", Containers: map[string]map[string][]string{"c0": {names.GPU: {uuid(0)}}}},
		{Namespace: "ns", Name: "b", Containers: map[string]map[string][]string{"c0": {names.GPU: {uuid(7)}}}},
	})
	if len(mm) != 1 || mm[0].Pod != "ns/b" {
		t.Fatalf("mismatches = %+v", mm)
	}
	if m.Allocated("uid-a", KindGPU) != 1 || m.Allocated("uid-b", KindGPU) != 1 {
		t.Fatal("reconcile did not mark the pods allocated")
	}
	if _, err := m.Allocate(context.Background(), KindGPU, []string{uuid(0)}, time.Millisecond); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("Allocate after reconcile: %v", err)
	}
}

func TestMemoryDeviceID(t *testing.T) {
	for _, tc := range []struct {
		give     string
		wantUUID string
		wantN    int
		wantOK   bool
	}{
		{"GPU-a::0", "GPU-a", 0, true},
		{"GPU-a::140", "GPU-a", 140, true},
		{"GPU-a", "", 0, false},
		{"GPU-a::", "", 0, false},
		{"::3", "", 0, false},
		{"GPU-a::-1", "", 0, false},
		{"GPU-a::01", "", 0, false},
		{"GPU-a::1::2", "", 0, false},
	} {
		u, n, ok := ParseMemoryDeviceID(tc.give)
		if u != tc.wantUUID || n != tc.wantN || ok != tc.wantOK {
			t.Errorf("ParseMemoryDeviceID(%q) = %q %d %v", tc.give, u, n, ok)
		}
	}
}

func TestUndo(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("two", 1, container(names.GPU, 1, false), container(names.GPU, 1, false), assigned(true, 81920, 0, 1)))
	ctx := context.Background()
	g0, err := m.Allocate(ctx, KindGPU, []string{uuid(0)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated("uid-two", KindGPU); got != 1 {
		t.Fatalf("Allocated = %d, want 1", got)
	}
	m.Undo(g0)
	if got := m.Allocated("uid-two", KindGPU); got != 0 {
		t.Fatalf("Allocated after Undo = %d, want 0", got)
	}
	m.Undo(g0) // nothing left to undo: no underflow
	if got := m.Allocated("uid-two", KindGPU); got != 0 {
		t.Fatalf("Allocated after a second Undo = %d, want 0", got)
	}
	// The first container is offered again.
	if g, err := m.Allocate(ctx, KindGPU, []string{uuid(0)}, 0); err != nil || g.Container != "c0" {
		t.Fatalf("Allocate after Undo = %+v, %v; want container c0", g, err)
	}
}
