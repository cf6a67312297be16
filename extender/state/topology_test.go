package state

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// TestGPUHealthFollowsTheAnnotation: the node handler's parse is what
// GPUHealth returns, through a GPU turning unhealthy, an invalid or missing
// annotation and the node's deletion.
func TestGPUHealthFollowsTheAnnotation(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeObj, n := gpuNode()
	c, _, _, _ := startCache(ctx, t, nodeObj)
	healthy := []GPUHealth{{UUID: n.GPUs[0].UUID, Healthy: true}, {UUID: n.GPUs[1].UUID, Healthy: true}}
	check := func(what string, want []GPUHealth, wantOK bool) {
		t.Helper()
		got, ok := c.GPUHealth("n")
		if diff := cmp.Diff(want, got); diff != "" || ok != wantOK {
			t.Errorf("%s: GPUHealth() = _, %v (want %v); (-want +got):\n%s", what, ok, wantOK, diff)
		}
	}
	check("initial list", healthy, true)

	doc := n.Document()
	doc.GPUs[1].Health, doc.GPUs[1].Reason = contract.Unhealthy, "XID 79"
	data, err := doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	sick := nodeObj.DeepCopy()
	sick.Annotations[names.TopologyAnnotation] = string(data)
	c.nodeChanged(sick)
	check("GPU 1 unhealthy", []GPUHealth{healthy[0], {UUID: n.GPUs[1].UUID, Reason: "XID 79"}}, true)

	broken := nodeObj.DeepCopy()
	broken.Annotations[names.TopologyAnnotation] = "{"
	c.nodeChanged(broken)
	check("invalid annotation", nil, false)

	c.nodeChanged(nodeObj)
	check("valid again", healthy, true)
	bare := nodeObj.DeepCopy()
	delete(bare.Annotations, names.TopologyAnnotation)
	c.nodeChanged(bare)
	check("annotation removed", nil, false)

	c.nodeChanged(nodeObj)
	c.nodeDeleted(nodeObj)
	check("node deleted", nil, false)
}

// TestNodeTransformKeepsWhatRemediationReads: the informer's node also
// carries the quarantine annotation and the Ready condition's status.
func TestNodeTransformKeepsWhatRemediationReads(t *testing.T) {
	full := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "5", Annotations: map[string]string{
			names.QuarantineAnnotation: "node", names.TopologyAnnotation: "{}", "other": "x"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown", Message: "m",
				LastHeartbeatTime: metav1.Now()},
		}},
	}
	obj, err := nodeTransform(names, topology.DefaultLabels(names))(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Node)
	want := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: "5", Annotations: map[string]string{
			names.QuarantineAnnotation: "node", names.TopologyAnnotation: "{}"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodeTransform() (-want +got):\n%s", diff)
	}
	if obj, err := nodeTransform(names, topology.DefaultLabels(names))("not a node"); err != nil || obj != "not a node" {
		t.Errorf("nodeTransform(string) = %v, %v; want it unchanged", obj, err)
	}
}
