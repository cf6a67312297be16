package podreq

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// TestToAllocationIdle: the device plugin's idle-since annotation makes the
// allocation idle; without it (or empty) the pod is busy.
func TestToAllocationIdle(t *testing.T) {
	names := contract.Default
	as := contract.Assignment{Node: "n", Whole: true, GPUs: []contract.AssignedGPU{{Index: 0, UUID: "GPU-0", MemoryMiB: 1024}}}
	for _, tc := range []struct {
		ann  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{names.IdleSinceAnnotation: ""}, false},
		{map[string]string{names.IdleSinceAnnotation: "2026-01-01T00:00:00Z"}, true},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", Annotations: tc.ann}}
		if got := ToAllocation(pod, as, names).Idle; got != tc.want {
			t.Errorf("ToAllocation() with annotations %v: Idle = %v, want %v", tc.ann, got, tc.want)
		}
	}
}
