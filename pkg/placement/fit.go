package placement

import (
	"cmp"
	"slices"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
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
	if ni.Claim != nil {
		return fitClaimed(r, ni)
	}
	return fit(r, ni)
}

// fitClaimed fits r on a node that a reservation holds room on: in the view
// r sees (ledger.NodeInfo.For); when only the held room would fit, the
// reason names the reservation.
func fitClaimed(r Request, ni *ledger.NodeInfo) (Choice, *Reason) {
	v := ni.For(r.Job, r.Ends)
	c, reason := fit(r, v)
	if reason == nil || v == ni {
		return c, reason
	}
	if _, r2 := fit(r, ni); r2 != nil {
		return c, reason
	}
	return Choice{}, &Reason{Code: Held, Node: ni.Name(), GPU: -1, Claim: ni.Claim, Ends: r.Ends}
}

func fit(r Request, ni *ledger.NodeInfo) (Choice, *Reason) {
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
	if r.Pool != n.Pool {
		return Choice{}, &Reason{Code: OtherPool, Node: n.Name, GPU: -1, Pool: n.Pool, WantPool: r.Pool}
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
	if n.Closed != "" {
		return Choice{}, &Reason{Code: Closed, Node: n.Name, GPU: -1, Health: n.Closed}
	}
	if r.Whole() {
		return fitWhole(r, ni)
	}
	if n.NoShares != "" {
		return Choice{}, &Reason{Code: NoShares, Node: n.Name, GPU: -1, Health: n.NoShares}
	}
	if m := n.MPS; m != nil && !m.Available && !r.ShareWithoutMPS {
		return Choice{}, &Reason{Code: NoMPS, Node: n.Name, GPU: -1, Health: m.Reason}
	}
	return fitShare(r, ni)
}

// slotIndex[i] == i. A share's one-slot Choice.Slots, and a whole-GPU
// choice of consecutive slots, is a window into it, so that Fit allocates
// nothing for them; Slots are read-only to callers.
var slotIndex = func() (a [contract.MaxGPUsPerNode]int) {
	for i := range a {
		a[i] = i
	}
	return a
}()

func oneSlot(s int) []int {
	if s < len(slotIndex) {
		return slotIndex[s : s+1 : s+1]
	}
	return []int{s}
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
	for s := range n.GPUs {
		g := &n.GPUs[s]
		if !r.modelOK(g.Model) {
			continue
		}
		largestCap = max(largestCap, g.MemoryMiB)
		u := &ni.Use[s]
		if !g.Healthy {
			if unhealthy < 0 && g.MemoryMiB-u.UsedMiB >= need {
				unhealthy = s
			}
			continue
		}
		free := MiB(0) // as NodeInfo.FreeMiB, without copying the GPU
		if !u.Exclusive {
			free = max(g.MemoryMiB-u.UsedMiB, 0)
		}
		if free > freest {
			freestSlot, freest = s, free
		}
		if free >= need && (best < 0 || free < bestFree) {
			best, bestFree = s, free
		}
	}
	if best >= 0 {
		return Choice{Node: n.Name, Slots: oneSlot(best), MemoryMiB: need}, nil
	}
	if largestCap < need {
		return Choice{}, &Reason{Code: ShareTooLarge, Node: n.Name, GPU: -1, NeedMiB: need, FreeMiB: largestCap}
	}
	if unhealthy >= 0 && freest < need {
		g := &n.GPUs[unhealthy]
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
	for s := range ni.Node.GPUs {
		g := &ni.Node.GPUs[s]
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

// islandIdle counts the idle GPUs of one NVLink island.
type islandIdle struct{ id, idle int }

func fitWhole(r Request, ni *ledger.NodeInfo) (Choice, *Reason) {
	n := ni.Node
	// Count idle GPUs per island (islands in order of their first idle GPU),
	// on the stack for the usual node of up to 16 islands.
	var buf [16]islandIdle
	islands := buf[:0]
	idle, healthy := 0, 0
	unhealthy := -1
	for s := range n.GPUs {
		g := &n.GPUs[s]
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
		i := 0
		for i < len(islands) && islands[i].id != g.Island {
			i++
		}
		if i == len(islands) {
			islands = append(islands, islandIdle{id: g.Island})
		}
		islands[i].idle++
	}
	if idle < r.GPUs {
		if healthy < r.GPUs {
			if unhealthy >= 0 && healthy+countUnhealthy(ni, r) >= r.GPUs {
				g := &n.GPUs[unhealthy]
				return Choice{}, &Reason{Code: Unhealthy, Node: n.Name, GPU: g.Index, Health: healthText(g.Reason),
					NeedGPUs: r.GPUs, FreeGPUs: idle}
			}
			return Choice{}, &Reason{Code: TooFewGPUs, Node: n.Name, GPU: -1, NeedGPUs: r.GPUs, FreeGPUs: healthy}
		}
		return Choice{}, &Reason{Code: InsufficientGPUs, Node: n.Name, GPU: -1, NeedGPUs: r.GPUs, FreeGPUs: idle,
			Resolvable: true}
	}
	// One island that holds all: the tightest one (the first on ties).
	best := -1
	for i, is := range islands {
		if is.idle >= r.GPUs && (best < 0 || is.idle < islands[best].idle) {
			best = i
		}
	}
	if best >= 0 {
		return Choice{Node: n.Name, Slots: idleRun(r, ni, islands[best].id, r.GPUs), Whole: true}, nil
	}
	slots := make([]int, 0, r.GPUs)
	// Spill over the fewest islands: largest islands first (stable, so the
	// first of equal islands), then the slots in index order.
	slices.SortStableFunc(islands, func(a, b islandIdle) int { return cmp.Compare(b.idle, a.idle) })
	for _, is := range islands {
		if len(slots) == r.GPUs {
			break
		}
		slots = takeIdle(r, ni, is.id, r.GPUs-len(slots), slots)
	}
	slices.Sort(slots)
	return Choice{Node: n.Name, Slots: slots, Whole: true}, nil
}

// takeIdle appends up to k idle, healthy slots of island id (allowed models,
// index order) to slots.
// idleRun returns the first k idle slots of island id like takeIdle, but
// as a read-only window into slotIndex when they are consecutive (the usual
// case), so that Fit allocates nothing for them.
func idleRun(r Request, ni *ledger.NodeInfo, id, k int) []int {
	first, last, n := -1, -1, 0
	for s := range ni.Node.GPUs {
		if n == k {
			break
		}
		g := &ni.Node.GPUs[s]
		if g.Island == id && g.Healthy && r.modelOK(g.Model) && ni.Idle(s) {
			if first < 0 {
				first = s
			}
			last = s
			n++
		}
	}
	if n == k && last-first == k-1 && last < len(slotIndex) {
		return slotIndex[first : last+1 : last+1]
	}
	return takeIdle(r, ni, id, k, make([]int, 0, k))
}

func takeIdle(r Request, ni *ledger.NodeInfo, id, k int, slots []int) []int {
	for s := range ni.Node.GPUs {
		if k == 0 {
			break
		}
		g := &ni.Node.GPUs[s]
		if g.Island == id && g.Healthy && r.modelOK(g.Model) && ni.Idle(s) {
			slots = append(slots, s)
			k--
		}
	}
	return slots
}

func countUnhealthy(ni *ledger.NodeInfo, r Request) int {
	c := 0
	for s := range ni.Node.GPUs {
		if g := &ni.Node.GPUs[s]; !g.Healthy && r.modelOK(g.Model) {
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
