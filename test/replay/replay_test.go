//go:build replay

// Package replay runs the simulator's FGD protocol (pkg/sim, cmd/rota-sim)
// through the real kube-scheduler and rota-extender and compares the GPU
// allocation ratio at 100 % arrived demand with the simulator's.
//
//	make build k8s-tools
//	go test -tags replay -count=1 -timeout 60m -v ./test/replay \
//	    -args -policies=fragmentation-aware,binpack -seed=42
//
// Flags (after -args): -policies, -seed, -limit (first N arrivals; 0: all),
// -filter-best-only, -profile (SchedulerProfile; false: SchedulerConfig),
// -out (folder for the report and per-pod CSVs).
package replay

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/sim"
	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/e2e/harness"
)

var (
	flagPolicies = flag.String("policies", "fragmentation-aware,binpack", "policies to replay, comma-separated")
	flagSeed     = flag.Uint64("seed", 42, "arrival seed (pkg/sim.Arrivals)")
	flagLimit    = flag.Int("limit", 0, "replay only the first N arrivals (0: all)")
	flagBest     = flag.Bool("filter-best-only", true, "start rota-extender with --filter-best-only")
	flagProfile  = flag.Bool("profile", true, "use extender/config.SchedulerProfile (false: SchedulerConfig)")
	flagPercent  = flag.Int("percentage-of-nodes-to-score", 0, "the profile's percentageOfNodesToScore (0: kube-scheduler's adaptive default, the profile's own; 100: every node)")
	flagOut      = flag.String("out", "", "folder for report.md and <policy>.csv (empty: the test's temp folder)")
	flagPods     = flag.String("pods", "testdata/openb/openb_pod_list_default.csv", "pod list, relative to the repository root")
	flagNodes    = flag.String("nodes", "testdata/openb/openb_node_list_gpu_node.csv", "node list, relative to the repository root")
)

const namespace = "replay"

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatal("no go.mod above the working directory")
		}
	}
}

type readFile = os.File

