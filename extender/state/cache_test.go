package state

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/topology"
)

var names = contract.Default

func gpuNode() (*corev1.Node, *topology.Node) {
	n := topology.FromSpec(topology.Spec{Name: "n", Model: "H100", Count: 2, MemoryMiB: 80 * 1024})
	data, _ := n.Document().Marshal()
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{names.TopologyAnnotation: string(data)}}}, n
}

func boundPod(n *topology.Node) *corev1.Pod {
	as := contract.Assignment{Version: contract.Version, Node: "n",
		GPUs: []contract.AssignedGPU{{Index: 1, UUID: n.GPUs[1].UUID, MemoryMiB: 8192}}}
	data, _ := as.Marshal()
	q := resource.MustParse("8")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p", ResourceVersion: "7",
			Labels:        map[string]string{"app": "x", names.PreemptibleLabel: "false"},
			Annotations:   map[string]string{names.AssignmentAnnotation: string(data), "other": "y"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{
			{Name: "side", Image: "i", Env: []corev1.EnvVar{{Name: "A"}}},
			{Name: "main", Image: "i", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(names.GPUMemory): q, corev1.ResourceCPU: q},
				Requests: corev1.ResourceList{corev1.ResourceName(names.GPUMemory): q, corev1.ResourceCPU: q,
					corev1.ResourceMemory: resource.MustParse("32Gi")}}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
}

func TestPodTransformKeepsWhatPodreqReads(t *testing.T) {
	_, n := gpuNode()
	full := boundPod(n)
	obj, err := PodTransform(names)(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	trim := obj.(*corev1.Pod)
	wantReq, err1 := podreq.FromPod(full, podreq.Options{Names: names})
	gotReq, err2 := podreq.FromPod(trim, podreq.Options{Names: names})
	if err1 != nil || err2 != nil || !reflect.DeepEqual(wantReq, gotReq) {
		t.Errorf("FromPod(trimmed) = %+v, %v; want %+v, %v", gotReq, err2, wantReq, err1)
	}
	as, _ := podreq.Assignment(full, names)
	if a, b := podreq.ToAllocation(full, *as, names), podreq.ToAllocation(trim, *as, names); !reflect.DeepEqual(a, b) {
		t.Errorf("ToAllocation(trimmed) = %+v, want %+v", b, a)
	}
	if trim.ManagedFields != nil || trim.Labels["app"] != "" || trim.Annotations["other"] != "" ||
		len(trim.Spec.Containers) != 1 || trim.Status.PodIP != "" || trim.ResourceVersion != "7" {
		t.Errorf("transform kept too much or too little: %+v", trim)
	}
}

// The queue finds a gated pod's Job or JobSet queued suspended by their
// controllers' labels on the trimmed pod.
func TestPodTransformKeepsOwnerLabels(t *testing.T) {
	_, n := gpuNode()
	full := boundPod(n)
	full.Labels[batchv1.ControllerUidLabel] = "job-uid"
	full.Labels[podreq.JobSetUIDLabel] = "jobset-uid"
	obj, err := PodTransform(names)(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	trim := obj.(*corev1.Pod)
	if podreq.JobControllerUID(trim) != "job-uid" || podreq.JobSetControllerUID(trim) != "jobset-uid" {
		t.Errorf("trimmed pod's labels %v: the Job's and JobSet's UIDs are lost", trim.Labels)
	}
}

// What a stop costs reads the same from a trimmed pod: the checkpoint and
// minimum runtime declarations and the current run's start.
func TestPodTransformKeepsStopFacts(t *testing.T) {
	_, n := gpuNode()
	full := boundPod(n)
	start := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	full.Annotations[names.CheckpointIntervalAnnotation] = "20m"
	full.Annotations[names.LastCheckpointAnnotation] = "2026-12-06T09:00:00Z"
	full.Annotations[names.MinRuntimeAnnotation] = "10m"
	full.Status.StartTime = &metav1.Time{Time: start}
	full.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: 3, State: corev1.ContainerState{
		Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: start.Add(time.Hour)}}}}}
	obj, err := PodTransform(names)(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	want, err1 := podreq.StopFacts(full, names)
	got, err2 := podreq.StopFacts(obj.(*corev1.Pod), names)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(want, got) || !got.Started.Equal(start.Add(time.Hour)) {
		t.Errorf("StopFacts(trimmed) = %+v, %v; want %+v, %v", got, err2, want, err1)
	}
}

