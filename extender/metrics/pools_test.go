package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/topology"
)

// Each node pool's use is exported beside the others', a configured pool
// without nodes as zeros; without pools nothing per pool is exported.
func TestPoolMetrics(t *testing.T) {
	led := ledger.New()
	for _, n := range []struct{ name, pool string }{{"n1", ""}, {"c1", "canary"}, {"c2", "canary"}} {
		node := topology.FromSpec(topology.Spec{Name: n.name, Model: "H100", Count: 2, MemoryMiB: 80 * 1024})
		node.Pool = n.pool
		led.UpsertNode(node)
	}
	if err := led.Restore(ledger.Allocation{PodUID: "u", Pod: "ns/p", Node: "c1", Whole: true,
		GPUs: []ledger.Share{{Index: 0, MemoryMiB: 80 * 1024}}}); err != nil {
		t.Fatal(err)
	}
	var pools []nodepool.Pool
	m := New(Source{Snapshot: led.Snapshot, Pools: func() []nodepool.Pool { return pools }})
	names := []string{"rota_extender_node_pool_gpus", "rota_extender_node_pool_gpus_in_use", "rota_extender_node_pool_info"}
	pools = []nodepool.Pool{{Name: "canary", Owner: "vision", Policy: "spread"}, {Name: "empty", Owner: "speech", Policy: "binpack"}}
	want := `
# HELP rota_extender_node_pool_gpus GPUs in the node pool.
# TYPE rota_extender_node_pool_gpus gauge
rota_extender_node_pool_gpus{pool=""} 2
rota_extender_node_pool_gpus{pool="canary"} 4
rota_extender_node_pool_gpus{pool="empty"} 0
# HELP rota_extender_node_pool_gpus_in_use GPUs of the node pool holding at least one allocation.
# TYPE rota_extender_node_pool_gpus_in_use gauge
rota_extender_node_pool_gpus_in_use{pool=""} 0
rota_extender_node_pool_gpus_in_use{pool="canary"} 1
rota_extender_node_pool_gpus_in_use{pool="empty"} 0
# HELP rota_extender_node_pool_info A configured node pool: its owner (team or group) and the placement policy on its nodes (1).
# TYPE rota_extender_node_pool_info gauge
rota_extender_node_pool_info{owner="speech",policy="binpack",pool="empty"} 1
rota_extender_node_pool_info{owner="vision",policy="spread",pool="canary"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	flat := ledger.New()
	flat.UpsertNode(topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 2, MemoryMiB: 80 * 1024}))
	m2 := New(Source{Snapshot: flat.Snapshot})
	if n, err := testutil.GatherAndCount(m2.Registry, names...); err != nil || n != 0 {
		t.Errorf("without pools: %d per-pool series, %v", n, err)
	}
}