func readList[T any](t *testing.T, path string, read func(*readFile) ([]T, error)) []T {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// outcome of one arrival on the real path.
type outcome struct {
	k     int
	pod   sim.Pod
	node  string // "" when unschedulable
	class string // how the decision compares with the engine's in the same state
	ties  int    // nodes sharing the engine's best score in that state
	wait  time.Duration
}

func TestReplay(t *testing.T) {
	root := repoRoot(t)
	nodes := readList(t, filepath.Join(root, *flagNodes), func(f *os.File) ([]sim.Node, error) { return sim.ReadNodes(f) })
	pods := readList(t, filepath.Join(root, *flagPods), func(f *os.File) ([]sim.Pod, error) { return sim.ReadPods(f) })
	var capMilli int64
	for _, n := range nodes {
		capMilli += int64(n.GPUs) * sim.MilliPerGPU
	}
	order := sim.Arrivals(pods, *flagSeed, sim.DefaultTune, capMilli)
	full := len(order)
	if *flagLimit > 0 && *flagLimit < len(order) {
		order = order[:*flagLimit]
	}
	work := sim.WorkloadOf(pods, sim.WorkloadOptions{})
	out := *flagOut
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes, %d GPUs; seed %d: %d arrivals (replaying %d)", len(nodes), capMilli/1000, *flagSeed, full, len(order))

	var report, details strings.Builder
	fmt.Fprintf(&report, "seed %d, %s, %d of %d arrivals, filter-best-only=%v, profile=%v\n\n",
		*flagSeed, filepath.Base(*flagPods), len(order), full, *flagBest, *flagProfile)
	fmt.Fprintf(&report, "| policy | sim.Run at 100%% | engine (reference) at 100%% | real path at 100%% | real - sim | engine after last | real after last | failed sim/real | wall | pods/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pol := range strings.Split(*flagPolicies, ",") {
		t.Run(pol, func(t *testing.T) {
			// The simulator itself, full run (the number rota-sim prints).
			p, err := sim.NewPolicy(pol, work, *flagSeed, nodes)
			if err != nil {
				t.Fatal(err)
			}
			res, err := sim.Run(sim.Config{Nodes: nodes, Pods: pods, Policy: p, Seed: *flagSeed, Metric: work})
			if err != nil {
				t.Fatal(err)
			}
			// The same loop here, on the (possibly shortened) order.
			ref := newEngine(nodes, p)
			refCurve := newCurve(capMilli)
			refNode := make([]string, len(order))
			refFailed := 0
			for k, pi := range order {
				r := pods[pi].Request("u" + strconv.Itoa(k))
				i, _, _ := best(ref.evaluate(r))
				if i >= 0 {
					if err := ref.commit(r, i); err != nil {
						t.Fatal(err)
					}
					refNode[k] = ref.names[i]
				} else {
					refFailed++
				}
				refCurve.add(pods[pi], i >= 0)
			}
			refAt, _ := refCurve.at(100)
			t.Logf("sim.Run at 100%%: %.2f; engine here: %.2f (failed %d)", res.At(100).Alloc, refAt, refFailed)

			began := time.Now()
			outs := replayReal(t, pol, nodes, pods, order)
			wall := time.Since(began)
			real := newCurve(capMilli)
			realFailed, sameNode := 0, 0
			classes := map[string]int{}
			for k, o := range outs {
				real.add(o.pod, o.node != "")
				if o.node == "" {
					realFailed++
				}
				if o.node == refNode[k] {
					sameNode++
				}
				classes[o.class]++
			}
			realAt, ok := real.at(100)
			if !ok {
				realAt = -1
			}
			simAt := res.At(100).Alloc
			if len(order) < full {
				simAt = -1 // not comparable on a prefix
			}
			t.Logf("real path at 100%%: %.2f, after last %.2f (engine %.2f); failed %d; same node as the reference %d/%d; %s",
				realAt, real.last(), refCurve.last(), realFailed, sameNode, len(outs), fmtClasses(classes))
			fmt.Fprintf(&report, "| %s | %.2f | %.2f | %.2f | %+.2f | %.2f | %.2f | %d/%d | %s | %.1f |\n", pol, simAt, refAt, realAt,
				realAt-simAt, refCurve.last(), real.last(), refFailed, realFailed, wall.Round(time.Second), float64(len(outs))/wall.Seconds())
			fmt.Fprintf(&details, "\n%s: same node as the reference %d/%d; decisions vs the engine in the real state: %s\n\n", pol, sameNode, len(outs), fmtClasses(classes))
			writeCSV(t, filepath.Join(out, pol+".csv"), outs, refNode)
		})
	}
	report.WriteString(details.String())
	if err := os.WriteFile(filepath.Join(out, "report.md"), []byte(report.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("report (%s):\n%s", filepath.Join(out, "report.md"), report.String())
}

func fmtClasses(m map[string]int) string {
	var parts []string
	for _, k := range []string{"best", "tie", "worse", "cpu-best", "cpu-tie", "cpu-worse", "failed-fits", "failed", "extra"} {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

func writeCSV(t *testing.T, path string, outs []outcome, ref []string) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"k", "pod", "cpu_milli", "num_gpu", "gpu_milli", "real_node", "reference_node", "class", "ties", "wait_ms"})
	for k, o := range outs {
		_ = w.Write([]string{strconv.Itoa(k), o.pod.Name, strconv.FormatInt(o.pod.CPUMilli, 10), strconv.Itoa(o.pod.GPUs),
			strconv.Itoa(o.pod.GPUMilli), o.node, ref[k], o.class, strconv.Itoa(o.ties), strconv.FormatInt(o.wait.Milliseconds(), 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}
}

// replayReal starts a control plane with Rota under policy, creates the
// node list, and submits the arrivals one at a time.
func replayReal(t *testing.T, policy string, nodes []sim.Node, pods []sim.Pod, order []int) []outcome {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The extender keeps room for the trace's own pod shapes, as the
	// simulator and the mirror do (sim.WorkloadOf).
	workload, err := json.Marshal(sim.WorkloadOf(pods, sim.WorkloadOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	workloadFile := filepath.Join(t.TempDir(), "workload.json")
	if err := os.WriteFile(workloadFile, workload, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--policy=" + policy, "--workload-file=" + workloadFile, "--v=1"}
	if *flagBest {
		args = append(args, "--filter-best-only")
	}
	opts := harness.Options{ExtenderArgs: args, Logf: t.Logf}
	const url = "http://rota-extender.invalid" // the harness puts the real URL in
	if *flagProfile {
		opts.SchedulerConfig = extconfig.SchedulerProfile(url, "{{.Kubeconfig}}", extconfig.WithPercentageOfNodesToScore(int32(*flagPercent)))
	} else {
		opts.SchedulerConfig = extconfig.SchedulerConfig(url, "{{.Kubeconfig}}")
	}
	env, err := harness.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("logs in %s\n%s", env.Dir, env.LogTails(30))
		}
		if err := env.Stop(); err != nil {
			t.Log(err)
		}
	}()
	// The webhook's checks assume the cluster's 1 GiB memory unit; the
	// replay's GPUs are 1000 units of 1 MiB, and quota is unlimited anyway.
	if err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, harness.WebhookName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	createNodes(ctx, t, env, nodes)
	t.Logf("%d nodes created in %s", len(nodes), time.Since(began).Round(time.Second))
	if err := env.CreateNamespace(ctx, namespace, ""); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(ctx, t, env)

	// The mirror: the engine with every real placement applied, to judge
	// each real decision in the state the real path was in.
	pol, err := sim.NewPolicy(policy, sim.WorkloadOf(pods, sim.WorkloadOptions{}), *flagSeed, nodes)
	if err != nil {
		t.Fatal(err)
	}
	mirror := newEngine(nodes, pol)
	outs := make([]outcome, 0, len(order))
	tick := time.Now()
	for k, pi := range order {
		sp := pods[pi]
		r := sp.Request("u" + strconv.Itoa(k))
		r.Pod = sp.Name
		es := mirror.evaluate(r)
		bi, bscore, ties := best(es)

		name := fmt.Sprintf("p%05d", k)
		start := time.Now()
		ch := w.expect(name)
		if _, err := env.Client.CoreV1().Pods(namespace).Create(ctx, podFor(env, name, sp), metav1.CreateOptions{}); err != nil {
			t.Fatalf("arrival %d: %v", k, err)
		}
		var node string
		select {
		case node = <-ch:
		case <-time.After(2 * time.Minute):
			t.Fatalf("arrival %d (%s): neither bound nor unschedulable after 2m\n%s", k, name, env.LogTails(20))
		}
		o := outcome{k: k, pod: sp, node: node, ties: ties, wait: time.Since(start)}
		gpu := sp.GPUs > 0
		switch {
		case node == "" && bi >= 0:
			o.class = "failed-fits"
		case node == "":
			o.class = "failed"
		case bi < 0:
			o.class = "extra"
		default:
			ri := mirror.index(node)
			switch {
			case ri < 0 || !es[ri].ok:
				t.Fatalf("arrival %d: real node %s does not fit in the mirror", k, node)
			case es[ri].score < bscore:
				o.class = "worse"
			case ri == bi:
				o.class = "best"
			default:
				o.class = "tie"
			}
			if !gpu {
				o.class = "cpu-" + o.class
			}
			if err := mirror.commit(r, ri); err != nil {
				t.Fatalf("arrival %d: mirror: %v", k, err)
			}
		}
		if node == "" {
			// The protocol: a pod that does not fit fails for good.
			grace := int64(0)
			if err := env.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		outs = append(outs, o)
		if time.Since(tick) > 30*time.Second || k == len(order)-1 {
			tick = time.Now()
			t.Logf("%s: %d/%d arrivals", policy, k+1, len(order))
		}
	}
	return outs
}

// createNodes registers the node list as simulated nodes with Rota's
// topology annotation: each GPU 1000 MiB with a 1 MiB memory unit, as in
// the simulator, so gpu_milli is the number of gpu-memory units.
func createNodes(ctx context.Context, t *testing.T, env *harness.Env, nodes []sim.Node) {
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	work := make(chan sim.Node)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				errs <- createNode(ctx, env, n)
			}
		}()
	}
	for _, n := range nodes {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler and the extender watch nodes; give them a moment.
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := env.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) >= len(nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes not listed: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
}

func createNode(ctx context.Context, env *harness.Env, n sim.Node) error {
	topo := topology.FromSpec(topology.Spec{Name: n.Name, Model: n.Model, Count: n.GPUs,
		MemoryMiB: sim.GPUMemoryMiB, UnitMiB: sim.UnitMiB})
	capacity := map[string]string{
		string(corev1.ResourceCPU):    strconv.FormatInt(n.CPUMilli, 10) + "m",
		string(corev1.ResourceMemory): strconv.FormatInt(int64(n.HostMemoryMiB), 10) + "Mi",
		string(corev1.ResourcePods):   "10000",
		env.Names.GPU:                 strconv.Itoa(n.GPUs),
		env.Names.GPUMemory:           strconv.Itoa(n.GPUs * int(sim.GPUMemoryMiB/sim.UnitMiB)),
	}
	if _, err := env.Cluster.CreateNode(ctx, n.Name, nil, capacity); err != nil {
		return err
	}
	data, err := topo.Document().Marshal()
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, env.Names.TopologyAnnotation, string(data))
	_, err = env.Client.CoreV1().Nodes().Patch(ctx, n.Name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
	return err
}

// podFor is the pod of one arrival: CPU and host memory as requests, whole
// GPUs as <domain>/gpu, a share as gpu_milli units of <domain>/gpu-memory.
func podFor(env *harness.Env, name string, p sim.Pod) *corev1.Pod {
	res := corev1.ResourceList{}
	if p.CPUMilli > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI)
	}
	if p.HostMemoryMiB > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(int64(p.HostMemoryMiB)<<20, resource.BinarySI)
	}
	switch {
	case p.GPUs == 0:
	case p.GPUMilli >= sim.MilliPerGPU:
		res[corev1.ResourceName(env.Names.GPU)] = *resource.NewQuantity(int64(p.GPUs), resource.DecimalSI)
	default:
		res[corev1.ResourceName(env.Names.GPUMemory)] = *resource.NewQuantity(int64(p.GPUMilli), resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"trace-pod": p.Name}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "rota.test/replay:1",
				Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// watcher reports, per pod name, the node it was bound to, or "" once the
// scheduler marks it unschedulable (PodScheduled=False).
type watcher struct {
	mu   sync.Mutex
	want map[string]chan string
}

func startWatcher(ctx context.Context, t *testing.T, env *harness.Env) *watcher {
	w := &watcher{want: map[string]chan string{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(namespace))
	inf := f.Core().V1().Pods().Informer()
	handle := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		var node string
		switch {
		case pod.Spec.NodeName != "":
			node = pod.Spec.NodeName
		case unschedulable(pod):
		default:
			return
		}
		w.mu.Lock()
		ch := w.want[pod.Name]
		delete(w.want, pod.Name)
		w.mu.Unlock()
		if ch != nil {
			ch <- node
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

// expect registers name before it is created.
func (w *watcher) expect(name string) <-chan string {
	ch := make(chan string, 1)
	w.mu.Lock()
	w.want[name] = ch
	w.mu.Unlock()
	return ch
}

func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}
