package placement

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/ledger"
)

// Fit says whether r fits node ni and, if so, which GPUs it gets:
//   - a memory share goes to the healthy, non-exclusive GPU of an allowed
//     model whose free memory is the smallest that still holds it (best fit,
//     lowest index on ties);
//   - k whole GPUs come from idle healthy GPUs, inside one NVLink island when
//     one has room (the island with the fewest idle GPUs that still holds k),
//     otherwise from as few islands as possible.
//
// When r does not fit, Fit returns the reason a user should read.
func Fit(r Request, ni *ledger.NodeInfo) (Choice, *Reason) {
	if ni == nil {
		return Choice{}, &Reason{Code: UnknownNode, GPU: -1}
	}
	n := ni.Node
	if r.CPUMilli > 0 && n.CPUMilli > 0 && ni.FreeCPUMilli() < r.CPUMilli {
		return Choice{}, &Reason{Code: InsufficientCPU, Node: n.Name, GPU: -1, NeedCPU: r.CPUMilli, FreeCPU: ni.FreeCPUMilli()}
	}
	if r.HostMemoryMiB > 0 && n.HostMemoryMiB > 0 && ni.FreeHostMemoryMiB() < r.HostMemoryMiB {
		return Choice{}, &Reason{Code: InsufficientHostMemory, Node: n.Name, GPU: -1, NeedMiB: r.HostMemoryMiB, FreeMiB: ni.FreeHostMemoryMiB()}
	}
	if r.GPUFree() {
		return Choice{Node: n.Name}, nil
	}
	if len(n.GPUs) == 0 {
		return Choice{}, &Reason{Code: NoGPUs, Node: n.Name, GPU: -1}
	}
	if len(r.Models) > 0 {
		ok := false
		for _, g := range n.GPUs {
			if r.modelOK(g.Model) {
				ok = true
				break
			}
		}
		if !ok {
			return Choice{}, &Reason{Code: ModelMismatch, Node: n.Name, GPU: -1, Models: r.Models,
				Health: strings.Join(n.Models(), ", ")}
		}
	}
	if r.Whole() {
		return fitWhole(r, ni)
	}
	return fitShare(r, ni)
}

func fitShare(r Request, ni *ledger.NodeInfo) (Choice, *Reason) {
	n := ni.Node
	need := r.NeedMiB(n.MemoryUnitMiB)
	best, bestFree := -1, MiB(0)
	var largestCap MiB
	// The most helpful reason when nothing fits: the healthy GPU with the most
	// free memory, or an unhealthy GPU that would have fit.
	freestSlot, freest := -1, MiB(-1)
	unhealthy := -1
	for s, g := range n.GPUs {
		if !r.modelOK(g.Model) {
			continue
		}
		largestCap = max(largestCap, g.MemoryMiB)
		if !g.Healthy {
			if unhealthy < 0 && g.MemoryMiB-ni.Use[s].UsedMiB >= need {
				unhealthy = s
			}
			continue
		}
		free := ni.FreeMiB(s)
		if free > freest {
			freestSlot, freest = s, free
		}
		if free >= need && (best < 0 || free < bestFree) {
			best, bestFree = s, free
		}
	}
	if best >= 0 {
		return Choice{Node: n.Name, Slots: []int{best}, MemoryMiB: need}, nil
	}
	if largestCap < need {
		return Choice{}, &Reason{Code: ShareTooLarge, Node: n.Name, GPU: -1, NeedMiB: need, FreeMiB: largestCap}
	}
	if unhealthy >= 0 && freest < need {
		g := n.GPUs[unhealthy]
		return Choice{}, &Reason{Code: Unhealthy, Node: n.Name, GPU: g.Index, Health: healthText(g.Reason),
			Resolvable: freestSlot >= 0 && anyHealthyHolds(ni, r, need)}
	}
	gpu := -1
	if freestSlot >= 0 {
		gpu = n.GPUs[freestSlot].Index
	}
	return Choice{}, &Reason{Code: InsufficientMemory, Node: n.Name, GPU: gpu, NeedMiB: need, FreeMiB: max(freest, 0),
		Resolvable: anyHealthyHolds(ni, r, need)}
}

func anyHealthyHolds(ni *ledger.NodeInfo, r Request, need MiB) bool {
	for _, g := range ni.Node.GPUs {
		if g.Healthy && r.modelOK(g.Model) && g.MemoryMiB >= need {
			return true
		}
	}
	return false
}

func healthText(reason string) string {
	if reason == "" {
		return "reported by the device plugin"
	}
	return reason
}

func fitWhole(r Request, ni *ledger.NodeInfo) (Choice, *Reason) {
	n := ni.Node
	// Idle GPUs grouped by island, in index order.
	type island struct {
		id    int
		slots []int
	}
	var islands []island
	idle, healthy := 0, 0
	unhealthy := -1
	for s, g := range n.GPUs {
		if !r.modelOK(g.Model) {
			continue
		}
		if !g.Healthy {
			if unhealthy < 0 {
				unhealthy = s
			}
			continue
		}
		healthy++
		if !ni.Idle(s) {
			continue
		}
		idle++
		i := slices.IndexFunc(islands, func(is island) bool { return is.id == g.Island })
		if i < 0 {
			islands = append(islands, island{id: g.Island})
			i = len(islands) - 1
		}
		islands[i].slots = append(islands[i].slots, s)
	}
	if idle < r.GPUs {
		if healthy < r.GPUs {
			if unhealthy >= 0 && healthy+countUnhealthy(ni, r) >= r.GPUs {
				g := n.GPUs[unhealthy]
				return Choice{}, &Reason{Code: Unhealthy, Node: n.Name, GPU: g.Index, Health: healthText(g.Reason),
					NeedGPUs: r.GPUs, FreeGPUs: idle}
			}
			return Choice{}, &Reason{Code: TooFewGPUs, Node: n.Name, GPU: -1, NeedGPUs: r.GPUs, FreeGPUs: healthy}
		}
		return Choice{}, &Reason{Code: InsufficientGPUs, Node: n.Name, GPU: -1, NeedGPUs: r.GPUs, FreeGPUs: idle,
			Resolvable: true}
	}
	// One island that holds all: the tightest one.
	best := -1
	for i, is := range islands {
		if len(is.slots) >= r.GPUs && (best < 0 || len(is.slots) < len(islands[best].slots)) {
			best = i
		}
	}
	if best >= 0 {
		return Choice{Node: n.Name, Slots: slices.Clone(islands[best].slots[:r.GPUs]), Whole: true}, nil
	}
	// Spill over the fewest islands: largest islands first.
	slices.SortStableFunc(islands, func(a, b island) int { return cmp.Compare(len(b.slots), len(a.slots)) })
	var slots []int
	for _, is := range islands {
		for _, s := range is.slots {
			if len(slots) < r.GPUs {
				slots = append(slots, s)
			}
		}
	}
	slices.Sort(slots)
	return Choice{Node: n.Name, Slots: slots, Whole: true}, nil
}

func countUnhealthy(ni *ledger.NodeInfo, r Request) int {
	c := 0
	for _, g := range ni.Node.GPUs {
		if !g.Healthy && r.modelOK(g.Model) {
			c++
		}
	}
	return c
}

// IslandsOf returns how many distinct NVLink islands a choice spans.
func IslandsOf(c Choice, ni *ledger.NodeInfo) int {
	var ids []int
	for _, s := range c.Slots {
		id := ni.Node.GPUs[s].Island
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return len(ids)
}
