package remediation

import (
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/remediation"
)

func TestGPUFaultDeletesWholeGangAndMarksMarkOnly(t *testing.T) {
	f := newFixture(t, onConfig(), scenarioObjects()...)
	f.ctl.Sync(f.ctx)
	if w := f.writes(); len(w) != 0 {
		t.Fatalf("a healthy cluster got writes: %v", w)
	}
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)

	pods := f.pods()
	var names []string
	for n := range pods {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"keep", "other"}; !slices.Equal(names, want) {
		t.Errorf("pods left = %v, want %v (the whole gang deleted)", names, want)
	}
	if !hasCondition(pods["keep"]) {
		t.Errorf("mark-only pod has no %s condition: %+v", contract.Default.GPUFailureCondition, pods["keep"].Status.Conditions)
	}
	if hasCondition(pods["other"]) {
		t.Errorf("pod on a healthy GPU was marked")
	}
	ev := strings.Join(f.events(), "\n")
	for _, want := range []string{"Warning GPUFailure GPU " + topo("n1").GPUs[0].UUID + " on node n1 is unhealthy (XID 79)",
		"gang member ns/g-0 was running on it", "grace 30s"} {
		if !strings.Contains(ev, want) {
			t.Errorf("events lack %q:\n%s", want, ev)
		}
	}
	// A second pass does nothing more.
	before := len(f.writes())
	f.ctl.Sync(f.ctx)
	if after := f.writes(); len(after) != before {
		t.Errorf("a second pass wrote again: %v", after[before:])
	}
}

func TestCheckpointGraceBecomesDeletionGrace(t *testing.T) {
	p := podOn("ckpt", "n1", 0, nil)
	p.Annotations[names.CheckpointGraceAnnotation] = "90s"
	p.Annotations[names.CheckpointSignalAnnotation] = "SIGUSR1"
	f := newFixture(t, onConfig(), nodeObj("n1"), p)
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.evicted) != 1 || f.evicted[0].options.GracePeriodSeconds == nil || *f.evicted[0].options.GracePeriodSeconds != 90 {
		t.Errorf("evictions %+v, want one with grace 90 s (from %s)", f.evicted, names.CheckpointGraceAnnotation)
	}
}

// A PodDisruptionBudget that allows no disruption (the API server's 429)
// holds the eviction back: the pod stays, the refusal is reported on it,
// and the next pass tries again.
func TestDisruptionBudgetHoldsTheEviction(t *testing.T) {
	f := newFixture(t, onConfig(), nodeObj("n1"), podOn("guarded", "n1", 0, nil))
	refuse := true
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" && refuse {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		return false, nil, nil
	})
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	if _, err := f.client.CoreV1().Pods("ns").Get(f.ctx, "guarded", metav1.GetOptions{}); err != nil {
		t.Fatalf("the pod is gone although its budget refused: %v", err)
	}
	if evs := strings.Join(f.events(), "\n"); !strings.Contains(evs, ReasonBlocked) {
		t.Errorf("no %s event says why the pod stays", ReasonBlocked)
	}
	refuse = false
	f.ctl.Sync(f.ctx)
	if _, err := f.client.CoreV1().Pods("ns").Get(f.ctx, "guarded", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("once the budget allows it the pod is still there: %v", err)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	cfg := onConfig()
	cfg.Mode = remediation.DryRun
	cfg.QuarantineThreshold = 1
	f := newFixture(t, cfg, scenarioObjects()...)
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	f.ctl.Sync(f.ctx)
	if w := f.writes(); len(w) != 1 || w[0] != "update nodes" { // the test's own update
		t.Errorf("dry-run wrote %v", w)
	}
	if got := len(f.pods()); got != 6 {
		t.Errorf("dry-run left %d pods, want 6", got)
	}
	ev := f.events()
	dry := 0
	for _, e := range ev {
		if strings.Contains(e, ReasonDryRun) {
			dry++
		}
	}
	// 4 gang members + keep (would delete / mark) + the GPU's would-be quarantine, each once.
	if dry != 6 {
		t.Errorf("dry-run events = %d, want 6:\n%s", dry, strings.Join(ev, "\n"))
	}
	if q := f.ctl.Quarantined(); len(q) != 0 {
		t.Errorf("dry-run quarantined %v", q)
	}
	// Recovery does not hold a healthy GPU back in dry-run.
	f.setNode(nodeObj("n1"))
	f.ctl.Sync(f.ctx)
	if !f.led.Snapshot().Node("n1").Node.GPUs[0].Healthy {
		t.Errorf("dry-run kept a recovered GPU out of placement")
	}
}

func TestRateLimitDefersThenDeletes(t *testing.T) {
	cfg := onConfig()
	cfg.NodeEvictionsPerMinute, cfg.NodeEvictionBurst = 1, 1
	f := newFixture(t, cfg, nodeObj("n1"), podOn("a", "n1", 0, nil), podOn("b", "n1", 0, nil))
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	if got := len(f.pods()); got != 1 {
		t.Fatalf("after the first pass %d pods left, want 1 (one token)", got)
	}
	left := f.pods()
	for _, p := range left {
		if !hasCondition(p) {
			t.Errorf("deferred pod %s is not marked", p.Name)
		}
	}
	f.advance(30 * time.Second)
	f.ctl.Sync(f.ctx)
	if got := len(f.pods()); got != 1 {
		t.Errorf("deleted before the bucket refilled")
	}
	f.advance(31 * time.Second)
	f.ctl.Sync(f.ctx)
	if got := len(f.pods()); got != 0 {
		t.Errorf("after a minute %d pods left, want 0", got)
	}
}
