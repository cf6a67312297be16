package report

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/topology"
)

// agreeNode is a node with 64 CPUs and 512 GiB allocatable and a topology
// annotation of count 80 GiB GPUs (none when count is 0; one that does not
// parse when broken).
func agreeNode(t *testing.T, name string, count int, broken bool) (*corev1.Node, *topology.Node) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{contract.Default.Domain + "/leaf": "leaf-a"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"),
			corev1.ResourceMemory: resource.MustParse("512Gi")}}}
	if count == 0 {
		return n, nil
	}
	tn := topology.FromSpec(topology.Spec{Name: name, Model: "H100", Count: count, MemoryMiB: 80 * 1024})
	data, err := tn.Document().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = map[string]string{contract.Default.TopologyAnnotation: string(data)}
	if broken {
		n.Annotations[contract.Default.TopologyAnnotation] = "{"
	}
	return n, tn
}

// agreePod builds a running pod on node taking cpu CPUs and 1 GiB.
type agreePod struct{ p *corev1.Pod }

func newAgreePod(name, node string, cpu string) *agreePod {
	rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}
	return &agreePod{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: rl, Limits: corev1.ResourceList{}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}}
}

func (b *agreePod) asks(resName string, n int64) *agreePod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	b.p.Spec.Containers[0].Resources.Requests[corev1.ResourceName(resName)] = q
	b.p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(resName)] = q
	return b
}

// assigned writes an assignment of tn's GPUs idx (whole when mib is 0,
// else a share of mib) for node assignedTo.
func (b *agreePod) assigned(t *testing.T, assignedTo string, tn *topology.Node, mib contract.MiB, idx ...int) *agreePod {
	t.Helper()
	as := contract.Assignment{Version: contract.Version, Node: assignedTo, Whole: mib == 0}
	for _, i := range idx {
		m := mib
		if m == 0 {
			m = tn.GPUs[i].MemoryMiB
		}
		as.GPUs = append(as.GPUs, contract.AssignedGPU{Index: i, UUID: tn.GPUs[i].UUID, MemoryMiB: m})
	}
	data, err := as.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b.p.Annotations[contract.Default.AssignmentAnnotation] = string(data)
	return b
}

func (b *agreePod) with(f func(p *corev1.Pod)) *agreePod { f(b.p); return b }

