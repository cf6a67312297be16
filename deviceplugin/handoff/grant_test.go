package handoff

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

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

func TestGrantEnv(t *testing.T) {
	tests := []struct {
		name string
		give Grant
		want map[string]string
	}{
		{
			name: "whole GPUs",
			give: Grant{Pod: "ns/a", Kind: KindGPU, UUIDs: []string{uuid(2), uuid(3)}},
			want: map[string]string{"NVIDIA_VISIBLE_DEVICES": uuid(2) + "," + uuid(3), "ROTA_ASSIGNED_POD": "ns/a",
				"ROTA_GPU_UUIDS": uuid(2) + "," + uuid(3)},
		},
		{
			name: "memory share",
			give: Grant{Pod: "ns/m", Kind: KindMemory, UUIDs: []string{uuid(4)}, MemoryMiB: 10240},
			want: map[string]string{"NVIDIA_VISIBLE_DEVICES": uuid(4), "ROTA_ASSIGNED_POD": "ns/m", "ROTA_GPU_UUIDS": uuid(4),
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M", "ROTA_GPU_MEMORY_MIB": "10240"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.give.Env()); diff != "" {
				t.Errorf("Env() (-want +got):\n%s", diff)
			}
		})
	}
}
