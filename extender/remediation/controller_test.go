package remediation

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/topology"
)

var names = contract.Default

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func topo(node string) *topology.Node {
	return topology.FromSpec(topology.Spec{Name: node, Model: "H100", Count: 4, MemoryMiB: 80 * 1024})
}

// nodeObj is a Ready node publishing its topology with the given GPU
// indexes unhealthy.
func nodeObj(name string, unhealthy ...int) *corev1.Node {
	doc := topo(name).Document()
	for i := range doc.GPUs {
		if slices.Contains(unhealthy, doc.GPUs[i].Index) {
			doc.GPUs[i].Health, doc.GPUs[i].Reason = contract.Unhealthy, "XID 79"
		}
	}
	data, _ := doc.Marshal()
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{names.TopologyAnnotation: string(data)}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// podOn is a running pod holding 8 GiB of GPU index gpu on node.
func podOn(name, node string, gpu int, labels map[string]string) *corev1.Pod {
	t := topo(node)
	as := contract.Assignment{Version: contract.Version, Node: node,
		GPUs: []contract.AssignedGPU{{Index: gpu, UUID: t.GPUs[gpu].UUID, MemoryMiB: 8192}}}
	data, _ := as.Marshal()
	q := resource.MustParse("8")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name), Labels: labels,
			Annotations: map[string]string{names.AssignmentAnnotation: string(data)}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(names.GPUMemory): q}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

type fixture struct {
	t      testing.TB
	ctx    context.Context
	client *fake.Clientset
	ctl    *Controller
	cache  *state.Cache
	led    *ledger.Ledger
	rec    *record.FakeRecorder
	mu     sync.Mutex
	now    time.Time
}

func (f *fixture) clock() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func newFixture(t testing.TB, cfg Config, objs ...runtime.Object) *fixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	client := fake.NewClientset(objs...)
	f := &fixture{t: t, ctx: ctx, client: client, led: ledger.New(), rec: record.NewFakeRecorder(1000), now: t0}
	return f.start(cfg)
}

func (f *fixture) start(cfg Config) *fixture {
	t := f.t
	sf := informers.NewSharedInformerFactory(f.client, 0)
	rf := informers.NewSharedInformerFactory(f.client, 0)
	var ctl *Controller
	c, err := state.New(f.ctx, state.Options{Names: names, Tiers: topology.DefaultLabels(names), Ledger: f.led,
		Nodes: sf.Core().V1().Nodes().Informer(), Pods: sf.Core().V1().Pods().Informer(),
		Adjust: func(n *topology.Node) *topology.Node {
			if ctl != nil {
				return ctl.Adjust(n)
			}
			return n
		},
		OnPodFailed: func(node string) { ctl.PodFailed(f.ctx, node) },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.cache = c
	ctl, err = New(Options{Config: cfg, Names: names, Client: f.client, Recorder: f.rec,
		Nodes: rf.Core().V1().Nodes().Informer(), Leases: rf.Coordination().V1().Leases().Informer(),
		Pods: sf.Core().V1().Pods().Informer(), Reapply: c.Reapply, Now: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.ctl = ctl
	sf.Start(f.ctx.Done())
	rf.Start(f.ctx.Done())
	if !cache.WaitForCacheSync(f.ctx.Done(), ctl.HasSynced, c.Ready) {
		t.Fatal("informers did not sync")
	}
	return f
}

// setNode updates the node and waits until both node informers see it.
func (f *fixture) setNode(n *corev1.Node) {
	f.t.Helper()
	cur, err := f.client.CoreV1().Nodes().Get(f.ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cur.Annotations[names.TopologyAnnotation] = n.Annotations[names.TopologyAnnotation]
	for k, v := range n.Annotations {
		cur.Annotations[k] = v
	}
	cur.Status.Conditions = n.Status.Conditions
	if _, err := f.client.CoreV1().Nodes().Update(f.ctx, cur, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.waitFor("node informer update", func() bool {
		obj, ok, _ := f.ctl.nodes.GetStore().GetByKey(n.Name)
		if !ok {
			return false
		}
		got := obj.(*corev1.Node)
		for k, v := range n.Annotations {
			if got.Annotations[k] != v {
				return false
			}
		}
		return len(got.Status.Conditions) == 1 && got.Status.Conditions[0].Status == n.Status.Conditions[0].Status
	})
}

func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 5*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		f.t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (f *fixture) pods() map[string]*corev1.Pod {
	list, err := f.client.CoreV1().Pods("ns").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// writes returns the verbs of the client's mutating calls, e.g. "delete pods".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		s := a.GetVerb() + " " + a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			s += "/" + sub
		}
		if n, ok := a.(interface{ GetName() string }); ok {
			s += " " + n.GetName()
		}
		out = append(out, s)
	}
	return out
}

func hasCondition(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return string(c.Type) == names.GPUFailureCondition && c.Status == corev1.ConditionTrue
	})
}

func gangLabels() map[string]string { return map[string]string{names.GangLabel: "g"} }

// scenario: n1 GPU 0 holds gang members g-0 and g-1 (shares) and mark-only
// pod keep; g-2, g-3 run on n2; other runs on n1 GPU 2.
func scenarioObjects() []runtime.Object {
	return []runtime.Object{
		nodeObj("n1"), nodeObj("n2"),
		podOn("g-0", "n1", 0, gangLabels()), podOn("g-1", "n1", 1, gangLabels()),
		podOn("g-2", "n2", 0, gangLabels()), podOn("g-3", "n2", 1, gangLabels()),
		podOn("keep", "n1", 0, map[string]string{names.RemediationLabel: contract.RemediationMarkOnly}),
		podOn("other", "n1", 2, nil),
	}
}

func onConfig() Config {
	c := Default()
	c.Mode = remediation.On
	c.RecoveryQuiet = time.Minute
	return c
}

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
	var grace int64 = -1
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if d, ok := a.(k8stesting.DeleteActionImpl); ok && d.DeleteOptions.GracePeriodSeconds != nil {
			grace = *d.DeleteOptions.GracePeriodSeconds
		}
		return false, nil, nil
	})
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	if grace != 90 {
		t.Errorf("deletion grace = %d s, want 90 (from %s)", grace, names.CheckpointGraceAnnotation)
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

func TestRecoveryQuietPeriod(t *testing.T) {
	f := newFixture(t, onConfig(), nodeObj("n1"))
	gpu0 := func() bool { return f.led.Snapshot().Node("n1").Node.GPUs[0].Healthy }
	f.ctl.Sync(f.ctx)
	f.setNode(nodeObj("n1", 0))
	f.ctl.Sync(f.ctx)
	if gpu0() {
		t.Fatal("unhealthy GPU is placeable")
	}
	f.advance(10 * time.Second)
	f.setNode(nodeObj("n1"))
	f.ctl.Sync(f.ctx)
	if gpu0() {
		t.Errorf("recovered GPU placeable before the quiet period")
	}
	f.advance(time.Minute)
	f.ctl.Sync(f.ctx)
	if !gpu0() {
		t.Errorf("recovered GPU not placeable after the quiet period")
	}
}

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

func keys(m map[string]*corev1.Pod) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
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
