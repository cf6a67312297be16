//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/invariant"
	"github.com/rota-sched/rota/test/kueue"
)

// TestBesideKueue runs the real Kueue controller manager (built by make
// kueue at the pinned version) beside Rota, in a namespace labelled
// example.com/queueing=kueue. Kueue queues and admits; Rota places:
//
//   - an Indexed Job of 2 pods x 8 GPUs (a gang by its shape) waits
//     suspended while a blocker holds half the ClusterQueue's GPUs; once
//     Kueue admits it, it runs whole in one leaf, the one with two nodes;
//   - two Jobs of memory-share pods, together over the ClusterQueue's GPU
//     memory quota: Kueue admits one (unsuspends it) and keeps the other
//     suspended until the first completes; Rota places both on shares;
//   - a plain pod Kueue manages is held by Kueue's gate while its quota is
//     used, and kubectl rota why says so; it runs once the gang is done;
//   - Rota never gates a pod of the namespace, a namespace Kueue does not
//     queue keeps Rota's queue, and the invariant checker finds nothing
//     wrong.
func TestBesideKueue(t *testing.T) {
	const name = "kueue"
	ctx, ns := setup(t, name, "", 6*time.Minute)
	queueing(ctx, t) // Rota's queue is on for the cluster; the namespace is Kueue's
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	m, err := kueue.Start(ctx, env.Cluster, kueue.Options{Root: root, Dir: t.TempDir(), Frameworks: []string{"batch/job", "pod"}})
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("stopping Kueue: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("starting Kueue %s (make kueue builds it): %v", kueue.Version, err)
	}
	t.Logf("Kueue %s ready in %s", kueue.Version, time.Since(began).Round(100*time.Millisecond))
	bin := buildKubectlRota(ctx, t)

	// The namespace is Kueue's: Rota's label, and Kueue's for plain pods.
	nsObj, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels[env.Names.QueueingLabel] = contract.QueueingKueue
	nsObj.Labels[kueue.ManagedNamespaceLabel] = "true"
	if _, err := env.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gatedByRota := followRotaGates(ctx, t, ns)

	// Leaf a: one node of 8 GPUs; leaf b: two. Only leaf b holds the gang.
	leaf := env.Names.Domain + "/leaf"
	spec := harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8}
	a, b := spec, spec
	a.Labels = map[string]string{leaf: "kq-a"}
	b.Labels = map[string]string{leaf: "kq-b"}
	nodes(ctx, t, name, "kq-a", 1, a)
	nodes(ctx, t, name, "kq-b", 2, b)
	sleeper := cluster.NewSleeper(env.Client, func(node string) bool { return env.GPUNode(node) != nil })
	if err := sleeper.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Kueue's objects, as docs/kueue.md gives them: GPUs and GPU memory
	// covered resources of one flavor; 16 GPUs and 40 GiB of shares.
	for _, o := range []struct {
		gvr     schema.GroupVersionResource
		ns, doc string
	}{
		{kueue.ResourceFlavors, "", fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {%s: %s}
`, ScenarioLabel, name)},
		{kueue.ClusterQueues, "", fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpus}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, %s, %s]
    flavors:
    - name: h100
      resources:
      - {name: cpu, nominalQuota: "64"}
      - {name: memory, nominalQuota: 256Gi}
      - {name: %s, nominalQuota: "16"}
      - {name: %s, nominalQuota: "40"}
`, env.Names.GPU, env.Names.GPUMemory, env.Names.GPU, env.Names.GPUMemory)},
		{kueue.LocalQueues, ns, "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: team}\nspec: {clusterQueue: gpus}\n"},
	} {
		if err := m.Create(ctx, o.gvr, o.ns, o.doc); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // the webhooks' namespace informers hear of the labels

	// A blocker takes 8 of the ClusterQueue's 16 GPUs; the gang (16) waits
	// suspended until it is done, then Kueue admits it whole and Rota
	// places it whole in leaf b.
	submitJob(ctx, t, kueueJob(ns, "blocker", 1, 6*time.Second, pod(ns, "", name).GPUs(8)))
	waitPods(ctx, t, ns, "the blocker running", func(p []corev1.Pod) bool { return len(runningOf(jobPods(p, "blocker"))) == 1 })
	gang := kueueJob(ns, "gang", 2, 12*time.Second, pod(ns, "", name).GPUs(8)) // a gang by its shape: Indexed, 2 of 2
	indexed := batchv1.IndexedCompletion
	gang.Spec.CompletionMode = &indexed
	submitJob(ctx, t, gang)
	time.Sleep(2 * time.Second) // Kueue has seen it
	if j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "gang", metav1.GetOptions{}); err != nil || j.Spec.Suspend == nil || !*j.Spec.Suspend {
		t.Fatalf("the gang is not held suspended by Kueue while the blocker holds half its quota: %v", err)
	}
	pods := waitPods(ctx, t, ns, "the gang running", func(p []corev1.Pod) bool { return len(runningOf(jobPods(p, "gang"))) == 2 })
	for _, p := range jobPods(pods, "gang") {
		if p.Labels[env.Names.GangLabel] != "gang" || p.Annotations[env.Names.GangSizeAnnotation] != "2" {
			t.Errorf("gang member %s: gang %q of %q; want the Job's gang, gang of 2", p.Name, p.Labels[env.Names.GangLabel], p.Annotations[env.Names.GangSizeAnnotation])
		}
		if l := leafOf(ctx, t, &p); l != "kq-b" {
			t.Errorf("gang member %s runs on %s in leaf %q; want leaf kq-b, the one that holds the whole gang", p.Name, p.Spec.NodeName, l)
		}
	}

	// A plain pod Kueue manages: its quota is used by the gang, so Kueue holds it.
	plain := pod(ns, "notebook", name).GPUs(4).Label("kueue.x-k8s.io/queue-name", "team").Obj()
	plain.Spec.Containers[0].Command = []string{"sleep", "3"}
	create(ctx, t, plain)
	waitPods(ctx, t, ns, "the plain pod held by Kueue", func(p []corev1.Pod) bool {
		n := byName(p, "notebook")
		return n != nil && slices.ContainsFunc(n.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == podreq.KueueAdmissionGate })
	})
	out, err := exec.CommandContext(ctx, bin, "why", "notebook", "-n", ns, "--kubeconfig", env.Cluster.Kubeconfig, "--color", "never").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl rota why notebook: %v\n%s", err, out)
	}
	t.Logf("kubectl rota why notebook:\n%s", out)
	for _, want := range []string{"held by Kueue (scheduling gate kueue.x-k8s.io/admission)", "Kueue's ClusterQueue is its quota"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl rota why notebook does not say %q:\n%s", want, out)
		}
	}

	// Two Jobs of 2 shares of 20 GiB each: 80 GiB against Kueue's 40.
	submitJob(ctx, t, kueueJob(ns, "share-a", 2, 8*time.Second, pod(ns, "", name).Memory(20)))
	time.Sleep(1100 * time.Millisecond) // share-b is clearly younger
	submitJob(ctx, t, kueueJob(ns, "share-b", 2, 8*time.Second, pod(ns, "", name).Memory(20)))
	waitPods(ctx, t, ns, "share-a running while share-b waits suspended", func(p []corev1.Pod) bool {
		jb, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "share-b", metav1.GetOptions{})
		return err == nil && len(runningOf(jobPods(p, "share-a"))) == 2 && jb.Spec.Suspend != nil && *jb.Spec.Suspend && len(jobPods(p, "share-b")) == 0
	})
	for _, job := range []string{"blocker", "gang", "share-a", "share-b"} {
		waitJob(ctx, t, ns, job)
	}
	pods = waitPods(ctx, t, ns, "the plain pod done", func(p []corev1.Pod) bool {
		n := byName(p, "notebook")
		return n != nil && n.Status.Phase == corev1.PodSucceeded
	})

	// Rota placed the shares on shares (GPU memory, not whole GPUs).
	for _, p := range append(jobPods(pods, "share-a"), jobPods(pods, "share-b")...) {
		asg, err := env.Assignment(&p)
		if err != nil || asg == nil || asg.Whole || len(asg.GPUs) != 1 || asg.GPUs[0].MemoryMiB != 20*1024 {
			t.Errorf("pod %s: assignment %+v (%v); want a 20 GiB share of one GPU", p.Name, asg, err)
		}
	}
	// A namespace Kueue does not queue keeps Rota's queue in the same cluster.
	const other = "e2e-kueue-rota"
	if err := env.CreateNamespace(ctx, other, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.Client.CoreV1().Namespaces().Delete(cctx, other, metav1.DeleteOptions{}); err != nil {
			t.Logf("deleting namespace %s: %v", other, err)
		}
	})
	if created := create(ctx, t, pod(other, "queued", name).GPUs(1).Obj()); !gated(created) {
		t.Errorf("a GPU pod of namespace %s was created without Rota's gate %s: %v", other, env.Names.QueueGate, created.Spec.SchedulingGates)
	}
	waitPods(ctx, t, other, "Rota's queue admitting the pod of the other namespace", func(p []corev1.Pod) bool { return running(p, "queued") })
	if err := env.Client.CoreV1().Pods(other).Delete(ctx, "queued", deleteNow); err != nil {
		t.Fatal(err)
	}

	gatedByRota.mu.Lock()
	if len(gatedByRota.pods) > 0 {
		t.Errorf("Rota gated pods of Kueue's namespace: %v", gatedByRota.pods)
	}
	gatedByRota.mu.Unlock()
	vs, err := invariant.Check(ctx, env.Client, invariant.Options{Names: env.Names, Namespace: ns, Grants: env.Grants()})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) > 0 {
		t.Errorf("invariant violations:\n%s", invariant.Summary(vs))
	}
}

