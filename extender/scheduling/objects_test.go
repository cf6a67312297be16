package scheduling_test

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/fixture"
)

const (
	gib = contract.MiB(1024)
	ns  = "default"
)

var (
	names     = schedulingtest.Names
	leafLabel = schedulingtest.LeafLabel
	passed    = schedulingtest.Passed
)

// gpuNode is a node of count 80 GiB GPUs in NVLink islands of island, on
// leaf-a.
func gpuNode(name string, count, island int) *fixture.NodeBuilder {
	return fixture.GPUNode(name).GPUs(count, 80*gib).NVLink(island).Tier(leafLabel, "leaf-a")
}

// halfUsed is node "half": 2 GPUs of 80 GiB, GPU 0 with 62 GiB assigned
// (pod p1), GPU 1 owned whole (pod p2).
func halfUsed() []runtime.Object {
	return []runtime.Object{gpuNode("half", 2, 1).Obj(),
		fixture.Pod(ns, "p1").MemoryMiB(62*gib).Running("half").Share("half", 0, 62*gib).Obj(),
		fixture.Pod(ns, "p2").GPUs(1).Running("half").Whole("half", 80*gib, 1).Obj()}
}
