//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueueSuspendedJobs: in a namespace labelled queueing=suspend, Jobs
// asking for GPUs are created suspended and wait as Jobs, with no pods.
// Team qsusp has quota for 2 GPUs: the first Job (an Indexed gang of two
// 1-GPU pods) is admitted by one patch (unsuspended, with its signed
// record), its pods come, are admitted through the Job's record and run;
// the second waits suspended and has no pod at all. A team member with
// ordinary edit rights cannot unsuspend it, write its record or remove its
// mark. When the first Job's pods succeed, the second is admitted and runs.
func TestQueueSuspendedJobs(t *testing.T) {
	const name = "qsusp"
	ctx, ns := suspendScenario(t, name, 6*time.Minute, 1, 4)
	alice := userClient(ctx, t, ns, "alice")
	tmpl := pod(ns, "", name).GPUs(1).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := func(jobName string, n int32, indexed bool) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: ns},
			Spec: batchv1.JobSpec{Parallelism: ptr.To(n), Completions: ptr.To(n), BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
		if indexed {
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		return j
	}
	first, err := alice.BatchV1().Jobs(ns).Create(ctx, job("first", 2, true), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "first")
	if !podreq.Suspended(first) || !podreq.QueuedJob(first, env.Names) {
		t.Fatalf("first created with suspend %v and annotations %v; want suspended and marked", first.Spec.Suspend, first.Annotations)
	}
	pods := waitPods(ctx, t, ns, "first's two pods running", func(p []corev1.Pod) bool {
		jp := jobPods(p, "first")
		return len(jp) == 2 && running(p, jp[0].Name, jp[1].Name)
	})
	for _, p := range jobPods(pods, "first") {
		adm, err := podreq.AdmissionOf(&p, env.Names)
		if err != nil || adm == nil || adm.Team != "qsusp" || !env.RecordsKey.VerifyAdmission(string(p.UID), *adm) {
			t.Errorf("%s: admission record %+v (%v); want one signed for the pod, team qsusp", p.Name, adm, err)
		}
	}
	first = getJobE2E(ctx, t, ns, "first")
	adm, forged := records().JobAdmission(first, env.Names)
	if adm == nil || forged != nil || adm.Team != "qsusp" {
		t.Fatalf("first's record %+v (unbelieved %+v); want one signed for the Job", adm, forged)
	}

	_, err = alice.BatchV1().Jobs(ns).Create(ctx, job("second", 1, false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "second")
	// The queue sees it and says so on the Job; it has no pod.
	waitEvent(ctx, t, ns, "second", "Queued")
	if ps := jobPods(mustPods(ctx, t, ns), "second"); len(ps) != 0 || !podreq.Suspended(getJobE2E(ctx, t, ns, "second")) {
		t.Fatalf("second, queued past quota, has %d pods (suspended %v); want none", len(ps), podreq.Suspended(getJobE2E(ctx, t, ns, "second")))
	}

	// Alice, with edit rights on Jobs, tries to start it herself.
	for _, tc := range []struct{ what, patch, want string }{
		{"unsuspend", `{"spec":{"suspend":false}}`, "only Rota's queue unsuspends it"},
		{"copy first's record", mergeAnnotation(env.Names.AdmissionAnnotation, first.Annotations[env.Names.AdmissionAnnotation]), "only rota-extender sets"},
		{"drop the mark", `{"metadata":{"annotations":{"` + env.Names.QueuedJobAnnotation + `":null}}}`, "only rota-extender changes or removes it"},
		{"write a reservation record", mergeAnnotation(env.Names.ReservationAnnotation, `{"version":1}`), "room the queue holds for the Job"},
	} {
		_, err := alice.BatchV1().Jobs(ns).Patch(ctx, "second", types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("alice's %s: got %v, want a refusal saying %q", tc.what, err, tc.want)
		}
	}
	if !podreq.Suspended(getJobE2E(ctx, t, ns, "second")) {
		t.Fatal("second was unsuspended by its owner")
	}

	// first's pods succeed; second is admitted and runs.
	for _, p := range jobPods(pods, "first") {
		if err := env.FinishPod(ctx, &p, corev1.PodSucceeded); err != nil {
			t.Fatal(err)
		}
	}
	waitPods(ctx, t, ns, "second's pod running", func(p []corev1.Pod) bool {
		jp := jobPods(p, "second")
		return len(jp) == 1 && running(p, jp[0].Name)
	})
	got := getJobE2E(ctx, t, ns, "second")
	if adm, _ := records().JobAdmission(got, env.Names); podreq.Suspended(got) || adm == nil {
		t.Errorf("second: suspended %v, record %+v; want admitted", podreq.Suspended(got), adm)
	}
	q := quotaConfig(t)
	checkInvariants(ctx, t, &q)
}

// records is what the extender believes: records signed with the Env's key.
func records() podreq.Records { return podreq.Records{Key: env.RecordsKey} }

func getJobE2E(ctx context.Context, t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	j, err := env.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func mustPods(ctx context.Context, t *testing.T, ns string) []corev1.Pod {
	t.Helper()
	pods, err := env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func mergeAnnotation(key, value string) string {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		panic(err)
	}
	return string(data)
}

// waitEvent waits for an event of reason on the object named name.
func waitEvent(ctx context.Context, t *testing.T, ns, name, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason {
				t.Logf("%s %s: %s", name, reason, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s: %v", reason, name, err)
	}
}

// TestQueueSuspendedJobsKill: Jobs queued suspended (4-pod Indexed gangs
// of one GPU and single pods of two) drain through team qskillj's quota of
// 8 GPUs while the extender is killed with SIGKILL as Jobs finish and the
// next are being admitted. After each round the invariant checker (which
// counts a running Job queued suspended for all its pods, made or not)
// finds admitted use within the quota and no gang partly bound; every Job
// succeeds.
func TestQueueSuspendedJobsKill(t *testing.T) {
	const name = "qskillj"
	ctx, ns := suspendScenario(t, name, 8*time.Minute, 2, 8)
	q := quotaConfig(t)
	tmpl := func(gpus int) corev1.PodTemplateSpec {
		p := pod(ns, "", name).GPUs(gpus).Obj()
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		return corev1.PodTemplateSpec{Spec: p.Spec}
	}
	var jobs []string
	for i := range 14 {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("j%02d", i), Namespace: ns},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](1), Completions: ptr.To[int32](1), BackoffLimit: ptr.To[int32](0), Template: tmpl(2)}}
		if i%2 == 0 {
			j.Spec.Parallelism, j.Spec.Completions, j.Spec.Template = ptr.To[int32](4), ptr.To[int32](4), tmpl(1)
			j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
		}
		got, err := env.Client.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !podreq.Suspended(got) {
			t.Fatalf("%s created unsuspended", j.Name)
		}
		jobs = append(jobs, j.Name)
		deleteJobAtEnd(t, ns, j.Name)
	}
	const pods = 7*4 + 7 // every pod of every Job, run once (backoffLimit 0)
	rounds, kills := drainWithKills(ctx, t, ns, &q, pods)
	// The Job controller counts the last pods' successes a moment later.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, j := range jobs {
			if got := getJobE2E(ctx, t, ns, j); got.Status.Succeeded != ptrValue(got.Spec.Completions) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("not every Job succeeded: %v", err)
	}
	checkInvariants(ctx, t, &q)
	note(name, "%d Jobs queued suspended (7 gangs of 4) ran in %d rounds with %d kill -9 of the extender; no invariant violation", len(jobs), rounds, kills)
}