// kueueJob is a Job of n pods built from b that sleep for d, in Kueue's
// LocalQueue "team".
func kueueJob(ns, name string, n int32, d time.Duration, b *harness.PodBuilder) *batchv1.Job {
	tmpl := b.Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.Containers[0].Command = []string{"sleep", fmt.Sprint(int(d.Seconds()))}
	zero := int32(0)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": "team"}},
		Spec: batchv1.JobSpec{Parallelism: &n, Completions: &n, BackoffLimit: &zero,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels, Annotations: tmpl.Annotations}, Spec: tmpl.Spec}},
	}
}

func submitJob(ctx context.Context, t *testing.T, j *batchv1.Job) {
	t.Helper()
	if _, err := env.Client.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, j.Namespace, j.Name)
}

// waitJob waits for a Job to complete.
func waitJob(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	for {
		j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range j.Status.Conditions {
				if c.Status != corev1.ConditionTrue {
					continue
				}
				switch c.Type {
				case batchv1.JobComplete:
					return
				case batchv1.JobFailed:
					t.Fatalf("Job %s failed: %s: %s", name, c.Reason, c.Message)
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Job %s did not complete: %v (last: %+v)", name, ctx.Err(), j.Status)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func runningOf(pods []corev1.Pod) []corev1.Pod {
	return slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodRunning })
}

// rotaGates records the pods of a namespace ever seen carrying Rota's gate.
type rotaGates struct {
	mu   sync.Mutex
	pods []string
}

func followRotaGates(ctx context.Context, t *testing.T, ns string) *rotaGates {
	t.Helper()
	g := &rotaGates{}
	seen := map[types.UID]bool{}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	see := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && gated(p) {
			g.mu.Lock()
			if !seen[p.UID] {
				seen[p.UID] = true
				g.pods = append(g.pods, p.Name)
			}
			g.mu.Unlock()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return g
}
