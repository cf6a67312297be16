package handoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

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