// suspendScenario sets up a scenario of Jobs queued suspended: its
// namespace (team name) labelled to queue Jobs suspended, queueing on, the
// Job controller, and count nodes of gpus H100s.
func suspendScenario(t *testing.T, name string, limit time.Duration, count, gpus int) (context.Context, string) {
	t.Helper()
	ctx, ns := setup(t, name, name, limit)
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	nodes(ctx, t, name, name, count, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: gpus})
	suspendJobs(ctx, t, ns)
	return ctx, ns
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// suspendJobs labels namespace ns to queue its Jobs suspended and waits
// until rota-admission does so.
func suspendJobs(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	label := []byte(`{"metadata":{"labels":{"` + env.Names.QueueingLabel + `":"` + contract.QueueingSuspend + `"}}}`)
	if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: pod(ns, "", "probe").GPUs(1).Obj().Spec}}}
	probe.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	// The webhook's view learns the label from its informer.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := env.Client.BatchV1().Jobs(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && podreq.Suspended(got) && podreq.QueuedJob(got, env.Names), nil
	}); err != nil {
		t.Fatalf("Jobs in %s are not created suspended: %v", ns, err)
	}
}

// TestQueueSuspendedJobReclaimed: team qrsusp-b borrows the 4 GPUs of team
// qrsusp-g's guarantee with a Job queued suspended (an Indexed gang of 4).
// When qrsusp-g asks for 2, reclaim takes the Job back by suspending it,
// not by evicting its pods (evicted, the Job controller would make them
// again and the Job's record would admit them): its pods go, qrsusp-g's
// pod runs, and the Job, its record removed, waits in the queue again with
// no pods.
func TestQueueSuspendedJobReclaimed(t *testing.T) {
	const name = "qrsusp"
	ctx, nsG := setup(t, name, "qrsusp-g", 4*time.Minute)
	nsB := teamNamespace(ctx, t, "e2e-qrsusp-b", "qrsusp-b")
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	nodes(ctx, t, name, name, 1, harness.GPUNodeSpec{Model: "Rota SJob GPU", MemoryMiB: h100.MemoryMiB, Count: 4})
	suspendJobs(ctx, t, nsB)
	tmpl := pod(nsB, "", name).GPUs(1).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := env.Client.BatchV1().Jobs(nsB).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "borrowed", Namespace: nsB},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Completions: ptr.To[int32](4), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, nsB, "borrowed")
	waitPods(ctx, t, nsB, "the borrowed Job's 4 pods running", func(p []corev1.Pod) bool { return harness.Running(jobPods(p, "borrowed")) == 4 })

	created := time.Now()
	create(ctx, t, pod(nsG, "mine", name).GPUs(2).Obj())
	waitPods(ctx, t, nsG, "the guaranteed pod running", func(p []corev1.Pod) bool { return running(p, "mine") })
	took := time.Since(created)
	waitEvent(ctx, t, nsB, "borrowed", "Requeued")
	job := getJobE2E(ctx, t, nsB, "borrowed")
	if _, recorded := job.Annotations[env.Names.AdmissionAnnotation]; !podreq.Suspended(job) || recorded || !podreq.QueuedJob(job, env.Names) {
		t.Fatalf("the reclaimed Job: suspended %v, annotations %v; want suspended, marked, without a record", podreq.Suspended(job), job.Annotations)
	}
	if live := jobPods(mustPods(ctx, t, nsB), "borrowed"); len(live) != 0 {
		t.Errorf("the reclaimed Job still has %d pods", len(live))
	}
	evs, err := env.NamespaceEvents(ctx, nsB, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		t.Errorf("no Reclaimed event in %s", nsB)
	}
	note(name, "a borrowed Job queued suspended taken back by suspending it: creation to running %s", took.Round(100*time.Millisecond))
	q := quotaConfig(t)
	checkInvariants(ctx, t, &q)
}