// TestAgreesWithExtenderCache: kubectl-rota reads a cluster into the same
// ledger as rota-extender's cache, on a cluster with a pod of every kind
// podreq.Classify tells apart and GPU-free pods: per node the same
// allocations, GPU use and CPU and host memory in use, and the cache logs
// (and counts) a problem for exactly the pods kubectl-rota reports, in the
// same words.
func TestAgreesWithExtenderCache(t *testing.T) {
	names := contract.Default
	g1, t1 := agreeNode(t, "g1", 2, false)
	g2, t2 := agreeNode(t, "g2", 4, false)
	broken, tb := agreeNode(t, "broken", 2, true)
	cpuNode, _ := agreeNode(t, "cpu-1", 0, false)
	gib := contract.MiB(1024)
	pods := []*corev1.Pod{
		// Allocated: a whole GPU, two shares of one GPU, a gang of two.
		newAgreePod("train", "g1", "4").asks(names.GPU, 1).assigned(t, "g1", t1, 0, 0).p,
		newAgreePod("infer-a", "g1", "2").asks(names.GPUMemory, 20).assigned(t, "g1", t1, 20*gib, 1).p,
		newAgreePod("infer-b", "g1", "1").asks(names.GPUMemory, 40).assigned(t, "g1", t1, 40*gib, 1).p,
		newAgreePod("gang-0", "g2", "8").asks(names.GPU, 2).assigned(t, "g2", t2, 0, 0, 1).with(func(p *corev1.Pod) {
			p.Labels[names.GangLabel], p.Annotations[names.GangSizeAnnotation] = "g", "2"
		}).p,
		newAgreePod("gang-1", "g2", "8").asks(names.GPU, 2).assigned(t, "g2", t2, 0, 2, 3).with(func(p *corev1.Pod) {
			p.Labels[names.GangLabel], p.Annotations[names.GangSizeAnnotation] = "g", "2"
		}).p,
		// Terminal: its GPU (taken by train) is free.
		newAgreePod("done", "g1", "4").asks(names.GPU, 1).assigned(t, "g1", t1, 0, 0).with(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodSucceeded
		}).p,
		// Unbound with an assignment: a bind that failed half-way holds nothing.
		newAgreePod("half-bound", "", "4").asks(names.GPU, 1).assigned(t, "g1", t1, 0, 0).p,
		// Invalid: nothing accounted, not even its CPU.
		newAgreePod("invalid", "g1", "3").asks(names.GPU, 1).with(func(p *corev1.Pod) {
			p.Annotations[names.AssignmentAnnotation] = `{"version":"v9"}`
		}).p,
		// Unaccounted: its CPU counts, its GPU does not.
		newAgreePod("foreign", "g2", "5").asks(names.GPU, 1).p,
		// Wrong node: nothing accounted.
		newAgreePod("misdirected", "g1", "7").asks(names.GPU, 1).assigned(t, "g2", t2, 0, 3).p,
		// GPU-free: counted on GPU nodes only.
		newAgreePod("web", "g1", "6").p,
		newAgreePod("batch", "g2", "500m").with(func(p *corev1.Pod) {
			prio := int32(9)
			p.Spec.Priority, p.Labels[names.PreemptibleLabel] = &prio, "false"
		}).p,
		newAgreePod("cpu-only", "cpu-1", "30").p,
		newAgreePod("on-broken", "broken", "2").p,
		newAgreePod("nothing", "g1", "0").with(func(p *corev1.Pod) { p.Spec.Containers[0].Resources = corev1.ResourceRequirements{} }).p,
		// Allocated on a node whose topology does not parse: an orphan in both.
		newAgreePod("orphan", "broken", "2").asks(names.GPU, 1).assigned(t, "broken", tb, 0, 0).p,
		// Pending: four whole GPUs (only g2 has them, held by the gang);
		// a share that fits g1's GPU 1 but not its free CPU.
		newAgreePod("big", "", "1").asks(names.GPU, 4).p,
		newAgreePod("hungry", "", "60").asks(names.GPUMemory, 10).p,
	}

	in := Input{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	objs := []runtime.Object{}
	for _, n := range []*corev1.Node{g1, g2, broken, cpuNode} {
		in.Nodes = append(in.Nodes, *n)
		objs = append(objs, n)
	}
	for _, p := range pods {
		in.Pods = append(in.Pods, *p)
		objs = append(objs, p)
	}
	o := DefaultOptions()
	c := Build(in, o)

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	cache, led := startExtenderCache(ctx, t, o, objs...)

	// The same ledger.
	want, got := led.Snapshot(), c.snap
	if !slices.Equal(want.Names(), got.Names()) {
		t.Fatalf("nodes: kubectl-rota %v, extender %v", got.Names(), want.Names())
	}
	for _, name := range want.Names() {
		if d := cmp.Diff(want.Node(name), got.Node(name), cmpopts.IgnoreUnexported(ledger.NodeInfo{}),
			cmpopts.IgnoreFields(ledger.Allocation{}, "Ends", "EndsEstimated")); d != "" {
			t.Errorf("node %s (-extender +kubectl-rota):\n%s", name, d)
		}
	}
	// The numbers the fixture was built for, so the comparison is not of
	// two empty ledgers: g1 holds train, infer-a, infer-b and web; g2 the
	// gang, foreign's and batch's CPU.
	if ni := got.Node("g1"); ni == nil || ni.CPUMilli != 13000 || len(ni.Allocs) != 4 || ni.Node.CPUMilli != 64000 {
		t.Errorf("g1 = %+v; want 13 CPUs in use by 4 pods of 64", ni)
	}
	if ni := got.Node("g2"); ni == nil || ni.CPUMilli != 21500 || len(ni.Allocs) != 4 {
		t.Errorf("g2 = %+v; want 21.5 CPUs in use by 4 pods", ni)
	}
	if s := cache.Stats(); s != (state.Stats{InvalidTopology: 1, InvalidAssignment: 2, Unaccounted: 1}) {
		t.Errorf("extender stats = %+v; want 1 invalid topology, 2 invalid assignments, 1 unaccounted", s)
	}

	// kubectl-rota's reports read the GPU records alone, and fit by the
	// CPU the extender counts.
	if l, err := c.Ledger("g1"); err != nil || len(l.Entries) != 3 {
		t.Errorf("Ledger(g1) = %+v, %v; want the 3 GPU pods", l.Entries, err)
	}
	for _, nu := range c.TopNodes().Nodes {
		if want := map[string]int{"g1": 3, "g2": 2}[nu.Node]; nu.Pods != want {
			t.Errorf("TopNodes: %s has %d pods, want %d (GPU pods)", nu.Node, nu.Pods, want)
		}
	}
	if w, err := c.WhyPod("ns", "big"); err != nil || w.Fit == nil ||
		!slices.Contains(w.Fit.Hints, "on g2 the GPUs are held by ns/gang-0 (2 GPUs), ns/gang-1 (2 GPUs)") {
		t.Errorf("WhyPod(big) = %+v, %v; want g2's GPU holders named", w.Fit, err)
	}
	if w, err := c.WhyPod("ns", "web"); err != nil || w.Placed != nil {
		t.Errorf("WhyPod(web) placed = %+v, %v; want none (it holds no GPU)", w.Placed, err)
	}
	if w, err := c.WhyPod("ns", "hungry"); err != nil || w.Fit == nil || w.Fit.FitsNow {
		t.Errorf("WhyPod(hungry) = %+v, %v; want no fit (60 CPUs, g1 has 51 free)", w.Fit, err)
	}

	// The same problems, in the same words: "pod: message" pairs from the
	// extender's log and from kubectl-rota's node problems.
	problemMsgs := []string{podreq.KindInvalid.Message(), podreq.KindUnaccounted.Message(), podreq.KindWrongNode.Message()}
	var logged []string
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if !slices.Contains(problemMsgs, e.Message) {
			continue
		}
		pod := ""
		for i := 0; i+1 < len(e.WithKVList); i += 2 {
			if e.WithKVList[i] == "pod" {
				pod = fmt.Sprint(e.WithKVList[i+1])
			}
		}
		logged = append(logged, pod+": "+e.Message)
	}
	var reported []string
	for _, ps := range c.problems {
		for _, line := range ps {
			for _, m := range problemMsgs {
				if pod, ok := strings.CutPrefix(line, "pod "); ok && strings.Contains(pod, ": "+m) {
					pod, _, _ = strings.Cut(pod, ": ")
					reported = append(reported, pod+": "+m)
				}
			}
		}
	}
	slices.Sort(logged)
	slices.Sort(reported)
	wantPairs := []string{
		"ns/foreign: " + podreq.KindUnaccounted.Message(),
		"ns/invalid: " + podreq.KindInvalid.Message(),
		"ns/misdirected: " + podreq.KindWrongNode.Message(),
	}
	if d := cmp.Diff(wantPairs, reported); d != "" {
		t.Errorf("kubectl-rota problems (-want +got):\n%s", d)
	}
	if d := cmp.Diff(reported, logged); d != "" {
		t.Errorf("extender log vs kubectl-rota problems (-kubectl-rota +extender):\n%s", d)
	}
}

// startExtenderCache runs rota-extender's cache over a fake clientset
// holding objs until the test ends, and waits for its ledger to be rebuilt.
func startExtenderCache(ctx context.Context, t *testing.T, o Options, objs ...runtime.Object) (*state.Cache, *ledger.Ledger) {
	t.Helper()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	led := ledger.New()
	c, err := state.New(ctx, state.Options{Names: o.Names, Tiers: o.Tiers, Ledger: led,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !c.WaitReady(ctx) {
		t.Fatal("extender cache not ready")
	}
	return c, led
}
