package remediation

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/remediation"
)

func TestQuarantineAndRelease(t *testing.T) {
	cfg := onConfig()
	cfg.QuarantineThreshold = 2
	cfg.RecoveryQuiet = 0
	f := newFixture(t, cfg, nodeObj("n1"))
	uuid := topo("n1").GPUs[1].UUID
	for range 2 {
		f.setNode(nodeObj("n1", 1))
		f.ctl.Sync(f.ctx)
		f.advance(time.Second)
		f.setNode(nodeObj("n1"))
		f.ctl.Sync(f.ctx)
	}
	if q := f.ctl.Quarantined(); len(q) != 1 || q[0] != remediation.GPUTarget("n1", uuid) {
		t.Fatalf("quarantined = %v, want GPU 1 of n1", q)
	}
	if f.led.Snapshot().Node("n1").Node.GPUs[1].Healthy {
		t.Errorf("quarantined GPU is placeable though healthy")
	}
	n, _ := f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if got := n.Annotations[names.QuarantineAnnotation]; got != uuid {
		t.Errorf("quarantine annotation = %q, want %q", got, uuid)
	}
	// failed GPU pods quarantine the node: taint.
	for range 2 {
		f.ctl.PodFailed(f.ctx, "n1")
	}
	n, _ = f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == names.QuarantineTaint && t.Effect == corev1.TaintEffectNoSchedule
	}) || n.Annotations[names.QuarantineAnnotation] != uuid+",node" && n.Annotations[names.QuarantineAnnotation] != "node,"+uuid {
		t.Errorf("node quarantine not written: taints %v annotation %q", n.Spec.Taints, n.Annotations[names.QuarantineAnnotation])
	}
	f.waitFor("metric", func() bool { f.ctl.Sync(f.ctx); return len(f.ctl.Quarantined()) == 2 })

	// A restarted controller reads the quarantine back from the Node.
	g := &fixture{t: t, ctx: f.ctx, client: f.client, led: ledger.New(), rec: record.NewFakeRecorder(100), now: f.clock()}
	g.start(cfg)
	g.ctl.Sync(g.ctx)
	if q := g.ctl.Quarantined(); len(q) != 2 {
		t.Errorf("after a restart quarantined = %v, want the node and the GPU", q)
	}

	// Release: one annotation.
	rel := nodeObj("n1")
	rel.Annotations[names.QuarantineAnnotation] = contract.QuarantineRelease
	f.setNode(rel)
	f.ctl.Sync(f.ctx)
	if q := f.ctl.Quarantined(); len(q) != 0 {
		t.Errorf("after release quarantined = %v", q)
	}
	n, _ = f.client.CoreV1().Nodes().Get(f.ctx, "n1", metav1.GetOptions{})
	if _, has := n.Annotations[names.QuarantineAnnotation]; has || len(n.Spec.Taints) != 0 {
		t.Errorf("release left annotation %q taints %v", n.Annotations[names.QuarantineAnnotation], n.Spec.Taints)
	}
	f.waitFor("GPU back in placement", func() bool { return f.led.Snapshot().Node("n1").Node.GPUs[1].Healthy })
}

// TestReleaseActsOncePerAnnotation: the informer can still show the Node
// with <domain>/quarantine=release after the controller cleared it; that
// stale version must not release a quarantine that started since, nor
// report the release again. In dry-run the annotation stays, and the
// release is reported once, not on every pass.
func TestReleaseActsOncePerAnnotation(t *testing.T) {
	cfg := onConfig()
	cfg.QuarantineThreshold = 2
	f := newFixture(t, cfg, nodeObj("n1"))
	f.ctl.PodFailed(f.ctx, "n1")
	f.ctl.PodFailed(f.ctx, "n1")
	if q := f.ctl.Quarantined(); len(q) != 1 {
		t.Fatalf("quarantined = %v, want node n1", q)
	}
	stale := nodeObj("n1")
	stale.ResourceVersion = "42"
	stale.Annotations[names.QuarantineAnnotation] = contract.QuarantineRelease
	if !f.ctl.release(f.ctx, stale) {
		t.Fatal("release annotation not acted on")
	}
	if q := f.ctl.Quarantined(); len(q) != 0 {
		t.Fatalf("after release quarantined = %v", q)
	}
	// The node flaps again and is quarantined again; a pass that still
	// reads the old version must leave the new quarantine alone.
	f.ctl.PodFailed(f.ctx, "n1")
	f.ctl.PodFailed(f.ctx, "n1")
	if f.ctl.release(f.ctx, stale) {
		t.Error("the same Node version released twice")
	}
	if q := f.ctl.Quarantined(); len(q) != 1 || q[0] != remediation.NodeTarget("n1") {
		t.Errorf("a stale release annotation released the new quarantine: quarantined = %v", q)
	}
	released := 0
	for _, e := range f.events() {
		if strings.Contains(e, ReasonReleased) {
			released++
		}
	}
	if released != 1 {
		t.Errorf("%d %s events, want 1", released, ReasonReleased)
	}
	// A new release (a new Node version) is honoured.
	fresh := stale.DeepCopy()
	fresh.ResourceVersion = "43"
	if !f.ctl.release(f.ctx, fresh) || len(f.ctl.Quarantined()) != 0 {
		t.Errorf("a new release annotation was not acted on: quarantined = %v", f.ctl.Quarantined())
	}

	// dry-run: the annotation is never cleared; one report.
	dcfg := Default()
	dcfg.Mode = remediation.DryRun
	rel := nodeObj("n2")
	rel.Annotations[names.QuarantineAnnotation] = contract.QuarantineRelease
	d := newFixture(t, dcfg, rel)
	for range 3 {
		d.ctl.Sync(d.ctx)
	}
	released = 0
	for _, e := range d.events() {
		if strings.Contains(e, ReasonReleased) {
			released++
		}
	}
	if released != 1 {
		t.Errorf("dry-run: %d %s events over 3 passes, want 1", released, ReasonReleased)
	}
}
