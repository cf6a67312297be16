package handoff

import (
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
)

// GPUPod is a live pod's assignment on one GPU.
type GPUPod struct {
	UID string
	Pod string // namespace/name
	// Whole is set when the pod owns the GPU whole.
	Whole bool
	// MemoryMiB is the pod's assigned memory on the GPU (the GPU's total for
	// whole GPUs).
	MemoryMiB contract.MiB
}

// GPUPods returns, by GPU UUID, the live pods (phase neither Succeeded nor
// Failed, still known to the informer) whose assignment names the GPU,
// sorted by pod UID.
func (m *Matcher) GPUPods() map[string][]GPUPod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]GPUPod{}
	for _, e := range m.pods {
		if !e.live || e.assign == nil {
			continue
		}
		for _, g := range e.assign.GPUs {
			out[g.UUID] = append(out[g.UUID], GPUPod{UID: e.uid, Pod: e.key, Whole: e.assign.Whole, MemoryMiB: g.MemoryMiB})
		}
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b GPUPod) int { return strings.Compare(a.UID, b.UID) })
	}
	return out
}

// LivePods returns the live pods bound to the node (phase neither Succeeded
// nor Failed), by UID, as namespace/name.
func (m *Matcher) LivePods() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for _, e := range m.pods {
		if e.live {
			out[e.uid] = e.key
		}
	}
	return out
}
