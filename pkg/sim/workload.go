package sim

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/placement"
)

// WorkloadOptions says how WorkloadOf summarises a pod list.
type WorkloadOptions struct {
	// HostMemory keeps the host-memory request in each shape (FGD does not).
	HostMemory bool
	// Popularity keeps only the most common shapes that together cover this
	// share of pods (0 or >= 1: all shapes), like FGD's "typical pods".
	Popularity float64
}

// WorkloadOf is the pod list's shape distribution: one Shape per distinct
// (CPU, GPUs, share, models[, host memory]) with its share of pods, most
// common first. It is the "target workload" FGD's fragmentation measure is
// taken against, and the workload the fragmentation-aware policies keep room
// for.
func WorkloadOf(pods []Pod, o WorkloadOptions) placement.Workload {
	type key struct {
		cpu, mem    int64
		gpus, milli int
		models      string
	}
	count := map[key]int{}
	var order []key
	for _, p := range pods {
		k := key{cpu: p.CPUMilli, gpus: p.GPUs, milli: p.GPUMilli, models: strings.Join(p.Models, "|")}
		if o.HostMemory {
			k.mem = int64(p.HostMemoryMiB)
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	slices.SortStableFunc(order, func(a, b key) int { return cmp.Compare(count[b], count[a]) })
	keep := len(order)
	if o.Popularity > 0 && o.Popularity < 1 {
		cum := 0
		for i, k := range order {
			cum += count[k]
			if float64(cum) >= o.Popularity*float64(len(pods)) {
				keep = i + 1
				break
			}
		}
	}
	total := 0
	for _, k := range order[:keep] {
		total += count[k]
	}
	w := make(placement.Workload, 0, keep)
	for _, k := range order[:keep] {
		s := placement.Shape{CPUMilli: k.cpu, HostMemoryMiB: MiB(k.mem), Weight: float64(count[k]) / float64(total)}
		switch {
		case k.gpus == 0:
			if s.CPUMilli == 0 && s.HostMemoryMiB == 0 {
				continue // asks for nothing; it cannot be blocked
			}
		case k.milli >= MilliPerGPU:
			s.GPUs = k.gpus
		default:
			s.Milli = k.milli
		}
		if k.models != "" {
			s.Models = strings.Split(k.models, "|")
		}
		w = append(w, s)
	}
	return w
}
