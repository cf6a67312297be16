package room_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/test/fixture"
)

// RoomWithout: two 4-GPU nodes, each with 3 GPUs taken by one pod and 1 by
// another. A 2-GPU pod fits with a 1-GPU pod gone only if that leaves 2
// free on one node; the claim holds that node for it. A node the pod may
// not use does not count.
func TestRoomWithout(t *testing.T) {
	var objs []runtime.Object
	for _, n := range []string{"n0", "n1"} {
		objs = append(objs, fixture.GPUNode(n).GPUs(4, 80*1024).Label("zone", n).Obj())
	}
	w := newWorld(t, objs...)
	led := w.led
	e, err := room.New(room.Options{Ledger: led, Node: w.cache.Node, Request: w.request, Tiers: w.tiers})
	if err != nil {
		t.Fatal(err)
	}
	put := func(uid, node string, idx ...int) {
		a := ledger.Allocation{PodUID: uid, Pod: "ns/" + uid, Node: node, Whole: true}
		for _, i := range idx {
			a.GPUs = append(a.GPUs, ledger.Share{Index: i, MemoryMiB: 80 * 1024})
		}
		if err := led.Restore(a); err != nil {
			t.Fatal(err)
		}
	}
	put("big0", "n0", 0, 1, 2)
	put("small0", "n0", 3)
	put("big1", "n1", 0, 1, 2)
	put("small1", "n1", 3)
	want := fixture.Pod("ml", "want").UID("uid-want").GPUs(2).Obj()
	if cl, why := e.RoomWithout([]*corev1.Pod{want}, room.Scope{}, []string{"small0", "small1"}); len(cl) != 0 {
		t.Errorf("with a GPU free on each node: claims %+v (%s), want none", cl, why)
	}
	cl, why := e.RoomWithout([]*corev1.Pod{want}, room.Scope{}, []string{"big1"})
	if len(cl) != 1 || cl[0].Node != "n1" || cl[0].GPUs != 2 || cl[0].Job == "" {
		t.Fatalf("with big1 gone: claims %+v (%s), want n1 held for 2 GPUs", cl, why)
	}
	pinned := fixture.Pod("ml", "pinned").UID("uid-pinned").GPUs(2).NodeSelector("zone", "n0").Obj()
	if cl, _ := e.RoomWithout([]*corev1.Pod{pinned}, room.Scope{}, []string{"big1"}); len(cl) != 0 {
		t.Errorf("room only on a node the pod may not use: claims %+v", cl)
	}
	if _, ok := led.Get("big1"); !ok {
		t.Error("RoomWithout changed the ledger")
	}
}
