package placement

import (
	"cmp"
	"slices"

	"github.com/rota-sched/rota/pkg/ledger"
)

// PoolUse is the GPU use of one node pool (topology.Node.Pool; "" for the
// nodes of none), the figures an administrator compares across pools
// placed by different policies.
type PoolUse struct {
	Pool      string
	Nodes     int
	GPUs      int
	Unhealthy int
	// Busy counts GPUs holding at least one allocation.
	Busy      int
	MemoryMiB MiB
	UsedMiB   MiB
	// FragmentedGPUs is w's fragmentation measure summed over the pool's
	// nodes (one yardstick for every pool, whatever policy places there).
	FragmentedGPUs float64
}

// Allocation is the share of the pool's GPU memory held (whole GPUs count
// in full); 0 for an empty pool.
func (u PoolUse) Allocation() float64 {
	if u.MemoryMiB == 0 {
		return 0
	}
	return float64(u.UsedMiB) / float64(u.MemoryMiB)
}

// PoolsUse sums snap's nodes by pool, pools in name order ("" first), with
// a zero row for each configured pool no node is in yet. It is nil when
// nothing is pooled (no pool configured, no node labelled with one): the
// cluster's own figures say it all then.
func PoolsUse(snap *ledger.Snapshot, w Workload, configured []string) []PoolUse {
	by := map[string]*PoolUse{}
	for _, name := range configured {
		by[name] = &PoolUse{Pool: name}
	}
	for _, name := range snap.Names() {
		ni := snap.Node(name)
		u := by[ni.Node.Pool]
		if u == nil {
			u = &PoolUse{Pool: ni.Node.Pool}
			by[ni.Node.Pool] = u
		}
		u.Nodes++
		for s, g := range ni.Node.GPUs {
			u.GPUs++
			u.MemoryMiB += g.MemoryMiB
			u.UsedMiB += ni.Use[s].UsedMiB
			if !g.Healthy {
				u.Unhealthy++
			}
			if ni.Use[s].Pods > 0 {
				u.Busy++
			}
		}
		u.FragmentedGPUs += w.NodeFragmentation(ni)
	}
	if _, shared := by[""]; len(by) == 0 || (len(by) == 1 && shared) {
		return nil
	}
	out := make([]PoolUse, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b PoolUse) int { return cmp.Compare(a.Pool, b.Pool) })
	return out
}
