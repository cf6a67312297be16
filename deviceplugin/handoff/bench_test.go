package handoff

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkAllocate measures one Allocate match on a node with 110 pods (the
// kubelet's default pod limit): 100 already running, 10 pending memory
// shares. Each iteration re-arms the pod it allocates (outside Allocate).
func BenchmarkAllocate(b *testing.B) {
	m := NewMatcher(node, names, 1024)
	for i := range 100 {
		m.Upsert(pod(fmt.Sprintf("run%d", i), i, phase(corev1.PodRunning), container(names.GPUMemory, 4, false), assigned(false, 4096, i%8)))
	}
	var pending []*corev1.Pod
	for i := range 10 {
		p := pod(fmt.Sprintf("pend%d", i), 100+i, container(names.GPUMemory, int64(i+1), false), assigned(false, 16384, i%8))
		pending = append(pending, p)
		m.Upsert(p)
	}
	target := pending[7]
	ids := mem(7, 0, 1, 2, 3, 4, 5, 6, 7)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Allocate(ctx, KindMemory, ids, time.Second); err != nil {
			b.Fatal(err)
		}
		m.mu.Lock()
		m.pods[string(target.UID)].done[KindMemory] = 0
		m.mu.Unlock()
	}
}
