//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/jobset"
)

// admissionLog follows a namespace's pods through an informer (events in
// the API server's order) and records the order in which pods lose the
// queue gate and the most pods admitted at once (ungated, not finished,
// not being deleted: what the team's quota counts).
type admissionLog struct {
	mu       sync.Mutex
	admitted map[string]bool // pod name -> counts against the quota now
	order    []string        // pods in the order they were admitted
	seen     map[string]bool // pods admitted once
	most     int
}

func (l *admissionLog) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ungated := !gated(p)
	if ungated && !l.seen[p.Name] {
		l.seen[p.Name] = true
		l.order = append(l.order, p.Name)
	}
	l.admitted[p.Name] = ungated && p.DeletionTimestamp == nil && !podreq.Terminal(p)
	n := 0
	for _, a := range l.admitted {
		if a {
			n++
		}
	}
	l.most = max(l.most, n)
}

func (l *admissionLog) gone(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		l.mu.Lock()
		delete(l.admitted, p.Name)
		l.mu.Unlock()
	}
}

func (l *admissionLog) result() (order []string, most int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order), l.most
}

// followAdmissions starts an admissionLog on the namespace until the test ends.
func followAdmissions(ctx context.Context, t *testing.T, ns string) *admissionLog {
	t.Helper()
	l := &admissionLog{admitted: map[string]bool{}, seen: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: l.observe, UpdateFunc: func(_, obj any) { l.observe(obj) }, DeleteFunc: l.gone,
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the admission log's informer did not sync")
	}
	return l
}

// deleteJobAtEnd deletes Job name when the test ends. Background: the Job
// goes at once; its controller lets go of the pods, which setup's cleanup
// deletes.
func deleteJobAtEnd(t *testing.T, ns, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		if err := env.Client.BatchV1().Jobs(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Logf("deleting Job %s: %v", name, err)
		}
	})
}

