package scheduling_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/test/fixture"
)

func TestFilter(t *testing.T) {
	objs := append(halfUsed(),
		gpuNode("empty", 8, 4).Obj(),
		fixture.GPUNode("sick").GPUs(1, 80*gib).Tier(leafLabel, "leaf-b").Unhealthy(0, "XID 79").Obj(),
		fixture.Node("cpu-only").Obj(),
	)
	e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
	tests := []struct {
		name             string
		givePod          *corev1.Pod
		giveNodes        []string
		wantPassed       []string
		wantFailed       map[string]string
		wantUnresolvable map[string]string
	}{
		{
			name: "share fits on the empty node, not on the used one", givePod: fixture.Pod(ns, "a").MemoryMiB(40 * gib).Obj(),
			giveNodes:  []string{"half", "empty"},
			wantPassed: []string{"empty"},
			wantFailed: map[string]string{"half": "GPU 0 has 18 GiB free, pod needs 40 GiB"},
		},
		{
			name: "share larger than any GPU is unresolvable", givePod: fixture.Pod(ns, "b").MemoryMiB(100 * gib).Obj(),
			giveNodes: []string{"empty"}, wantPassed: []string{},
			wantUnresolvable: map[string]string{"empty": "pod needs 100 GiB on one GPU; the largest GPU here has 80 GiB"},
		},
		{
			name: "whole GPUs: too few free", givePod: fixture.Pod(ns, "c").GPUs(2).Obj(),
			giveNodes: []string{"half", "empty"}, wantPassed: []string{"empty"},
			wantFailed: map[string]string{"half": "0 free GPUs, pod needs 2"},
		},
		{
			name: "node without topology and unhealthy GPU", givePod: fixture.Pod(ns, "d").MemoryMiB(10 * gib).Obj(),
			giveNodes: []string{"cpu-only", "sick", "missing"}, wantPassed: []string{},
			wantUnresolvable: map[string]string{
				"cpu-only": "node has not published its GPU topology yet",
				"missing":  "node has not published its GPU topology yet",
				"sick":     "GPU 0 unhealthy: XID 79",
			},
		},
		{
			name: "pod without Rota resources passes every node", givePod: fixture.Pod(ns, "e").Obj(),
			giveNodes: []string{"cpu-only", "half", "missing"}, wantPassed: []string{"cpu-only", "half", "missing"},
		},
		{
			name: "invalid request is refused on every node", givePod: fixture.Pod(ns, "f").MemoryMiB(10 * gib).GPUs(1).Obj(),
			giveNodes: []string{"empty"}, wantPassed: []string{},
			wantUnresolvable: map[string]string{"empty": "invalid GPU request: spec.containers[0].resources.limits: asks for both example.com/gpu and example.com/gpu-memory; ask for whole GPUs (example.com/gpu) or a memory share on one GPU (example.com/gpu-memory), not both"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := e.Filter(tc.givePod, tc.giveNodes...)
			if got.Error != "" {
				t.Fatalf("Error = %q", got.Error)
			}
			if got.NodeNames == nil {
				t.Fatalf("NodeNames = nil, want %v", tc.wantPassed)
			}
			if diff := cmp.Diff(tc.wantPassed, *got.NodeNames); diff != "" {
				t.Errorf("NodeNames (-want +got):\n%s", diff)
			}
			if len(tc.wantPassed) > 0 {
				// Some node passed: kube-scheduler ignores the reasons, so
				// they stay off the wire and go to the decision record.
				if len(got.FailedNodes)+len(got.FailedAndUnresolvableNodes) > 0 {
					t.Errorf("reasons on the wire although nodes passed: %v %v", got.FailedNodes, got.FailedAndUnresolvableNodes)
				}
				e.WantDecisionReasons(tc.givePod, tc.wantFailed, tc.wantUnresolvable)
			} else {
				if diff := cmp.Diff(tc.wantFailed, map[string]string(got.FailedNodes), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("FailedNodes (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantUnresolvable, map[string]string(got.FailedAndUnresolvableNodes), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("FailedAndUnresolvableNodes (-want +got):\n%s", diff)
				}
			}
			if got.Nodes != nil {
				t.Errorf("Nodes = %v, want nil (nodeCacheCapable)", got.Nodes)
			}
		})
	}
	e.CheckLedger()
}

// A refusal is explained in one GPUUnschedulable event, not once per
// filter call, and in the pod's decision record.
func TestFilterRefusalIsExplained(t *testing.T) {
	e := schedulingtest.New(t, schedulingtest.Options{}, halfUsed()...)
	big := fixture.Pod(ns, "big").MemoryMiB(40 * gib).Obj()
	e.Filter(big, "half")
	select {
	case ev := <-e.Recorder.Events:
		if !strings.Contains(ev, "GPUUnschedulable") || !strings.Contains(ev, "GPU 0 has 18 GiB free, pod needs 40 GiB") {
			t.Errorf("event = %q", ev)
		}
	default:
		t.Fatal("no refusal event")
	}
	// The same refusal again within a minute emits no second event.
	e.Filter(big, "half")
	select {
	case ev := <-e.Recorder.Events:
		t.Errorf("second event %q", ev)
	default:
	}
	ds := e.Ext.Decisions(ns, "big")
	if len(ds) != 2 || ds[0].Outcome != "nofit" || len(ds[0].Reasons) != 1 ||
		ds[0].Reasons[0].Code != "InsufficientMemory" || ds[0].Reasons[0].Nodes != 1 {
		t.Errorf("decisions = %+v; want two, the first a nofit with one InsufficientMemory reason on 1 node", ds)
	}
}

func TestFilterBestOnly(t *testing.T) {
	objs := append(halfUsed(), gpuNode("empty", 2, 1).Obj())
	e := schedulingtest.New(t, schedulingtest.Options{FilterBestOnly: true}, objs...)
	got := e.Filter(fixture.Pod(ns, "s").MemoryMiB(10*gib).Obj(), "empty", "half")
	if diff := cmp.Diff([]string{"half"}, passed(got)); diff != "" {
		t.Errorf("NodeNames (-want +got), want binpack's best:\n%s", diff)
	}
	if len(got.FailedNodes) > 0 {
		t.Errorf("FailedNodes = %v, want none on the wire (a node passed)", got.FailedNodes)
	}
	e.WantDecisionReasons(fixture.Pod(ns, "s").Obj(), map[string]string{"empty": "another node scores higher under the binpack policy ("}, nil)
}
