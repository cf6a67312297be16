//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/extender/remediation"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	pkgremediation "github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// startRemediation runs the remediation controller in-process against the
// real API server, confined to the scenario's namespace and nodes (the
// shared rota-extender runs with --remediation=off, and other scenarios'
// faults must not touch it). It uses the same state cache and informer
// trims as rota-extender; its Adjust only affects its own ledger, so
// "no new work on the failed GPU" is the shared extender's ordinary
// unhealthy-GPU rule here.
func startRemediation(ctx context.Context, t *testing.T, ns, scenarioName string, mode pkgremediation.Mode) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	t.Cleanup(cancel)
	sel := informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ScenarioLabel + "=" + scenarioName })
	nodeF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, sel)
	remNodeF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, sel)
	podF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	leaseF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	var ctl *remediation.Controller
	c, err := state.New(ctx, state.Options{Names: env.Names, Tiers: topology.DefaultLabels(env.Names), Ledger: ledger.New(),
		Nodes: nodeF.Core().V1().Nodes().Informer(), Pods: podF.Core().V1().Pods().Informer(),
		Adjust: func(n *topology.Node) *topology.Node {
			if ctl != nil {
				return ctl.Adjust(n)
			}
			return n
		}})
	if err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: env.Client.CoreV1().Events("")})
	t.Cleanup(b.Shutdown)
	cfg := remediation.Default()
	cfg.Mode, cfg.Interval, cfg.GracePeriod, cfg.RecoveryQuiet = mode, 200*time.Millisecond, 5*time.Second, 2*time.Second
	ctl, err = remediation.New(remediation.Options{Config: cfg, Names: env.Names, Client: env.Client,
		Recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "rota-remediation-e2e"}),
		Nodes:    remNodeF.Core().V1().Nodes().Informer(), Leases: leaseF.Coordination().V1().Leases().Informer(),
		Pods: podF.Core().V1().Pods().Informer(), Reapply: c.Reapply})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []informers.SharedInformerFactory{nodeF, remNodeF, podF, leaseF} {
		f.Start(ctx.Done())
		t.Cleanup(f.Shutdown)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.Ready, ctl.HasSynced) {
		t.Fatal("remediation informers did not sync")
	}
	go ctl.Run(ctx)
}

