package ui

import (
	"sync"
	"time"
)

// Sample is one fragmentation measurement of the whole cluster.
type Sample struct {
	Time time.Time `json:"time"`
	// FragmentedGPUs is the expected GPU capacity the workload cannot use
	// (FGD measure summed over nodes, as the rota_extender_fragmentation_gpus
	// metric), in GPUs.
	FragmentedGPUs float64 `json:"fragmentedGPUs"`
	// FreeGPUs is the free capacity in GPUs (free memory / GPU memory,
	// healthy GPUs only).
	FreeGPUs float64 `json:"freeGPUs"`
}

// ring keeps the latest samples, oldest dropped first. Safe for concurrent use.
type ring struct {
	mu   sync.Mutex
	buf  []Sample
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]Sample, max(n, 1))} }

func (r *ring) add(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// samples returns the kept samples, oldest first.
func (r *ring) samples() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]Sample(nil), r.buf[:r.next]...)
	}
	out := make([]Sample, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