// TestBackfillReservationSuspendedJob: a Job queued suspended that does
// not fit (an Indexed gang of two 8-GPU pods) gets room held as a gang of
// gated pods does: the reservation record is written on the Job (it has no
// pods) with a Reserved event, a long pod is refused the held GPUs, the
// hold survives kill -9 of the extender, and when the last blocking pod
// ends the Job is admitted into the held leaf, its record removed.
func TestBackfillReservationSuspendedJob(t *testing.T) {
	const name = "bfjob"
	ctx, ns := setup(t, name, "", 5*time.Minute) // unknown team: unlimited quota
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	leaf := env.Names.Domain + "/leaf"
	spec := harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8}
	a, b := spec, spec
	a.Labels = map[string]string{leaf: "bfj-a"}
	b.Labels = map[string]string{leaf: "bfj-b"}
	nodes(ctx, t, name, "bfj-a", 2, a)
	nodes(ctx, t, name, "bfj-b", 2, b)
	suspendJobs(ctx, t, ns)
	runtime := env.Names.MaxRuntimeAnnotation

	// Leaf a's pods declare 30 minutes, leaf b's 2 hours: leaf a frees first.
	var fillA, fillB []string
	for i := range 4 {
		fa, fb := fmt.Sprintf("fill-a%d", i), fmt.Sprintf("fill-b%d", i)
		create(ctx, t, pod(ns, fa, name).GPUs(4).NodeSelector(leaf, "bfj-a").Annotation(runtime, "30m").Obj())
		create(ctx, t, pod(ns, fb, name).GPUs(4).NodeSelector(leaf, "bfj-b").Annotation(runtime, "2h").Obj())
		fillA, fillB = append(fillA, fa), append(fillB, fb)
	}
	waitPods(ctx, t, ns, "the 8 small pods running", func(p []corev1.Pod) bool { return running(p, append(fillA, fillB...)...) })

	tmpl := pod(ns, "", name).GPUs(8).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	created, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "pretrain", Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](2), CompletionMode: ptr.To(batchv1.IndexedCompletion),
			BackoffLimit: ptr.To[int32](0), Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "pretrain")
	var rec *contract.Reservation
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rec = jobReservation(t, getJobE2E(ctx, t, ns, "pretrain"))
		return rec != nil, nil
	}); err != nil {
		t.Fatalf("no reservation record on the Job: %v", err)
	}
	if rec.Domain != "tier 0 bfj-a" || rec.Since.IsZero() {
		t.Fatalf("reservation record %+v, want leaf bfj-a held", rec)
	}
	waitEvent(ctx, t, ns, "pretrain", "Reserved")
	if ps := jobPods(mustPods(ctx, t, ns), "pretrain"); len(ps) != 0 {
		t.Fatalf("the Job queued suspended has %d pods while room is held for it", len(ps))
	}

	// Three of leaf a's four pods end: their GPUs are held, the fourth
	// blocks. A long pod younger than the Job is refused them.
	deletePods(ctx, t, ns, fillA[:3]...)
	time.Sleep(time.Until(created.CreationTimestamp.Add(1100 * time.Millisecond)))
	create(ctx, t, pod(ns, "long", name).GPUs(4).Annotation(runtime, "10h").Obj())
	pods := waitPods(ctx, t, ns, "the long pod refused the held GPUs", func(p []corev1.Pod) bool {
		l := byName(p, "long")
		return l != nil && gated(l) && conditionSays(l, "GPU held for", "past it")
	})
	t.Logf("long: %s", queuedCondition(byName(pods, "long")).Message)

	// kill -9 of the extender: the new run holds the same room, read from the Job.
	if err := env.KillExtender(); err != nil {
		t.Fatal(err)
	}
	if err := env.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few passes of the new leader
	if l := byName(mustPods(ctx, t, ns), "long"); !gated(l) {
		t.Fatalf("after the restart the long pod was admitted onto %s", l.Spec.NodeName)
	}
	if again := jobReservation(t, getJobE2E(ctx, t, ns, "pretrain")); again == nil || !again.Since.Equal(rec.Since) || again.Domain != rec.Domain {
		t.Fatalf("after the restart the Job's reservation record is %+v, want %+v", again, rec)
	}

	// The last blocking pod ends: the Job is admitted and runs in leaf a.
	deletePods(ctx, t, ns, fillA[3])
	pods = waitPods(ctx, t, ns, "the Job's pods running", func(p []corev1.Pod) bool { return harness.Running(jobPods(p, "pretrain")) == 2 })
	for _, p := range jobPods(pods, "pretrain") {
		if l := leafOf(ctx, t, &p); l != "bfj-a" {
			t.Errorf("pod %s runs in leaf %q, want the held leaf bfj-a", p.Name, l)
		}
	}
	if job := getJobE2E(ctx, t, ns, "pretrain"); jobReservation(t, job) != nil || podreq.Suspended(job) {
		t.Errorf("the admitted Job: suspended %v, reservation record %q; want unsuspended without one",
			podreq.Suspended(job), job.Annotations[env.Names.ReservationAnnotation])
	}
	if l := byName(pods, "long"); !gated(l) {
		t.Errorf("the long pod was admitted onto %s while leaf b is full", l.Spec.NodeName)
	}
	checkInvariants(ctx, t, nil)
	note(name, "a Job queued suspended held leaf bfj-a by a record on the Job, refused a 10h pod, kept it through kill -9, and started there")
}