// TestPodTransformSharesContainers: pods whose containers ask the same
// share one trimmed container list; a pod asking differently (another
// quantity, another container name) gets its own, with its own values.
func TestPodTransformSharesContainers(t *testing.T) {
	_, n := gpuNode()
	transform := PodTransform(names)
	trim := func(mutate func(*corev1.Pod)) *corev1.Pod {
		t.Helper()
		p := boundPod(n)
		mutate(p)
		obj, err := transform(p)
		if err != nil {
			t.Fatal(err)
		}
		return obj.(*corev1.Pod)
	}
	a := trim(func(*corev1.Pod) {})
	b := trim(func(p *corev1.Pod) { p.Name, p.UID = "q", "uid-q" })
	if &a.Spec.Containers[0] != &b.Spec.Containers[0] {
		t.Error("two pods asking the same keep two trimmed container lists")
	}
	more := trim(func(p *corev1.Pod) {
		p.Spec.Containers[1].Resources.Limits[corev1.ResourceName(names.GPUMemory)] = resource.MustParse("9")
	})
	renamed := trim(func(p *corev1.Pod) { p.Spec.Containers[1].Name = "trainer" })
	for _, p := range []*corev1.Pod{more, renamed} {
		if &p.Spec.Containers[0] == &a.Spec.Containers[0] {
			t.Errorf("pod asking %+v shares the list of a pod asking %+v", p.Spec.Containers, a.Spec.Containers)
		}
	}
	if got := more.Spec.Containers[0].Resources.Limits[corev1.ResourceName(names.GPUMemory)]; got.Value() != 9 {
		t.Errorf("memory limit %v, want 9", got.String())
	}
	if got := renamed.Spec.Containers[0].Name; got != "trainer" {
		t.Errorf("container %q, want trainer", got)
	}
	if a.Spec.Containers[0].Name != "main" || len(a.Spec.Containers) != 1 {
		t.Errorf("shared list changed: %+v", a.Spec.Containers)
	}
}

// TestPodTransformKeepsSchedulerReason: an unbound pod keeps
// kube-scheduler's PodScheduled=False condition (the status page shows it
// for pods the extender never saw); a bound pod keeps no condition.
func TestPodTransformKeepsSchedulerReason(t *testing.T) {
	_, n := gpuNode()
	cond := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/3 nodes are available: 3 Insufficient cpu."}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: "not this one"}
	for _, tc := range []struct {
		name      string
		nodeName  string
		wantConds []corev1.PodCondition
	}{
		{name: "unbound", wantConds: []corev1.PodCondition{cond}},
		{name: "bound", nodeName: "n1", wantConds: nil},
	} {
		p := boundPod(n)
		p.Spec.NodeName = tc.nodeName
		p.Status.Conditions = []corev1.PodCondition{ready, cond}
		obj, err := PodTransform(names)(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.(*corev1.Pod).Status.Conditions; !reflect.DeepEqual(got, tc.wantConds) {
			t.Errorf("%s: conditions %+v, want %+v", tc.name, got, tc.wantConds)
		}
	}
}

func TestDeletedFinalStateUnknownReleases(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeObj, n := gpuNode()
	p := boundPod(n)
	c, led, _, released := startCache(ctx, t, nodeObj, p)
	if _, ok := led.Get("uid-p"); !ok {
		t.Fatal("bound pod not restored")
	}
	c.podDeleted(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: p})
	if _, ok := led.Get("uid-p"); ok {
		t.Error("tombstoned pod still holds GPUs")
	}
	if rs := released(); len(rs) != 1 || rs[0].PodUID != "uid-p" {
		t.Errorf("OnRelease saw %+v", rs)
	}
	c.podDeleted(cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: "garbage"}) // never panics
	c.nodeDeleted(cache.DeletedFinalStateUnknown{Key: "n", Obj: nodeObj})
	if led.Snapshot().Node("n") != nil {
		t.Error("tombstoned node still in the ledger")
	}
}