// jobPods are the pods of Job job that are not being deleted.
func jobPods(pods []corev1.Pod, job string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Labels[batchv1.JobNameLabel] == job && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// TestQueueJob: a Job of 10 one-GPU pods in a team with quota for 2 is
// queued, not refused: the Job controller (kube-controller-manager's)
// creates all 10 pods gated, with no FailedCreate, and they run in queue
// order as room frees, never more than 2 admitted at once, until all 10
// complete. The queue orders them by the Job's creation, so a pod the
// controller recreates keeps the Job's place: it runs before a bare pod
// created before it (but after the Job).
func TestQueueJob(t *testing.T) {
	const name = "qjob"
	ctx, ns := setup(t, name, "qjob", 6*time.Minute) // qjob: 2 GPUs, no borrowing
	queueing(ctx, t)
	began := time.Now()
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-controller-manager (job controller) ready in %s", time.Since(began).Round(100*time.Millisecond))
	nodes(ctx, t, name, "qjob", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	log := followAdmissions(ctx, t, ns)

	// Two bare pods hold the team's quota while the Job is created, so that
	// every pod of the Job is queued before the first is admitted.
	create(ctx, t, pod(ns, "hold-0", name).GPUs(1).Obj())
	create(ctx, t, pod(ns, "hold-1", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "hold-0 and hold-1 running", func(p []corev1.Pod) bool { return running(p, "hold-0", "hold-1") })

	ten, backoff := int32(10), int32(3)
	tmpl := pod(ns, "", name).GPUs(1).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: &ten, Completions: &ten, BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "train")
	pods := waitPods(ctx, t, ns, "the Job's 10 pods queued", func(p []corev1.Pod) bool {
		jp := jobPods(p, "train")
		return len(jp) == 10 && !slices.ContainsFunc(jp, func(p corev1.Pod) bool { return !gated(&p) || queuedCondition(&p) == nil })
	})
	first := jobPods(pods, "train")[0]
	t.Logf("%s: %s", first.Name, queuedCondition(&first).Message)

	// A bare pod of the team, created at least a second after the Job (the
	// API's timestamps have a resolution of one second).
	time.Sleep(time.Until(job.CreationTimestamp.Add(1100 * time.Millisecond)))
	create(ctx, t, pod(ns, "late", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "late queued", func(p []corev1.Pod) bool {
		l := byName(p, "late")
		return l != nil && gated(l) && queuedCondition(l) != nil
	})

	// The controller replaces a deleted pod: the new one is younger than
	// late, but keeps the Job's place in the queue.
	victim := first.Name
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, victim, deleteNow); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	pods = waitPods(ctx, t, ns, "the deleted pod replaced", func(p []corev1.Pod) bool {
		jp := jobPods(p, "train")
		return len(jp) == 10 && byName(p, victim) == nil && !slices.ContainsFunc(jp, func(p corev1.Pod) bool { return !gated(&p) })
	})
	var replacement corev1.Pod
	for _, p := range jobPods(pods, "train") {
		if replacement.Name == "" || p.CreationTimestamp.After(replacement.CreationTimestamp.Time) {
			replacement = p
		}
	}
	lateCreated := byName(pods, "late").CreationTimestamp
	if !replacement.CreationTimestamp.After(lateCreated.Time) {
		t.Fatalf("replacement %s created %s, not after late (%s): the check below would prove nothing",
			replacement.Name, replacement.CreationTimestamp, lateCreated)
	}
	t.Logf("%s replaced by %s %s after the deletion", victim, replacement.Name, time.Since(deleted).Round(100*time.Millisecond))

	// Room frees: the pods run, two at a time, and end (there is no
	// kubelet: the test ends each running pod as its container would).
	released := time.Now()
	for _, h := range []string{"hold-0", "hold-1"} {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, h, deleteNow); err != nil {
			t.Fatal(err)
		}
	}
	finished := map[string]bool{}
	for {
		pods, err := env.Pods(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		for i := range pods {
			p := &pods[i]
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && !finished[p.Name] && !strings.HasPrefix(p.Name, "hold-") {
				if err := env.FinishPod(ctx, p, corev1.PodSucceeded); err != nil {
					t.Fatal(err)
				}
				finished[p.Name] = true
			}
		}
		j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, "train", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if j.Status.Succeeded == 10 && finished["late"] {
			job = j
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the Job: %d of 10 succeeded, late finished %v: %v\n%s", j.Status.Succeeded, finished["late"], ctx.Err(), describe(context.Background(), pods))
		case <-time.After(200 * time.Millisecond):
		}
	}
	took := time.Since(released)

	// The queue's order: the Job's pods by their creation (to the second,
	// then by name, the queue's tie-break), the replacement among them,
	// then late.
	pods, err = env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	done := jobPods(pods, "train")
	slices.SortFunc(done, func(a, b corev1.Pod) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var want []string
	for _, p := range done {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("Job pod %s ended %s, want Succeeded", p.Name, p.Status.Phase)
		}
		want = append(want, p.Name)
	}
	want = append(want, "late")
	order, most := log.result()
	order = slices.DeleteFunc(order, func(n string) bool { return strings.HasPrefix(n, "hold-") })
	// The queue's order holds across passes: along it, no pod was admitted
	// in a later pass (second) than one behind it. Pods admitted in one
	// pass share its time and reach the API server in no set order
	// (--queue-admit-concurrency), each with its room already held.
	var prev *contract.Admission
	for i, n := range want {
		adm, err := podreq.AdmissionOf(byName(pods, n), env.Names)
		if err != nil || adm == nil {
			t.Fatalf("%s has no admission record: %v", n, err)
		}
		if prev != nil && adm.AdmittedAt.Before(prev.AdmittedAt) {
			t.Errorf("%s (queue position %d) admitted at %s, before %s ahead of it (admitted %s); ungated in the order %v, want the Job's pods by creation, then late: %v",
				n, i+1, adm.AdmittedAt.Format(time.TimeOnly), want[i-1], prev.AdmittedAt.Format(time.TimeOnly), order, want)
		}
		prev = adm
	}
	if len(order) != len(want) {
		t.Errorf("ungated %v, want each of %v once", order, want)
	}
	if most != 2 {
		t.Errorf("at most %d pods of team qjob admitted at once, want 2 (its quota, reached)", most)
	}
	if job.Status.Succeeded != 10 || !slices.ContainsFunc(job.Status.Conditions, func(c batchv1.JobCondition) bool {
		return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
	}) {
		t.Errorf("Job status %+v, want 10 succeeded and Complete", job.Status)
	}

	evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.kind", "Job"), fields.OneTermEqualSelector("involvedObject.name", "train")).String()})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int32{}
	for _, e := range evs.Items {
		reasons[e.Reason] += max(e.Count, 1)
		if e.Reason == "FailedCreate" {
			t.Errorf("Job event FailedCreate: %s", e.Message)
		}
	}
	if reasons["SuccessfulCreate"] < 11 {
		t.Errorf("Job events %v, want at least 11 SuccessfulCreate (10 pods and the replacement)", reasons)
	}
	// The queue's Admitted events of the Job's pods are the Job's, one per
	// pass, naming the pods; the pods get none of their own.
	var admitted []string
	for _, e := range evs.Items {
		if e.Reason == "Admitted" && e.Source.Component == "rota-extender" {
			admitted = append(admitted, e.Message)
		}
	}
	for _, p := range done {
		if !slices.ContainsFunc(admitted, func(m string) bool {
			return strings.Contains(m, " "+p.Name+",") || strings.Contains(m, " "+p.Name+";")
		}) {
			t.Errorf("no Admitted event of Job train names %s: %q", p.Name, admitted)
		}
		own, err := env.PodEvents(ctx, ns, p.Name)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(own, func(e corev1.Event) bool { return e.Reason == "Admitted" }) {
			t.Errorf("Job pod %s has an Admitted event of its own; the Job's should name it", p.Name)
		}
	}
	waits := []string{}
	for _, n := range []string{want[0], replacement.Name, "late"} {
		p := byName(pods, n)
		if adm, err := podreq.AdmissionOf(p, env.Names); err == nil && adm != nil {
			waits = append(waits, fmt.Sprintf("%s %s", n, adm.QueuedFor))
		}
	}
	t.Logf("admission order %v; at most %d admitted; Job events %v; queued for: %s", order, most, reasons, strings.Join(waits, ", "))
	note(name, "10 Job pods + 1 bare, admitted in queue order 2 at a time, all done %s after room freed; 0 FailedCreate; replacement kept the Job's place",
		took.Round(100*time.Millisecond))
	checkInvariants(ctx, t, nil)
}

// jobSetCRD is a minimal CustomResourceDefinition of JobSet
// (jobset.x-k8s.io/v1alpha2): the scenario needs the API served, not the
// JobSet controller.
var jobSetCRD = minimalCRD("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

var jobSetsGVR = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}

// createServed installs crd (unless it is there) and creates obj in
// namespace ns once the API serves gvr; the object is deleted when the test
// ends.
func createServed(ctx context.Context, t *testing.T, crd *unstructured.Unstructured, gvr schema.GroupVersionResource, ns string,
	obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	res := dyn.Resource(gvr).Namespace(ns)
	for { // until the new API is served
		got, err := res.Create(ctx, obj, metav1.CreateOptions{})
		if err == nil {
			t.Cleanup(func() {
				cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := res.Delete(cctx, got.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Logf("deleting %s %s: %v", gvr.Resource, got.GetName(), err)
				}
			})
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("creating %s %s: %v", gvr.Resource, obj.GetName(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// minimalCRD is a CustomResourceDefinition that serves any object of a
// kind (no schema, no controller).
func minimalCRD(group, version, plural, kind string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// TestQueueJobSet: where the JobSet API is served (installed while
// rota-extender runs), a pod of a Job that a JobSet controls is as old as
// the JobSet: it runs before a bare pod created after the JobSet but before
// the Job (as a JobSet's recreated Jobs keep its place).
func TestQueueJobSet(t *testing.T) {
	const name = "qjobset"
	ctx, ns := setup(t, name, "qjob", 4*time.Minute) // qjob: 2 GPUs, no borrowing
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	nodes(ctx, t, name, "qjobset", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	js := createServed(ctx, t, jobSetCRD, jobSetsGVR, ns, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": map[string]any{"name": "suite"}}})

	create(ctx, t, pod(ns, "hold-0", name).GPUs(1).Obj())
	create(ctx, t, pod(ns, "hold-1", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "hold-0 and hold-1 running", func(p []corev1.Pod) bool { return running(p, "hold-0", "hold-1") })
	jsCreated := js.GetCreationTimestamp()
	time.Sleep(time.Until(jsCreated.Add(1100 * time.Millisecond)))
	create(ctx, t, pod(ns, "late", name).GPUs(1).Obj())
	time.Sleep(1100 * time.Millisecond) // the Job is younger than late by a clear margin

	one := int32(1)
	tmpl := pod(ns, "", name).GPUs(1).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	yes := true
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "suite-workers-0", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "suite", UID: js.GetUID(), Controller: &yes}}},
		Spec: batchv1.JobSpec{Parallelism: &one, Completions: &one, Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "suite-workers-0")
	// The queue learns of the JobSet API when it meets the Job's pod (it
	// asks discovery again at most every 10 s), then puts the pod first.
	began := time.Now()
	pods := waitPods(ctx, t, ns, "the JobSet's pod first in line", func(p []corev1.Pod) bool {
		jp := jobPods(p, "suite-workers-0")
		return len(jp) == 1 && gated(&jp[0]) && queuedCondition(&jp[0]) != nil &&
			strings.HasPrefix(queuedCondition(&jp[0]).Message, "position 1 of 2")
	})
	worker := jobPods(pods, "suite-workers-0")[0].Name
	t.Logf("%s first in line %s after its Job's creation: %s", worker, time.Since(began).Round(100*time.Millisecond),
		queuedCondition(&jobPods(pods, "suite-workers-0")[0]).Message)

	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "hold-0", deleteNow); err != nil {
		t.Fatal(err)
	}
	waitPods(ctx, t, ns, worker+" running, late queued", func(p []corev1.Pod) bool {
		return running(p, worker) && byName(p, "late") != nil && gated(byName(p, "late"))
	})
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "hold-1", deleteNow); err != nil {
		t.Fatal(err)
	}
	waitPods(ctx, t, ns, "late running", func(p []corev1.Pod) bool { return running(p, "late") })
	note(name, "a JobSet's Job's pod, queued by the JobSet's age, ran before an older bare pod")
	checkInvariants(ctx, t, nil)
}

// TestQueueIndexedJobGang: an Indexed Job with completions equal to
// parallelism, with no gang label of its own, is queued and admitted as a
// gang: the webhook names the gang on each pod as the Job controller
// creates it, the queue admits both pods in one pass, held in one tier,
// and the Job completes.
func TestQueueIndexedJobGang(t *testing.T) {
	const name = "qindexed"
	ctx, ns := setup(t, name, "", 4*time.Minute)
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	nodes(ctx, t, name, "qindexed", 2, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	sleeper := cluster.NewSleeper(env.Client, func(node string) bool { return env.GPUNode(node) != nil })
	if err := sleeper.Start(ctx); err != nil {
		t.Fatal(err)
	}
	tmpl := pod(ns, "", name).GPUs(4).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	tmpl.Spec.Containers[0].Command = []string{"sleep", "3"}
	two, zero := int32(2), int32(0)
	indexed := batchv1.IndexedCompletion
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "pretrain", Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: &two, Completions: &two, CompletionMode: &indexed, BackoffLimit: &zero,
			Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "pretrain")
	pods := waitPods(ctx, t, ns, "the Job's two pods admitted", func(p []corev1.Pod) bool {
		jp := jobPods(p, "pretrain")
		return len(jp) == 2 && !slices.ContainsFunc(jp, func(p corev1.Pod) bool { return gated(&p) })
	})
	for _, p := range jobPods(pods, "pretrain") {
		if p.Labels[env.Names.GangLabel] != "pretrain" || p.Annotations[env.Names.GangSizeAnnotation] != "2" {
			t.Errorf("pod %s: gang %q size %q; want gang pretrain of 2", p.Name, p.Labels[env.Names.GangLabel], p.Annotations[env.Names.GangSizeAnnotation])
		}
		adm, err := podreq.AdmissionOf(&p, env.Names)
		if err != nil || adm == nil || adm.Hold == nil || adm.Hold.Gang != ns+"/pretrain" {
			t.Errorf("pod %s: admission record %+v (%v); want a hold for gang %s/pretrain", p.Name, adm, err, ns)
		}
	}
	waitJob(ctx, t, ns, "pretrain")
}

// TestQueueJobSetGang: with the real JobSet controller, a JobSet whose
// replicated jobs start together and run every index at once is one gang
// of all its pods, across its Jobs: the JobSet controller makes its two
// Jobs and the Job controller their pods; the webhook reads the JobSet
// (through the dynamic client) and names the gang on each pod, and the
// queue admits the two pods together.
func TestQueueJobSetGang(t *testing.T) {
	const name = "qjsgang"
	ctx, ns := setup(t, name, "", 4*time.Minute)
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	startJobSet(ctx, t)
	nodes(ctx, t, name, "qjsgang", 2, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	createJobSet(ctx, t, ns, "llm", jobSetSpec(false, replicatedJob("workers", 2, 1, 4)))
	var jp []corev1.Pod
	waitPods(ctx, t, ns, "the JobSet's two pods running", func(p []corev1.Pod) bool {
		jp = jobSetPods(p, "llm")
		return len(runningOf(jp)) == 2
	})
	for _, p := range jp {
		if p.Labels[env.Names.GangLabel] != "llm" || p.Annotations[env.Names.GangSizeAnnotation] != "2" {
			t.Errorf("pod %s: gang %q size %q; want the JobSet's gang llm of 2", p.Name, p.Labels[env.Names.GangLabel], p.Annotations[env.Names.GangSizeAnnotation])
		}
		adm, err := podreq.AdmissionOf(&p, env.Names)
		if err != nil || adm == nil || adm.Hold == nil || adm.Hold.Gang != ns+"/llm" {
			t.Errorf("pod %s: admission record %+v (%v); want a hold for gang %s/llm", p.Name, adm, err, ns)
		}
	}
	note(name, "the real JobSet controller's two Jobs: their pods named one gang of 2 and admitted together")
}

// TestQueueJobSetInOrder: with the real JobSet controller, a JobSet that
// starts its replicated jobs in order (the workers' Jobs are made only once
// the driver's pods are ready) is not one gang, which would wait for ever
// for pods not yet made: the driver (one Job of 2 pods) and the workers
// (2 Jobs of one pod) are each a gang, admitted one after the other, and
// all four pods run.
func TestQueueJobSetInOrder(t *testing.T) {
	const name = "qjsorder"
	ctx, ns := setup(t, name, "", 4*time.Minute)
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	startJobSet(ctx, t)
	nodes(ctx, t, name, "qjsorder", 2, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	createJobSet(ctx, t, ns, "staged", jobSetSpec(true, replicatedJob("driver", 1, 2, 1), replicatedJob("workers", 2, 1, 2)))
	var jp []corev1.Pod
	waitPods(ctx, t, ns, "the JobSet's four pods running", func(p []corev1.Pod) bool {
		jp = jobSetPods(p, "staged")
		return len(runningOf(jp)) == 4
	})
	for _, p := range jp {
		rjob := p.Labels[podreq.ReplicatedJobLabel]
		if want := "staged-" + rjob; p.Labels[env.Names.GangLabel] != want || p.Annotations[env.Names.GangSizeAnnotation] != "2" {
			t.Errorf("pod %s (%s): gang %q size %q; want gang %s of 2", p.Name, rjob, p.Labels[env.Names.GangLabel],
				p.Annotations[env.Names.GangSizeAnnotation], want)
		}
	}
	checkInvariants(ctx, t, nil)
	note(name, "an in-order JobSet ran as two gangs of 2, its workers made after its driver ran")
}

// startJobSet runs the real JobSet controller manager (make jobset builds
// it) for the test.
func startJobSet(ctx context.Context, t *testing.T) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	m, err := jobset.Start(ctx, env.Cluster, jobset.Options{Root: root, Dir: t.TempDir()})
	t.Cleanup(func() {
		if err := m.Stop(); err != nil {
			t.Errorf("stopping the JobSet controller: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("starting the JobSet controller %s (make jobset builds it): %v", jobset.Version, err)
	}
	t.Logf("JobSet %s ready in %s", jobset.Version, time.Since(began).Round(100*time.Millisecond))
}

// replicatedJob is a JobSet's replicated job: replicas Indexed Jobs of
// parallelism pods, each asking for gpus GPUs.
func replicatedJob(name string, replicas, parallelism, gpus int64) map[string]any {
	gpuPod := map[string]any{"spec": map[string]any{"restartPolicy": "Never", "containers": []any{map[string]any{
		"name": "main", "image": "rota.test/train:1", "resources": map[string]any{"limits": map[string]any{env.Names.GPU: strconv.FormatInt(gpus, 10)}}}}}}
	job := map[string]any{"spec": map[string]any{"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
		"backoffLimit": int64(0), "template": gpuPod}}
	return map[string]any{"name": name, "replicas": replicas, "template": job}
}

// jobSetSpec is a JobSet's spec of the replicated jobs, started in order
// when inOrder.
func jobSetSpec(inOrder bool, rjobs ...map[string]any) map[string]any {
	spec := map[string]any{"replicatedJobs": []any{}}
	for _, r := range rjobs {
		spec["replicatedJobs"] = append(spec["replicatedJobs"].([]any), r)
	}
	if inOrder {
		spec["startupPolicy"] = map[string]any{"startupPolicyOrder": "InOrder"}
	}
	return spec
}

// createJobSet creates a JobSet (retrying while the JobSet webhooks warm
// up) and deletes it when the test ends.
func createJobSet(ctx context.Context, t *testing.T, ns, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	return createJobSetAs(ctx, t, adminDynamic(t), ns, name, spec)
}

// adminDynamic is a dynamic client of the control plane's admin.
func adminDynamic(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// createJobSetAs is createJobSet through the client dyn (a user's).
func createJobSetAs(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns, name string, spec map[string]any) *unstructured.Unstructured {
	t.Helper()
	res := dyn.Resource(jobset.JobSets).Namespace(ns)
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name}, "spec": spec}}
	var got *unstructured.Unstructured
	var last error
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, last = res.Create(ctx, obj, metav1.CreateOptions{})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("creating JobSet %s: %v (last answer: %v)", name, err, last)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		if err := adminDynamic(t).Resource(jobset.JobSets).Namespace(ns).Delete(cctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting JobSet %s: %v", name, err)
		}
	})
	return got
}

// jobSetPods are the pods of JobSet js that are not being deleted.
func jobSetPods(pods []corev1.Pod, js string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Labels["jobset.sigs.k8s.io/jobset-name"] == js && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// TestQueueLWSGang: a LeaderWorkerSet group whose leader and workers are
// created together is a gang of the group's size (the webhook reads the
// LeaderWorkerSet its pods' labels name; the test plays its controllers
// and creates the group's pods); one that starts its workers only once the
// leader is ready is no gang, so its leader is admitted alone rather than
// waiting for workers that come after it.
func TestQueueLWSGang(t *testing.T) {
	const name = "qlws"
	ctx, ns := setup(t, name, "", 4*time.Minute)
	queueing(ctx, t)
	nodes(ctx, t, name, "qlws", 3, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4}) // room for 3 pods of 4 GPUs
	lwsCRD := minimalCRD(podreq.LWSGroup, "v1", "leaderworkersets", "LeaderWorkerSet")
	lwsGVR := schema.GroupVersionResource{Group: podreq.LWSGroup, Version: "v1", Resource: "leaderworkersets"}
	for lws, policy := range map[string]string{"serve": "LeaderCreated", "lazy": "LeaderReady"} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": podreq.LWSGroup + "/v1", "kind": "LeaderWorkerSet",
			"metadata": map[string]any{"name": lws}, "spec": map[string]any{"startupPolicy": policy, "leaderWorkerTemplate": map[string]any{"size": int64(2),
				"workerTemplate": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c",
					"resources": map[string]any{"limits": map[string]any{env.Names.GPU: "4"}}}}}}}}}}
		createServed(ctx, t, lwsCRD, lwsGVR, ns, obj)
	}
	member := func(lws, podName string) *corev1.Pod {
		return pod(ns, podName, name).GPUs(4).Label(podreq.LWSNameLabel, lws).Label(podreq.LWSGroupIndexLabel, "0").Obj()
	}
	// serve's group: leader and worker, a gang of 2.
	create(ctx, t, member("serve", "serve-0"))
	create(ctx, t, member("serve", "serve-0-1"))
	pods := waitPods(ctx, t, ns, "serve's group running", func(p []corev1.Pod) bool { return running(p, "serve-0", "serve-0-1") })
	for _, n := range []string{"serve-0", "serve-0-1"} {
		p := byName(pods, n)
		if p.Labels[env.Names.GangLabel] != "serve-0" || p.Annotations[env.Names.GangSizeAnnotation] != "2" {
			t.Errorf("pod %s: gang %q size %q; want the group's gang serve-0 of 2", n, p.Labels[env.Names.GangLabel], p.Annotations[env.Names.GangSizeAnnotation])
		}
	}
	// lazy's leader alone: no gang, admitted and running without its worker.
	create(ctx, t, member("lazy", "lazy-0"))
	pods = waitPods(ctx, t, ns, "lazy's leader running alone", func(p []corev1.Pod) bool { return running(p, "lazy-0") })
	if g := byName(pods, "lazy-0").Labels[env.Names.GangLabel]; g != "" {
		t.Errorf("lazy's leader is in gang %q; a LeaderReady group is no gang", g)
	}
}