// jobReservation reads a Job's reservation record (nil: none).
func jobReservation(t *testing.T, job *batchv1.Job) *contract.Reservation {
	t.Helper()
	v, ok := job.Annotations[env.Names.ReservationAnnotation]
	if !ok {
		return nil
	}
	r, err := contract.ParseReservation([]byte(v))
	if err != nil {
		t.Fatalf("Job %s: reservation record %q: %v", job.Name, v, err)
	}
	return &r
}

// TestQueueSuspendedJobLastWave: team qwave (quota 2 GPUs) runs a Job
// queued suspended of parallelism 2 and 3 completions, one GPU a pod. When
// its first two pods succeed the Job controller runs one pod for the last
// completion; the Job is then charged for that one, and a second Job of
// one GPU is admitted beside it (charged at its parallelism, the first
// would keep the team's whole quota until it ended).
func TestQueueSuspendedJobLastWave(t *testing.T) {
	const name = "qwave"
	ctx, ns := suspendScenario(t, name, 4*time.Minute, 1, 4)
	tmpl := pod(ns, "", name).GPUs(1).Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	job := func(jobName string, parallelism, completions int32) {
		t.Helper()
		if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: ns},
			Spec: batchv1.JobSpec{Parallelism: ptr.To(parallelism), Completions: ptr.To(completions), BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deleteJobAtEnd(t, ns, jobName)
	}
	job("waves", 2, 3)
	pods := waitPods(ctx, t, ns, "the first wave running", func(p []corev1.Pod) bool { return harness.Running(jobPods(p, "waves")) == 2 })
	for _, p := range jobPods(pods, "waves") {
		if err := env.FinishPod(ctx, &p, corev1.PodSucceeded); err != nil {
			t.Fatal(err)
		}
	}
	waitPods(ctx, t, ns, "the last wave running", func(p []corev1.Pod) bool {
		n := 0
		for _, jp := range jobPods(p, "waves") {
			if jp.Status.Phase == corev1.PodRunning {
				n++
			}
		}
		return n == 1 && getJobE2E(ctx, t, ns, "waves").Status.Succeeded == 2
	})
	job("side", 1, 1)
	waitPods(ctx, t, ns, "the side Job running beside the last wave", func(p []corev1.Pod) bool {
		return harness.Running(jobPods(p, "side")) == 1
	})
	q := quotaConfig(t)
	checkInvariants(ctx, t, &q)
	note(name, "a Job's last wave (1 of parallelism 2) was charged for 1 GPU; a second Job ran beside it in a quota of 2")
}