// gpuHealth returns the published health of GPU uuid on node.
func gpuHealth(ctx context.Context, t *testing.T, node, uuid string) contract.Health {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := contract.ParseTopology([]byte(n.Annotations[env.Names.TopologyAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range topo.GPUs {
		if g.UUID == uuid {
			return g.Health
		}
	}
	t.Fatalf("node %s has no GPU %s", node, uuid)
	return ""
}

func waitHealth(ctx context.Context, t *testing.T, node, uuid string, want contract.Health) {
	t.Helper()
	for gpuHealth(ctx, t, node, uuid) != want {
		select {
		case <-ctx.Done():
			t.Fatalf("GPU %s on %s never became %s", uuid, node, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestRemediationGangXID: a running 4-pod gang (one GPU each) loses one GPU
// to XID 79 through the fake backend; the controller (on) deletes the whole
// gang. The gang, created again (as its Job would), runs without the failed
// GPU; after recovery the GPU is used again. Three injections give the
// median time from the fault to every member deleted. Then dry-run: the
// same fault changes nothing and is reported.
func TestRemediationGangXID(t *testing.T) {
	const name = "remediation"
	ctx, ns := setup(t, name, "", 4*time.Minute)
	spec := h100
	spec.Count, spec.Plugin = 4, true
	nodes(ctx, t, name, "rem", 2, spec)
	startRemediation(ctx, t, ns, name, pkgremediation.On)

	createGang := func(round int) []corev1.Pod {
		for i := range 4 {
			create(ctx, t, pod(ns, fmt.Sprintf("g%d-%d", round, i), name).Gang(fmt.Sprintf("g%d", round), 4).GPUs(1).Obj())
		}
		return waitPods(ctx, t, ns, "gang running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 4 })
	}
	var took []time.Duration
	var toRunning []time.Duration
	for round := range 3 {
		pods := createGang(round)
		victim := pods[0]
		a := assignment(t, &victim)
		uuid := a.GPUs[0].UUID
		node := env.GPUNode(victim.Spec.NodeName)
		idx := node.GPUIndex(uuid)
		injected := time.Now()
		if err := node.SetHealth(map[int]string{idx: "xid:79"}); err != nil {
			t.Fatal(err)
		}
		waitPods(ctx, t, ns, "gang deleted", func(ps []corev1.Pod) bool { return len(ps) == 0 })
		took = append(took, time.Since(injected))

		// Marked before deletion: the event says why.
		evs, err := env.PodEvents(ctx, ns, victim.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(evs, func(e corev1.Event) bool { return e.Reason == remediation.ReasonGPUFailure }) {
			t.Errorf("round %d: no %s event on %s", round, remediation.ReasonGPUFailure, victim.Name)
		}

		// Recreated (as a Job would), the gang runs without the failed GPU.
		again := createGang(100 + round)
		toRunning = append(toRunning, time.Since(injected))
		for i := range again {
			for _, g := range assignment(t, &again[i]).GPUs {
				if g.UUID == uuid {
					t.Errorf("round %d: %s got the failed GPU %s", round, again[i].Name, uuid)
				}
			}
		}
		if err := env.DeletePods(ctx, ns); err != nil {
			t.Fatal(err)
		}
		waitPods(ctx, t, ns, "cleanup", func(ps []corev1.Pod) bool { return len(ps) == 0 })

		// Recovery: healthy again after the plugin's quiet period; the GPU
		// takes work again (8 one-GPU pods fill both nodes).
		if err := node.SetHealth(map[int]string{idx: "healthy"}); err != nil {
			t.Fatal(err)
		}
		waitHealth(ctx, t, node.Spec.Name, uuid, contract.Healthy)
		if round == 0 {
			for i := range 8 {
				create(ctx, t, pod(ns, fmt.Sprintf("fill-%d", i), name).GPUs(1).Obj())
			}
			fill := waitPods(ctx, t, ns, "fill running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 8 })
			used := false
			for i := range fill {
				used = used || assignment(t, &fill[i]).GPUs[0].UUID == uuid
			}
			if !used {
				t.Errorf("recovered GPU %s not used again", uuid)
			}
			if err := env.DeletePods(ctx, ns); err != nil {
				t.Fatal(err)
			}
			waitPods(ctx, t, ns, "cleanup", func(ps []corev1.Pod) bool { return len(ps) == 0 })
		}
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	note(name, "XID to whole gang deleted: median %s of %v; to the recreated gang running: median %s",
		med(took).Round(time.Millisecond), took, med(toRunning).Round(time.Millisecond))
	t.Logf("XID→gang deleted %v (median %s); XID→recreated gang running %v (median %s)",
		took, med(took), toRunning, med(toRunning))
}

// TestRemediationDryRun: the same fault under dry-run deletes nothing,
// sets no condition, and reports RemediationDryRun events.
func TestRemediationDryRun(t *testing.T) {
	const name = "remediation-dry"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count, spec.Plugin = 4, true
	nodes(ctx, t, name, "remdry", 1, spec)
	startRemediation(ctx, t, ns, name, pkgremediation.DryRun)
	for i := range 4 {
		create(ctx, t, pod(ns, fmt.Sprintf("d-%d", i), name).Gang("d", 4).GPUs(1).Obj())
	}
	pods := waitPods(ctx, t, ns, "gang running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 4 })
	a := assignment(t, &pods[0])
	node := env.GPUNode(pods[0].Spec.NodeName)
	idx := node.GPUIndex(a.GPUs[0].UUID)
	if err := node.SetHealth(map[int]string{idx: "xid:79"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.SetHealth(map[int]string{idx: "healthy"}) })
	waitHealth(ctx, t, node.Spec.Name, a.GPUs[0].UUID, contract.Unhealthy)
	var reported map[string][]corev1.Event
	for {
		var err error
		reported, err = env.NamespaceEvents(ctx, ns, remediation.ReasonDryRun)
		if err != nil {
			t.Fatal(err)
		}
		if len(reported) == 4 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("dry-run reported %d of 4 members", len(reported))
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(2 * time.Second) // would-be deletions would have happened by now
	after, err := env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range after {
		if p.DeletionTimestamp != nil || slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return string(c.Type) == env.Names.GPUFailureCondition
		}) {
			raw, _ := json.Marshal(p.Status.Conditions)
			t.Errorf("dry-run changed pod %s: deleting=%v conditions=%s", p.Name, p.DeletionTimestamp != nil, raw)
		}
	}
	if len(after) != 4 {
		t.Errorf("dry-run left %d of 4 pods", len(after))
	}
}
