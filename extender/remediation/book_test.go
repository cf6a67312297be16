package remediation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/remediation"
)

// TestBookkeepingForgetsGonePods: what the controller remembers of a pod
// (dry-run reports here) goes with the pod.
func TestBookkeepingForgetsGonePods(t *testing.T) {
	cfg := onConfig()
	cfg.Mode = remediation.DryRun
	f := newFixture(t, cfg, scenarioObjects()...)
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	reported := func(uid string) bool {
		f.ctl.mu.Lock()
		defer f.ctl.mu.Unlock()
		for k := range f.ctl.reported {
			if strings.HasPrefix(k, uid+"/") {
				return true
			}
		}
		return false
	}
	if !reported("uid-g-0") || !reported("uid-keep") {
		t.Fatalf("dry-run reports not recorded: %v", f.ctl.reported)
	}
	if err := f.client.CoreV1().Pods("ns").Delete(f.ctx, "g-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("pod informer delete", func() bool { _, ok := f.cache.Pod("ns", "g-0"); return !ok })
	f.ctl.Sync(f.ctx)
	if reported("uid-g-0") {
		t.Error("the deleted pod's report is still remembered")
	}
	if !reported("uid-keep") {
		t.Error("a live pod's report was forgotten")
	}
}