// drainWithKills runs the queued work of namespace ns to its end, round by
// round: each round waits until the admitted pods are all placed and some
// run (or all pods succeeded), checks the invariants, and finishes the
// running pods; the extender is killed with SIGKILL and restarted after
// rounds 2 and 4, as the next work is being admitted.
func drainWithKills(ctx context.Context, t *testing.T, ns string, q *quota.Config, pods int) (rounds, kills int) {
	t.Helper()
	kill := func(why string) {
		if err := env.KillExtender(); err != nil {
			t.Fatalf("kill (%s): %v", why, err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := env.StartExtender(ctx); err != nil {
			t.Fatalf("restart (%s): %v", why, err)
		}
	}
	for {
		// A round: the admitted Jobs' pods all placed (none admitted and
		// waiting for a node), at least one running; or every pod done.
		done := 0
		cur := waitPods(ctx, t, ns, "a round running", func(p []corev1.Pod) bool {
			run, waiting, succeeded := 0, 0, 0
			for i := range p {
				switch {
				case p[i].Status.Phase == corev1.PodSucceeded:
					succeeded++
				case p[i].DeletionTimestamp != nil || podreq.Terminal(&p[i]):
				case p[i].Status.Phase == corev1.PodRunning:
					run++
				case !gated(&p[i]):
					waiting++
				}
			}
			done = succeeded
			return (run > 0 && waiting == 0) || succeeded == pods
		})
		checkInvariants(ctx, t, q)
		if done == pods {
			break
		}
		for i := range cur {
			if cur[i].Status.Phase == corev1.PodRunning && cur[i].DeletionTimestamp == nil {
				if err := env.FinishPod(ctx, &cur[i], corev1.PodSucceeded); err != nil {
					t.Fatal(err)
				}
			}
		}
		rounds++
		if rounds == 2 || rounds == 4 {
			kill(fmt.Sprintf("round %d", rounds)) // as the next Jobs are admitted
			kills++
		}
	}
	return rounds, kills
}
