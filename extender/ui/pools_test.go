package ui_test

import (
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/extender/ui"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/topology"
)

// The status page compares node pools side by side: the configured ones
// (an empty one too), a labelled pool no one owns, and the nodes of none,
// each with its policy, use and its owners' queued pods; without any pool
// it shows none.
func TestStatePools(t *testing.T) {
	led := ledger.New()
	for _, n := range []struct{ name, pool string }{{"n1", ""}, {"c1", "canary"}, {"x1", "typo"}} {
		node := topology.FromSpec(topology.Spec{Name: n.name, Model: "H100", Count: 2, MemoryMiB: 80 * 1024})
		node.Pool = n.pool
		led.UpsertNode(node)
	}
	if err := led.Restore(ledger.Allocation{PodUID: "u", Pod: "vision/p", Node: "c1", Whole: true,
		GPUs: []ledger.Share{{Index: 0, MemoryMiB: 80 * 1024}}}); err != nil {
		t.Fatal(err)
	}
	cfg, err := quota.Parse([]byte(`{"teams":{"vision":{},"speech":{},"nlp":{}},` +
		`"nodePools":{"canary":{"owner":"vision","policy":"spread"},"empty":{"owner":"speech"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	def, _ := placement.NewPolicy(placement.Binpack, nil)
	np := nodepool.New(klog.Background(), func() (*quota.Config, bool) { return &cfg, true }, def, nil)
	view := contract.QueueView{Leader: true, Pods: []contract.QueuePosition{
		{Pod: "vision/a", Team: "vision", Waiting: 30}, {Pod: "vision/b", Team: "vision", Waiting: 90},
		{Pod: "nlp/c", Team: "nlp", Waiting: 5}}}
	u := ui.New(ui.Options{Names: names, Snapshot: led.Snapshot, Pools: np,
		Queue: func() contract.QueueView { return view }, Now: func() time.Time { return t0 }})
	got := u.State().Pools
	want := []ui.Pool{
		{Pool: "", Policy: "binpack", Nodes: 1, GPUs: 2, Queued: 1, LongestWaitSeconds: 5},
		{Pool: "canary", Owner: "vision", Policy: "spread", Nodes: 1, GPUs: 2, Busy: 1, Allocation: 0.5, Queued: 2, LongestWaitSeconds: 90},
		{Pool: "empty", Owner: "speech", Policy: "binpack"},
		{Pool: "typo", Policy: "none: not configured, takes no GPU pods", Nodes: 1, GPUs: 2},
	}
	for i := range got {
		got[i].FragmentedGPUs = 0 // the measure's own tests cover it
	}
	if d := diff(want, got); d != "" {
		t.Errorf("pools mismatch:\n%s", d)
	}

	flat := ledger.New()
	flat.UpsertNode(topology.FromSpec(topology.Spec{Name: "n1", Model: "H100", Count: 2, MemoryMiB: 80 * 1024}))
	if p := ui.New(ui.Options{Names: names, Snapshot: flat.Snapshot, Now: func() time.Time { return t0 }}).State().Pools; p != nil {
		t.Errorf("no pools: %+v", p)
	}
}