// A GPU pod that ends Failed is reported once with its node (the watch of
// non-terminal pods shows the turn as a delete of the Failed pod), and
// pending GPU pods are counted with the age of the oldest.
func TestFailuresAndPending(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeObj, n := gpuNode()
	running := boundPod(n)
	waiting := boundPod(n)
	waiting.Name, waiting.UID, waiting.Spec.NodeName = "w", "uid-w", ""
	delete(waiting.Annotations, names.AssignmentAnnotation)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	waiting.CreationTimestamp = metav1.NewTime(created)
	client := fake.NewSimpleClientset(nodeObj, running, waiting)
	factory := informers.NewSharedInformerFactory(client, 0)
	var failed []string
	c, err := New(ctx, Options{Names: names, Tiers: topology.DefaultLabels(names), Ledger: ledger.New(),
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer(),
		OnPodFailed: func(node string) { failed = append(failed, node) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	if !c.WaitReady(ctx) {
		t.Fatal("not ready")
	}
	if n, oldest := c.Pending(created.Add(90 * time.Second)); n != 1 || oldest != 90*time.Second {
		t.Errorf("Pending = %d, %s; want 1, 1m30s", n, oldest)
	}
	dead := running.DeepCopy()
	dead.Status.Phase = corev1.PodFailed
	c.podChanged(running, dead)
	c.podDeleted(dead) // the same turn seen again as a delete
	if len(failed) != 1 || failed[0] != "n" {
		t.Errorf("OnPodFailed saw %v; want [n] (once per pod)", failed)
	}
	c.podChanged(dead, dead) // no new turn
	if len(failed) != 1 {
		t.Errorf("an unchanged Failed pod was reported again: %v", failed)
	}
}

func cpuPod(name, node, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// The ledger counts every bound pod's CPU and host memory on GPU nodes
// (allocatable from the node's status): GPU pods with their GPUs, GPU-free
// pods on their own, also when their events come before the node's
// topology; GPU-free pods on nodes without GPUs are not kept; releasing a
// GPU-free pod reports no GPU release; a node that loses its topology drops
// its GPU-free pods and counts them again when it returns.
func TestCPUAccounting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeObj, n := gpuNode()
	nodeObj.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1Ti")}
	gpuPod := boundPod(n)
	early := cpuPod("early", "n", "10")
	elsewhere := cpuPod("elsewhere", "cpu-node", "30")
	_, led, client, released := startCache(ctx, t, gpuPod, early, elsewhere)
	if _, ok := led.Get("uid-early"); ok {
		t.Fatal("a GPU-free pod on a node the ledger does not know was kept")
	}
	// The node arrives after its pods.
	if _, err := client.CoreV1().Nodes().Create(ctx, nodeObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	used := func() (int64, contract.MiB) {
		ni := led.Snapshot().Node("n")
		if ni == nil {
			return -1, -1
		}
		return ni.CPUMilli, ni.HostMemoryMiB
	}
	waitFor(t, "the node's pods counted", func() bool { cpu, _ := used(); return cpu == 18000 })
	if cpu, mem := used(); cpu != 18000 || mem != 32*1024+1024 {
		t.Errorf("node use = %dm CPU, %v; want 18000m (8 + 10 cores), 33 GiB", cpu, mem)
	}
	if ni := led.Snapshot().Node("n"); ni.Node.CPUMilli != 96000 || ni.Node.HostMemoryMiB != 1024*1024 {
		t.Errorf("node allocatable = %dm, %v; want 96000m, 1 TiB", ni.Node.CPUMilli, ni.Node.HostMemoryMiB)
	}
	if _, ok := led.Get("uid-elsewhere"); ok {
		t.Error("a pod on a node without GPUs is in the ledger")
	}
	late := cpuPod("late", "n", "20")
	if _, err := client.CoreV1().Pods("ns").Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a later GPU-free pod counted", func() bool { cpu, _ := used(); return cpu == 38000 })
	if err := client.CoreV1().Pods("ns").Delete(ctx, "early", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a deleted GPU-free pod released", func() bool { cpu, _ := used(); return cpu == 28000 })
	if rs := released(); len(rs) != 0 {
		t.Errorf("a GPU-free pod's release was reported as a GPU release: %+v", rs)
	}
	// The topology goes and comes back: GPU-free pods are dropped, then counted again.
	bare := nodeObj.DeepCopy()
	bare.Annotations = nil
	if _, err := client.CoreV1().Nodes().Update(ctx, bare, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node forgotten", func() bool { _, ok := led.Get("uid-late"); return !ok && !led.HasNode("n") })
	if _, ok := led.Get("uid-p"); !ok {
		t.Error("the GPU pod's allocation was dropped with the node; it should wait as an orphan")
	}
	if _, err := client.CoreV1().Nodes().Update(ctx, nodeObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node's pods counted again", func() bool { cpu, _ := used(); return cpu == 28000 })
	if errs := led.Check(); len(errs) > 0 {
		t.Errorf("ledger check: %v", errs)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startCache runs a cache over a fake clientset holding objs until the test
// ends; released returns what OnRelease has seen so far.
func startCache(ctx context.Context, t *testing.T, objs ...runtime.Object) (c *Cache, led *ledger.Ledger,
	client *fake.Clientset, released func() []ledger.Allocation) {
	t.Helper()
	client = fake.NewSimpleClientset(objs...)
	factory := informers.NewSharedInformerFactory(client, 0)
	led = ledger.New()
	var mu sync.Mutex
	var seen []ledger.Allocation
	c, err := New(ctx, Options{Names: names, Tiers: topology.DefaultLabels(names), Ledger: led,
		Nodes: factory.Core().V1().Nodes().Informer(), Pods: factory.Core().V1().Pods().Informer(),
		OnRelease: func(as []ledger.Allocation) { mu.Lock(); seen = append(seen, as...); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	if !c.WaitReady(ctx) {
		t.Fatal("not ready")
	}
	return c, led, client, func() []ledger.Allocation { mu.Lock(); defer mu.Unlock(); return slices.Clone(seen) }
}

// TestPodTransformKeepsControllerOfUnboundPods: an unbound pod keeps its
// controller reference (the queue narrows and requeues only such pods) and
// no other owner; a bound pod keeps none.
func TestPodTransformKeepsControllerOfUnboundPods(t *testing.T) {
	_, n := gpuNode()
	yes := true
	ctrl := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "uid-train", Controller: &yes}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "uid-cm"}
	for _, tc := range []struct {
		name     string
		nodeName string
		owners   []metav1.OwnerReference
		want     []metav1.OwnerReference
	}{
		{name: "unbound, controlled", owners: []metav1.OwnerReference{other, ctrl}, want: []metav1.OwnerReference{ctrl}},
		{name: "unbound, no controller", owners: []metav1.OwnerReference{other}},
		{name: "bound", nodeName: "n1", owners: []metav1.OwnerReference{ctrl}},
	} {
		p := boundPod(n)
		p.Spec.NodeName, p.OwnerReferences = tc.nodeName, tc.owners
		obj, err := PodTransform(names)(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.(*corev1.Pod).OwnerReferences; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: owner references %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A bound pod's assignment changed, garbled or removed after the ledger
// committed its GPUs is not believed: the ledger keeps the committed GPUs
// (a pod asking for the node's free GPU still finds the one the pod holds
// taken), the change is counted and handed to OnForgedAssignment; the
// unchanged record is no problem.
func TestForgedAssignmentNotBelieved(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeObj, n := gpuNode()
	p := boundPod(n)
	c, led, _, _ := startCache(ctx, t, nodeObj, p)
	var told []string
	c.onForged = func(pod *corev1.Pod, msg string) { told = append(told, pod.Name+": "+msg) }
	c.podChanged(p, p)
	if s := c.Stats(); s.ForgedAssignment != 0 {
		t.Fatalf("an unchanged record counted as forged: %+v", s)
	}
	other := contract.Assignment{Version: contract.Version, Node: "n",
		GPUs: []contract.AssignedGPU{{Index: 0, UUID: n.GPUs[0].UUID, MemoryMiB: 8192}}}
	data, _ := other.Marshal()
	edits := map[string]func(*corev1.Pod){
		"other GPU": func(q *corev1.Pod) { q.Annotations[names.AssignmentAnnotation] = string(data) },
		"removed":   func(q *corev1.Pod) { delete(q.Annotations, names.AssignmentAnnotation) },
		"garbled":   func(q *corev1.Pod) { q.Annotations[names.AssignmentAnnotation] = "{" },
	}
	for _, name := range slices.Sorted(maps.Keys(edits)) {
		forged := p.DeepCopy()
		edits[name](forged)
		forged.ResourceVersion = "8"
		c.podChanged(p, forged)
		a, ok := led.Get("uid-p")
		if !ok || len(a.GPUs) != 1 || a.GPUs[0].UUID != n.GPUs[1].UUID {
			t.Errorf("%s: the ledger holds %+v for the pod; want the committed GPU %s", name, a.GPUs, n.GPUs[1].UUID)
		}
	}
	if s := c.Stats(); s.ForgedAssignment != 3 || len(told) != 3 {
		t.Errorf("forged records counted %d, reported %v; want 3 each", s.ForgedAssignment, told)
	}
}

// A node whose device plugin counts gpu-memory in another unit than the
// cluster takes no memory shares (a share there would get another amount
// of memory than quota charges), and is reported; a node with the
// cluster's unit takes them.
func TestNodeWithAnotherMemoryUnitTakesNoShares(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodeObj, _ := gpuNode() // 1 GiB units
	c, led, _, _ := startCache(ctx, t, nodeObj)
	var problems []string
	c.onNodeProblem = func(n *corev1.Node, reason, _ string) { problems = append(problems, n.Name+":"+reason) }
	if n := led.Snapshot().Node("n"); n == nil || n.Node.NoShares != "" {
		t.Fatalf("without a cluster unit the node is %+v; want it to take shares", n)
	}
	c.unitMiB = 512
	c.Reapply("n")
	n := led.Snapshot().Node("n")
	if n == nil || !strings.Contains(n.Node.NoShares, "512 MiB units") {
		t.Fatalf("node with 1 GiB units in a 512 MiB cluster: NoShares %q; want the units named", n.Node.NoShares)
	}
	if !slices.Equal(problems, []string{"n:MemoryUnitMismatch"}) || c.Stats().UnitMismatch != 1 {
		t.Errorf("reported %v, counted %d; want one MemoryUnitMismatch", problems, c.Stats().UnitMismatch)
	}
	c.unitMiB = 1024
	c.Reapply("n")
	if n := led.Snapshot().Node("n"); n.Node.NoShares != "" {
		t.Errorf("with the same unit the node still takes no shares: %q", n.Node.NoShares)
	}
}
