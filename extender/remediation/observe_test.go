package remediation

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/remediation"
)

func TestNodeNotReadyDeletesItsPodsAndRecovers(t *testing.T) {
	f := newFixture(t, onConfig(), nodeObj("n1"), nodeObj("n2"), podOn("a", "n1", 0, nil), podOn("b", "n1", 3, nil), podOn("c", "n2", 0, nil))
	down := nodeObj("n1")
	down.Status.Conditions[0].Status = corev1.ConditionUnknown
	f.setNode(down)
	f.ctl.Sync(f.ctx)
	pods := f.pods()
	if len(pods) != 1 || pods["c"] == nil {
		t.Errorf("pods left %v, want only c", keys(pods))
	}
	snap := f.led.Snapshot()
	for _, g := range snap.Node("n1").Node.GPUs {
		if g.Healthy {
			t.Errorf("GPU %d of a NotReady node is placeable", g.Index)
		}
	}
	f.setNode(nodeObj("n1"))
	f.advance(61 * time.Second)
	f.ctl.Sync(f.ctx) // Ready seen: quiet period starts
	f.advance(61 * time.Second)
	f.ctl.Sync(f.ctx)
	if !f.led.Snapshot().Node("n1").Node.GPUs[0].Healthy {
		t.Errorf("node not placeable after recovery")
	}
}

// TestHeartbeatLost: a Ready node whose Lease was last renewed longer ago
// than the heartbeat timeout has a fault; its pods go, a node with a fresh
// Lease keeps its own.
func TestHeartbeatLost(t *testing.T) {
	lease := func(node string, renewed time.Time) *coordinationv1.Lease {
		at := metav1.NewMicroTime(renewed)
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &at}}
	}
	f := newFixture(t, onConfig(), nodeObj("n1"), nodeObj("n2"), podOn("a", "n1", 0, nil), podOn("c", "n2", 0, nil),
		lease("n1", t0.Add(-2*time.Minute)), lease("n2", t0))
	f.ctl.Sync(f.ctx)
	if pods := f.pods(); len(pods) != 1 || pods["c"] == nil {
		t.Errorf("pods left %v, want only c", keys(pods))
	}
	f.ctl.mu.Lock()
	got, open := f.ctl.faults[remediation.NodeTarget("n1")]
	_, other := f.ctl.faults[remediation.NodeTarget("n2")]
	f.ctl.mu.Unlock()
	if !open || got.Cause != remediation.NodeHeartbeatLost || got.Detail != "lease renewed 2m0s ago" {
		t.Errorf("n1 fault = %+v (open %v), want %s, lease renewed 2m0s ago", got, open, remediation.NodeHeartbeatLost)
	}
	if other {
		t.Error("n2, whose Lease is fresh, has a fault")
	}
}
