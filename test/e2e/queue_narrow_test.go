//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// narrowedTo reads a pod's required node affinity as the queue writes it
// (one metadata.name term per node) and its admission record's narrowedTo.
func narrowedTo(t *testing.T, p *corev1.Pod) (affinity, record []string) {
	t.Helper()
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" {
					affinity = append(affinity, f.Values...)
				}
			}
		}
	}
	if data, ok := p.Annotations[env.Names.AdmissionAnnotation]; ok {
		rec, err := contract.ParseAdmission([]byte(data))
		if err != nil {
			t.Fatalf("pod %s: admission record: %v", p.Name, err)
		}
		record = rec.NarrowedTo
	}
	return affinity, record
}

func createJob(ctx context.Context, t *testing.T, ns, name string, parallelism int32, tmpl *corev1.Pod) {
	t.Helper()
	backoff := int32(4)
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: &parallelism, Completions: &parallelism, BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, name)
}

// TestQueueNarrowing: the queue narrows a Job's pod at admission to its
// held node and the next best (kube-scheduler then filters 3 of the 4
// nodes), and it binds on the held node; a bare pod is not narrowed. A
// Job's pod that kube-scheduler rules out on every candidate (a host port
// taken there) is evicted once its hold lapses, and the Job's replacement
// is queued, admitted and runs once the port is free.
func TestQueueNarrowing(t *testing.T) {
	const name = "qnarrow"
	ctx, ns := setup(t, name, "", 4*time.Minute) // an unknown team: unlimited
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	ns4 := nodes(ctx, t, name, name, 4, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	var nodeNames []string
	for _, n := range ns4 {
		nodeNames = append(nodeNames, n.Spec.Name)
	}

	createJob(ctx, t, ns, "fit", 2, pod(ns, "", name).GPUs(1).Obj())
	create(ctx, t, pod(ns, "bare", name).GPUs(1).Obj())
	pods := waitPods(ctx, t, ns, "the Job's 2 pods and the bare pod running", func(p []corev1.Pod) bool {
		jp := jobPods(p, "fit")
		return len(jp) == 2 && running(jp, jp[0].Name, jp[1].Name) && running(p, "bare")
	})
	for _, p := range jobPods(pods, "fit") {
		aff, rec := narrowedTo(t, &p)
		if len(aff) != 3 || !slices.Equal(aff, rec) {
			t.Errorf("Job pod %s: narrowed to %v (affinity), %v (admission record); want the same 3 nodes", p.Name, aff, rec)
			continue
		}
		if p.Spec.NodeName != rec[0] {
			t.Errorf("Job pod %s bound on %s, not its held node %s (narrowed to %v)", p.Name, p.Spec.NodeName, rec[0], rec)
		}
		t.Logf("%s: narrowed to %v, bound on %s", p.Name, rec, p.Spec.NodeName)
	}
	if aff, rec := narrowedTo(t, byName(pods, "bare")); aff != nil || rec != nil {
		t.Errorf("bare pod narrowed to %v (affinity), %v (record); a bare pod has nobody to recreate it and is not narrowed", aff, rec)
	}

	// Every node's host port 7777 is taken: kube-scheduler rules out each
	// candidate of a pod that asks for it (the ledger does not count host
	// ports, so its hold is on such a node).
	for _, n := range nodeNames {
		b := harness.Pod(ns, "port-"+n).Obj()
		b.Spec.NodeName = n
		b.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7777, HostPort: 7777}}
		create(ctx, t, b)
	}
	tmpl := pod(ns, "", name).GPUs(1).Obj()
	tmpl.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7777, HostPort: 7777}}
	began := time.Now()
	createJob(ctx, t, ns, "stuck", 1, tmpl)
	pods = waitPods(ctx, t, ns, "the stuck Job's pod admitted, narrowed and unschedulable", func(p []corev1.Pod) bool {
		jp := jobPods(p, "stuck")
		if len(jp) != 1 || gated(&jp[0]) {
			return false
		}
		for _, c := range jp[0].Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	first := jobPods(pods, "stuck")[0]
	if aff, rec := narrowedTo(t, &first); len(aff) != 3 || !slices.Equal(aff, rec) {
		t.Fatalf("stuck pod %s: narrowed to %v (affinity), %v (record); want 3 nodes", first.Name, aff, rec)
	}
	msg, _ := env.LastFailedScheduling(ctx, ns, first.Name)
	t.Logf("%s unschedulable on its candidates: %s", first.Name, msg)

	waitPods(ctx, t, ns, "the stuck pod evicted and replaced", func(p []corev1.Pod) bool {
		jp := jobPods(p, "stuck")
		return byName(p, first.Name) == nil && len(jp) == 1 && jp[0].UID != first.UID
	})
	requeuedAfter := time.Since(began)
	evs, err := env.PodEvents(ctx, ns, first.Name)
	if err != nil {
		t.Fatal(err)
	}
	var requeued string
	for _, ev := range evs {
		if ev.Reason == "Requeued" {
			requeued = ev.Message
		}
	}
	if !strings.Contains(requeued, "evicted so that its Job stuck creates it again") {
		t.Errorf("no Requeued event on %s saying why it was evicted (events: %v)", first.Name, evs)
	}
	t.Logf("%s: %s (%s after its Job was created)", first.Name, requeued, requeuedAfter.Round(time.Second))

	// The port frees up: the replacement, queued like any new pod, runs.
	for _, n := range nodeNames {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "port-"+n, deleteNow); err != nil {
			t.Fatal(err)
		}
	}
	pods = waitPods(ctx, t, ns, "the replacement running", func(p []corev1.Pod) bool {
		jp := jobPods(p, "stuck")
		return len(jp) == 1 && jp[0].UID != first.UID && jp[0].Status.Phase == corev1.PodRunning
	})
	repl := jobPods(pods, "stuck")[0]
	note(name, "Job pods narrowed to 3 of 4 nodes, bound on the held one; bare pod not narrowed; a pod no candidate took requeued %s after creation, its replacement %s running",
		requeuedAfter.Round(time.Second), repl.Name)
	checkInvariants(ctx, t, nil)
}
