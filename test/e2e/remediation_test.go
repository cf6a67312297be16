//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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

// remediationRun is one in-process remediation controller.
type remediationRun struct {
	ctl *remediation.Controller
	// ledger is the controller's own state cache's ledger: what placement
	// would read with this controller's Adjust (quarantine, recovery).
	ledger *ledger.Ledger
	// metricsURL serves the controller's metrics registry (the alert
	// metric rota_extender_quarantined among them).
	metricsURL string
}

// placeable counts the node's GPUs this controller's placement view
// offers (-1: node unknown).
func (r *remediationRun) placeable(node string) int {
	n := r.ledger.Snapshot().Node(node)
	if n == nil {
		return -1
	}
	k := 0
	for _, g := range n.Node.GPUs {
		if g.Healthy {
			k++
		}
	}
	return k
}

// startRemediation runs the remediation controller in-process against the
// real API server, confined to the scenario's namespace and nodes (the
// shared rota-extender runs with --remediation=off, and other scenarios'
// faults must not touch it). It uses the same state cache and informer
// trims as rota-extender, with failed pods counted against their node as
// rota-extender counts them; its Adjust only affects its own ledger, so
// "no new work on the failed GPU" is the shared extender's ordinary
// unhealthy-GPU rule here, and "no new work on a quarantined node" the
// quarantine taint. tweak, when given, changes the configuration.
func startRemediation(ctx context.Context, t *testing.T, ns, scenarioName string, mode pkgremediation.Mode,
	tweak ...func(*remediation.Config)) *remediationRun {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	t.Cleanup(cancel)
	sel := informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ScenarioLabel + "=" + scenarioName })
	nodeF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, sel)
	podF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	leaseF := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(corev1.NamespaceNodeLease))
	var ctl atomic.Pointer[remediation.Controller]
	led := ledger.New()
	c, err := state.New(ctx, state.Options{Names: env.Names, Tiers: topology.DefaultLabels(env.Names), Ledger: led,
		Nodes: nodeF.Core().V1().Nodes().Informer(), Pods: podF.Core().V1().Pods().Informer(),
		Adjust: func(n *topology.Node) *topology.Node {
			if c := ctl.Load(); c != nil {
				return c.Adjust(n)
			}
			return n
		},
		OnPodFailed: func(node string) {
			if c := ctl.Load(); c != nil {
				c.PodFailed(ctx, node)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: env.Client.CoreV1().Events("")})
	t.Cleanup(b.Shutdown)
	cfg := remediation.Default()
	cfg.Mode, cfg.Interval, cfg.GracePeriod, cfg.RecoveryQuiet = mode, 200*time.Millisecond, 5*time.Second, 2*time.Second
	for _, f := range tweak {
		f(&cfg)
	}
	reg := prometheus.NewRegistry()
	rc, err := remediation.New(remediation.Options{Config: cfg, Names: env.Names, Client: env.Client,
		Recorder: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "rota-remediation-e2e"}),
		Nodes:    nodeF.Core().V1().Nodes().Informer(), GPUHealth: c.GPUHealth, Leases: leaseF.Coordination().V1().Leases().Informer(),
		Pods: podF.Core().V1().Pods().Informer(), Reapply: c.Reapply, Metrics: remediation.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	ctl.Store(rc)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	for _, f := range []informers.SharedInformerFactory{nodeF, podF, leaseF} {
		f.Start(ctx.Done())
		t.Cleanup(f.Shutdown)
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.Ready, rc.HasSynced) {
		t.Fatal("remediation informers did not sync")
	}
	go rc.Run(ctx)
	return &remediationRun{ctl: rc, ledger: led, metricsURL: srv.URL + "/metrics"}
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

// TestRemediationGangXID: a running 4-pod gang (one GPU each, on two
// nodes of 8 GPUs with the real device plugin) loses one GPU to XID 79
// through the fake backend; the controller (on) marks and deletes the
// whole gang. The gang, created again as its Job would, runs without the
// failed GPU, and is the next injection's victim: 10 injections, each on
// the least-faulted GPU the running gang holds (a GPU reaches the
// quarantine threshold of 5 only after that many faults), give the median
// and p90 times from the fault to every member deleted and to the
// recreated gang running. Writing the next fault heals the previous GPU
// (the plugin's 5 s recovery quiet period). At the end every GPU is
// healthy and the last failed GPU takes work again.
func TestRemediationGangXID(t *testing.T) {
	const name = "remediation"
	const injections = 10
	ctx, ns := setup(t, name, "", 4*time.Minute)
	spec := h100
	// 16 GPUs: the faulted GPUs of the last few rounds are still in the
	// plugin's recovery quiet period, and the recreated gang must not wait
	// for one of them (that would time the quiet period, not remediation).
	spec.Count, spec.Plugin = 8, true
	nodes(ctx, t, name, "rem", 2, spec)
	startRemediation(ctx, t, ns, name, pkgremediation.On)
	began := time.Now()

	gang := func(round int) string { return fmt.Sprintf("g%d", round) }
	createGang := func(round int) {
		for i := range 4 {
			create(ctx, t, pod(ns, fmt.Sprintf("%s-%d", gang(round), i), name).Gang(gang(round), 4).GPUs(1).Obj())
		}
	}
	members := func(ps []corev1.Pod, round int) []corev1.Pod {
		var out []corev1.Pod
		for _, p := range ps {
			if p.Labels[env.Names.GangLabel] == gang(round) {
				out = append(out, p)
			}
		}
		return out
	}
	createGang(0)
	pods := waitPods(ctx, t, ns, "gang running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 4 })
	faults := map[string]int{} // GPU UUID -> injections
	var toDeleted, toRunning []time.Duration
	touched := map[string]*harness.GPUNode{}
	var uuid string
	for round := range injections {
		// The victim: the least-faulted GPU of the running gang.
		var victim corev1.Pod
		uuid = ""
		for i := range pods {
			u := assignment(t, &pods[i]).GPUs[0].UUID
			if uuid == "" || faults[u] < faults[uuid] {
				victim, uuid = pods[i], u
			}
		}
		faults[uuid]++
		node := env.GPUNode(victim.Spec.NodeName)
		touched[node.Spec.Name] = node
		injected := time.Now()
		if err := node.SetHealth(map[int]string{node.GPUIndex(uuid): "xid:79"}); err != nil {
			t.Fatal(err)
		}
		waitFor(ctx, t, fmt.Sprintf("round %d: gang %s deleted", round, gang(round)), func(ctx context.Context) (bool, error) {
			ps, err := env.Pods(ctx, ns)
			return err == nil && len(members(ps, round)) == 0, nil
		})
		toDeleted = append(toDeleted, time.Since(injected))

		// Marked before deletion: the event says why.
		evs, err := env.PodEvents(ctx, ns, victim.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(evs, func(e corev1.Event) bool {
			return e.Reason == remediation.ReasonGPUFailure && strings.Contains(e.Message, "XID 79")
		}) {
			t.Errorf("round %d: no %s event naming XID 79 on %s", round, remediation.ReasonGPUFailure, victim.Name)
		}

		// Recreated (as a Job would), the gang runs without the failed GPU.
		createGang(round + 1)
		waitFor(ctx, t, fmt.Sprintf("round %d: gang %s running", round, gang(round+1)), func(ctx context.Context) (bool, error) {
			ps, err := env.Pods(ctx, ns)
			pods = members(ps, round+1)
			return err == nil && harness.Running(pods) == 4, nil
		})
		toRunning = append(toRunning, time.Since(injected))
		if d := toRunning[len(toRunning)-1]; d > 2*time.Second {
			for i := range pods {
				msg, _ := env.LastFailedScheduling(ctx, ns, pods[i].Name)
				t.Logf("round %d: gang %s took %s to run; %s last refused: %q", round, gang(round+1), d.Round(time.Millisecond), pods[i].Name, msg)
			}
		}
		for i := range pods {
			if g := assignment(t, &pods[i]).GPUs[0].UUID; g == uuid {
				t.Errorf("round %d: %s got the failed GPU %s", round, pods[i].Name, uuid)
			}
		}
	}
	loop := time.Since(began)

	// Recovery: every GPU healthy again after the plugin's quiet period;
	// the last failed GPU takes work again (16 one-GPU pods fill both nodes).
	if err := env.DeletePods(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, n := range touched {
		if err := n.SetHealth(map[int]string{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range touched {
		for i := range n.Spec.Count {
			waitHealth(ctx, t, n.Spec.Name, n.UUID(i), contract.Healthy)
		}
	}
	for i := range 2 * spec.Count {
		create(ctx, t, pod(ns, fmt.Sprintf("fill-%d", i), name).GPUs(1).Obj())
	}
	fill := waitPods(ctx, t, ns, "fill running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 2*spec.Count })
	if !slices.ContainsFunc(fill, func(p corev1.Pod) bool { return assignment(t, &p).GPUs[0].UUID == uuid }) {
		t.Errorf("recovered GPU %s not used again", uuid)
	}

	dMed, dP90 := quantiles(toDeleted)
	rMed, rP90 := quantiles(toRunning)
	note(name, "%d XID injections: fault to whole gang deleted median %s p90 %s; to the recreated gang running median %s p90 %s",
		injections, dMed.Round(time.Millisecond), dP90.Round(time.Millisecond), rMed.Round(time.Millisecond), rP90.Round(time.Millisecond))
	t.Logf("REMEDIATION SUMMARY: XID 79 under a running 4-pod gang, %d injections in %s: fault -> whole gang deleted median %s, p90 %s; "+
		"fault -> recreated gang running on healthy GPUs median %s, p90 %s (device plugin health poll 1 s, controller pass 200 ms)",
		injections, loop.Round(100*time.Millisecond), dMed.Round(time.Millisecond), dP90.Round(time.Millisecond),
		rMed.Round(time.Millisecond), rP90.Round(time.Millisecond))
	t.Logf("fault -> deleted %v; fault -> running %v", ms(toDeleted), ms(toRunning))
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

// TestRemediationHeartbeat: a node's kubelet stops renewing its Lease
// (the node simulator's renewals are refused by an admission policy on
// that one Lease, and the last renewal is backdated past the controller's
// heartbeat timeout). The GPU pods on that node get the GPUFailure event
// and condition, and are deleted (a mark-only pod is marked and kept); a
// pod on the other node is untouched, and the node's GPUs leave this
// controller's placement view. Once the Lease is renewed again the node
// returns to placement after the recovery quiet period.
//
// The deleted pods vanish at once because the harness' kubelet stand-in
// still serves the silent node; behind a really dead kubelet they would
// stay Terminating until the node lifecycle controller and pod GC act,
// while their Job's replacements start elsewhere.
func TestRemediationHeartbeat(t *testing.T) {
	const name = "remediation-hb"
	ctx, ns := setup(t, name, "", 2*time.Minute)
	spec := h100
	spec.Count = 4
	nodes(ctx, t, name, "remhb", 2, spec)
	// The simulator renews every 10 s; 20 s leaves the live node margin.
	rr := startRemediation(ctx, t, ns, name, pkgremediation.On, func(c *remediation.Config) { c.HeartbeatTimeout = 20 * time.Second })
	const dead, live = "remhb-0", "remhb-1"
	on := func(p *harness.PodBuilder, node string) *corev1.Pod {
		return p.NodeSelector(corev1.LabelHostname, node).GPUs(1).Obj()
	}
	for i := range 2 {
		create(ctx, t, on(pod(ns, fmt.Sprintf("train-%d", i), name), dead))
	}
	create(ctx, t, on(pod(ns, "keep", name).Label(env.Names.RemediationLabel, contract.RemediationMarkOnly), dead))
	create(ctx, t, on(pod(ns, "other", name), live))
	waitPods(ctx, t, ns, "pods running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 4 })

	hb, stopped := stopHeartbeat(ctx, t, dead, time.Minute)
	var pods []corev1.Pod
	waitFor(ctx, t, "the silent node's pods deleted and keep marked", func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = env.Pods(ctx, ns); err != nil {
			return false, nil
		}
		names := []string{}
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return slices.Equal(names, []string{"keep", "other"}) && hasGPUFailure(&pods[0]), nil
	})
	took := time.Since(stopped)
	if hasGPUFailure(&pods[1]) {
		t.Errorf("pod other on the live node got the %s condition", env.Names.GPUFailureCondition)
	}
	for _, p := range []string{"train-0", "train-1", "keep"} {
		evs, err := env.PodEvents(ctx, ns, p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(evs, func(e corev1.Event) bool {
			return e.Reason == remediation.ReasonGPUFailure && strings.Contains(e.Message, "node "+dead+" stopped reporting")
		}) {
			t.Errorf("pod %s: no %s event saying the node stopped reporting", p, remediation.ReasonGPUFailure)
		}
	}
	// Out of placement (what rota-extender with --remediation=on filters on).
	placeable := rr.placeable
	waitFor(ctx, t, "the silent node out of placement", func(context.Context) (bool, error) { return placeable(dead) == 0, nil })
	if got := placeable(live); got != 4 {
		t.Errorf("live node: %d placeable GPUs, want 4", got)
	}

	// The kubelet is back: after the 2 s recovery quiet period the node
	// takes work again.
	hb.resume(ctx, t)
	back := time.Now()
	waitFor(ctx, t, "the node back in placement", func(context.Context) (bool, error) { return placeable(dead) == 4, nil })
	if q := rr.ctl.Quarantined(); len(q) != 0 {
		t.Errorf("one lost heartbeat quarantined %v", q)
	}
	note(name, "lease stale to pods deleted %s; lease renewed to placeable %s",
		took.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	t.Logf("heartbeat lost (lease 1m old, timeout 20s) -> pods marked and deleted in %s; renewed -> placeable in %s",
		took.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
}

func hasGPUFailure(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return string(c.Type) == env.Names.GPUFailureCondition && c.Status == corev1.ConditionTrue
	})
}

// TestRemediationFlappingNode: GPU pods keep failing on one node; the
// fifth failure within the window (defaults: 5 in 10 minutes) quarantines
// it: the quarantine annotation and NoSchedule taint on the Node, a
// Quarantined event, and the alert metric rota_extender_quarantined set.
// A pod that may only run there stays pending; others run on the other
// node. The admin releases it with the real kubectl-rota binary (after a
// dry run, and after a refused release of a healthy node): the taint,
// annotation and metric go, and the waiting pod runs there.
func TestRemediationFlappingNode(t *testing.T) {
	const name = "remediation-flap"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	spec := h100
	spec.Count = 4
	nodes(ctx, t, name, "remflap", 2, spec)
	rr := startRemediation(ctx, t, ns, name, pkgremediation.On)
	bin := buildKubectlRota(ctx, t)
	kubectlRota := func(args ...string) (string, error) {
		t.Helper()
		args = append(args, "--kubeconfig", env.Cluster.Kubeconfig, "--color", "never")
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, bin, args...).CombinedOutput()
		t.Logf("kubectl-rota %s (err %v):\n%s", strings.Join(args, " "), err, out)
		return string(out), err
	}
	const flappy, good = "remflap-0", "remflap-1"
	on := func(podName string) *corev1.Pod {
		return pod(ns, podName, name).NodeSelector(corev1.LabelHostname, flappy).GPUs(1).Obj()
	}
	quarantined := func() (*corev1.Node, bool) {
		n, err := env.Client.CoreV1().Nodes().Get(ctx, flappy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n, n.Annotations[env.Names.QuarantineAnnotation] == contract.QuarantineNode && hasQuarantineTaint(n)
	}
	metric := `rota_extender_quarantined{kind="node",name="` + flappy + `"}`
	scrape := func() harness.Samples {
		s, err := harness.Scrape(ctx, rr.metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Four crashes: under the threshold.
	for i := range 4 {
		create(ctx, t, on(fmt.Sprintf("crash-%d", i)))
	}
	waitPods(ctx, t, ns, "crash pods running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 4 })
	for i := range 4 {
		failPod(ctx, t, ns, fmt.Sprintf("crash-%d", i))
	}
	create(ctx, t, on("crash-4"))
	waitPods(ctx, t, ns, "crash-4 running", func(ps []corev1.Pod) bool { return harness.Running(ps) == 1 })
	if _, q := quarantined(); q || len(rr.ctl.Quarantined()) != 0 {
		t.Fatalf("quarantined after 4 failures (threshold 5): %v", rr.ctl.Quarantined())
	}
	// The fifth.
	failPod(ctx, t, ns, "crash-4")
	fifth := time.Now()
	waitFor(ctx, t, "node quarantined (annotation and taint)", func(context.Context) (bool, error) { _, q := quarantined(); return q, nil })
	waitFor(ctx, t, "alert metric set", func(context.Context) (bool, error) { return scrape()[metric] == 1, nil })
	tookQ := time.Since(fifth)
	if evs := nodeEvents(ctx, t, flappy, remediation.ReasonQuarantined); len(evs) != 1 || !strings.Contains(evs[0].Message, "5 GPU pods failed") {
		t.Errorf("Quarantined events on %s: %v, want one saying 5 GPU pods failed", flappy, evs)
	}

	// No new work there: Rota's placement view offers none of its GPUs,
	// a pod that may only run there waits (the taint), another runs elsewhere.
	if got := rr.placeable(flappy); got != 0 {
		t.Errorf("quarantined node: %d placeable GPUs, want 0", got)
	}
	create(ctx, t, on("probe"))
	create(ctx, t, pod(ns, "elsewhere", name).GPUs(1).Obj())
	msg := failedScheduling(ctx, t, ns, "probe")
	if !strings.Contains(msg, "1 node(s) had untolerated taint") {
		t.Errorf("probe refused for another reason than the quarantine taint: %s", msg)
	}
	running := waitPods(ctx, t, ns, "elsewhere running", func(ps []corev1.Pod) bool {
		return slices.ContainsFunc(ps, func(p corev1.Pod) bool { return p.Name == "elsewhere" && p.Status.Phase == corev1.PodRunning })
	})
	for _, p := range running {
		if p.Name == "elsewhere" && p.Spec.NodeName != good {
			t.Errorf("elsewhere ran on %s, want %s", p.Spec.NodeName, good)
		}
		if p.Name == "probe" && p.Spec.NodeName != "" {
			t.Errorf("probe was placed on the quarantined node %s", p.Spec.NodeName)
		}
	}

	// The admin command: a healthy node is refused, a dry run writes nothing.
	if out, err := kubectlRota("release", good); err == nil || !strings.Contains(out, "node "+good+" is not quarantined") ||
		!strings.Contains(out, flappy+" (node)") {
		t.Errorf("release of a healthy node: err %v, output %q; want a refusal naming %s as quarantined", err, out, flappy)
	}
	if out, err := kubectlRota("release", flappy, "--dry-run"); err != nil || !strings.Contains(out, "would release node") {
		t.Errorf("release --dry-run: err %v, output %q", err, out)
	}
	if _, q := quarantined(); !q {
		t.Fatal("release --dry-run changed the node")
	}
	released := time.Now()
	out, err := kubectlRota("release", flappy, "--wait=30s")
	if err != nil || !strings.Contains(out, "node/"+flappy+" released") {
		t.Fatalf("release: err %v, output %q", err, out)
	}
	n, _ := quarantined()
	if _, has := n.Annotations[env.Names.QuarantineAnnotation]; has || hasQuarantineTaint(n) {
		t.Errorf("after release: annotation %q, taints %v", n.Annotations[env.Names.QuarantineAnnotation], n.Spec.Taints)
	}
	waitFor(ctx, t, "alert metric cleared", func(context.Context) (bool, error) { _, set := scrape()[metric]; return !set, nil })
	if evs := nodeEvents(ctx, t, flappy, remediation.ReasonReleased); len(evs) != 1 {
		t.Errorf("%d %s events on %s, want 1", len(evs), remediation.ReasonReleased, flappy)
	}
	waitFor(ctx, t, "released node back in placement", func(context.Context) (bool, error) { return rr.placeable(flappy) == 4, nil })
	waitPods(ctx, t, ns, "probe running on the released node", func(ps []corev1.Pod) bool {
		return slices.ContainsFunc(ps, func(p corev1.Pod) bool {
			return p.Name == "probe" && p.Spec.NodeName == flappy && p.Status.Phase == corev1.PodRunning
		})
	})
	note(name, "5th failure to quarantined (taint, metric) %s; kubectl rota release to a pod running there %s",
		tookQ.Round(time.Millisecond), time.Since(released).Round(time.Millisecond))
}
