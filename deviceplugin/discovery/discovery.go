package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/rota-sched/rota/pkg/topology"
)

// ErrNoDriver is returned by OpenNVML when libnvidia-ml or the NVIDIA kernel
// driver is not present on the machine.
var ErrNoDriver = errors.New("NVIDIA driver not found")

// EventKind classifies a health event.
type EventKind string

const (
	// KindXID is an NVML XID critical error; Event.XID holds the code.
	KindXID EventKind = "xid"
	// KindECC is an uncorrectable (double-bit) ECC error.
	KindECC EventKind = "ecc"
	// KindLost means the GPU stopped answering.
	KindLost EventKind = "lost"
)

// Event reports a fault of one GPU.
type Event struct {
	UUID string
	Kind EventKind
	XID  uint64 // set when Kind is KindXID
}

// Reason renders e for people and for the topology annotation: "XID 79".
func (e Event) Reason() string {
	switch e.Kind {
	case KindXID:
		return fmt.Sprintf("XID %d", e.XID)
	case KindECC:
		return "double-bit ECC error"
	case KindLost:
		return "GPU lost"
	}
	return string(e.Kind)
}

// Backend is one source of GPUs and health events.
type Backend interface {
	// GPUs returns the GPUs found when the backend was opened (never
	// empty), sorted by index, all marked healthy, with NUMA, NVLink peers
	// and islands filled in. The caller must not modify the result.
	GPUs() []topology.GPU
	// Watch calls emit for each fault until ctx is done. It returns nil when
	// ctx ends and an error when the event source fails for good.
	Watch(ctx context.Context, emit func(Event)) error
	// Probe re-checks one GPU: nil means it answers and shows no fault.
	Probe(uuid string) error
	// Close releases the backend.
	Close() error
}

// islands numbers the connected components of the peer graph, in order of
// their lowest GPU index, and writes them into gpus[i].Island. A GPU with no
// NVLink peers is an island of its own.
func islands(gpus []topology.GPU) {
	slot := make(map[int]int, len(gpus))
	for i, g := range gpus {
		slot[g.Index] = i
	}
	seen := make([]bool, len(gpus))
	next := 0
	for i := range gpus {
		if seen[i] {
			continue
		}
		stack := []int{i}
		seen[i] = true
		for len(stack) > 0 {
			cur := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			gpus[cur].Island = next
			for _, p := range gpus[cur].Peers {
				if s, ok := slot[p]; ok && !seen[s] {
					seen[s] = true
					stack = append(stack, s)
				}
			}
		}
		next++
	}
	for i := range gpus {
		slices.Sort(gpus[i].Peers)
	}
}
