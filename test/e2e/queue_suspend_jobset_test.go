//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/jobset"
)

// TestQueueSuspendedJobSet: with the real JobSet controller, in a namespace
// labelled queueing=suspend, a JobSet asking for GPUs is created suspended
// and waits as the JobSet alone: the JobSet controller makes its Jobs
// suspended, and no pod exists. Team qjsusp has quota for 4 GPUs. The
// first JobSet (2 Jobs of 2 indexed one-GPU pods: one gang of 4) is
// admitted by one patch (unsuspended, with its signed record), the JobSet
// controller resumes its Jobs, and their pods are admitted through the
// JobSet's record and run. The second waits suspended with no pod; a team
// member with edit rights on JobSets cannot unsuspend it, copy the first's
// record or remove its mark. When the first's pods succeed, the second is
// admitted and runs.
func TestQueueSuspendedJobSet(t *testing.T) {
	const name = "qjsusp"
	ctx, ns := suspendScenario(t, name, 6*time.Minute, 2, 4)
	startJobSet(ctx, t)
	userClient(ctx, t, ns, "alice") // alice's Role: pods, Jobs, JobSets
	alice := userDynamic(t, "alice")

	first := createJobSetAs(ctx, t, alice, ns, "first", jobSetSpec(false, replicatedJob("workers", 2, 2, 1)))
	if js := readJobSetE2E(t, first); !podreq.JobSetSuspended(js) || js.Annotations[env.Names.QueuedJobAnnotation] != "true" {
		t.Fatalf("first created with suspend %v and annotations %v; want suspended and marked", js.Spec.Suspend, js.Annotations)
	}
	pods := waitPods(ctx, t, ns, "first's four pods running", func(p []corev1.Pod) bool {
		return len(runningOf(jobSetPods(p, "first"))) == 4
	})
	for _, p := range jobSetPods(pods, "first") {
		adm, err := podreq.AdmissionOf(&p, env.Names)
		if err != nil || adm == nil || adm.Team != name || !env.RecordsKey.VerifyAdmission(string(p.UID), *adm) {
			t.Errorf("%s: admission record %+v (%v); want one signed for the pod, team %s", p.Name, adm, err, name)
		}
		if p.Labels[env.Names.GangLabel] != "first" {
			t.Errorf("%s: gang %q; want the JobSet's gang first", p.Name, p.Labels[env.Names.GangLabel])
		}
	}
	firstNow := getJobSetE2E(ctx, t, ns, "first")
	adm, forged := records().WorkloadAdmission(firstNow.Annotations, podreq.JobSetRecordSubject(firstNow, env.Names), env.Names)
	if adm == nil || forged != nil || adm.Team != name || podreq.JobSetSuspended(firstNow) {
		t.Fatalf("first: suspended %v, record %+v (unbelieved %+v); want admitted with a record signed for the JobSet",
			podreq.JobSetSuspended(firstNow), adm, forged)
	}

	createJobSetAs(ctx, t, alice, ns, "second", jobSetSpec(false, replicatedJob("workers", 1, 2, 1)))
	waitEvent(ctx, t, ns, "second", "Queued")
	if ps := jobSetPods(mustPods(ctx, t, ns), "second"); len(ps) != 0 || !podreq.JobSetSuspended(getJobSetE2E(ctx, t, ns, "second")) {
		t.Fatalf("second, queued past quota, has %d pods; want none, and the JobSet suspended", len(ps))
	}

	// kubectl rota lists and explains it from the JobSet alone.
	bin := buildKubectlRota(ctx, t)
	if out := runKubectlRota(ctx, t, bin, "queue", "--team", name); !strings.Contains(out, ns+"/JobSet/second") {
		t.Errorf("kubectl rota queue does not list the JobSet queued suspended:\n%s", out)
	}
	if out := runKubectlRota(ctx, t, bin, "why", "jobset/second", "-n", ns); !strings.Contains(out, "queued suspended (team "+name+")") ||
		!strings.Contains(out, "all 2 at once") {
		t.Errorf("kubectl rota why jobset/second:\n%s\nwant it queued suspended, 2 pods at once", out)
	}

	// Alice, with edit rights on JobSets, tries to start it herself.
	res := alice.Resource(jobset.JobSets).Namespace(ns)
	for _, tc := range []struct{ what, patch, want string }{
		{"unsuspend", `{"spec":{"suspend":false}}`, "only Rota's queue unsuspends it"},
		{"copy first's record", mergeAnnotation(env.Names.AdmissionAnnotation, firstNow.Annotations[env.Names.AdmissionAnnotation]), "only rota-extender sets"},
		{"drop the mark", `{"metadata":{"annotations":{"` + env.Names.QueuedJobAnnotation + `":null}}}`, "only rota-extender changes or removes it"},
		{"write a reservation record", mergeAnnotation(env.Names.ReservationAnnotation, `{"version":1}`), "room the queue holds for the JobSet"},
	} {
		_, err := res.Patch(ctx, "second", types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("alice's %s: got %v, want a refusal saying %q", tc.what, err, tc.want)
		}
	}
	if !podreq.JobSetSuspended(getJobSetE2E(ctx, t, ns, "second")) {
		t.Fatal("second was unsuspended by its owner")
	}

	// first's pods succeed; second is admitted and runs.
	for _, p := range jobSetPods(pods, "first") {
		if err := env.FinishPod(ctx, &p, corev1.PodSucceeded); err != nil {
			t.Fatal(err)
		}
	}
	waitPods(ctx, t, ns, "second's two pods running", func(p []corev1.Pod) bool {
		return len(runningOf(jobSetPods(p, "second"))) == 2
	})
	second := getJobSetE2E(ctx, t, ns, "second")
	if adm, _ := records().WorkloadAdmission(second.Annotations, podreq.JobSetRecordSubject(second, env.Names), env.Names); podreq.JobSetSuspended(second) || adm == nil {
		t.Errorf("second: suspended %v, record %+v; want admitted", podreq.JobSetSuspended(second), adm)
	}
	q := quotaConfig(t)
	checkInvariants(ctx, t, &q)
	note(name, "JobSets queued suspended: the second waited with no pods and ran once the first finished")
}

// TestQueueSuspendedJobSetsKill: JobSets queued suspended (gangs of 2 Jobs
// of 2 one-GPU pods, and single pods of two GPUs) drain through team
// qskilljs's quota of 8 GPUs while the extender is killed with SIGKILL as
// JobSets finish and the next are being admitted. After each round the
// invariant checker (which counts a running JobSet queued suspended for
// all its GPU pods, made or not) finds admitted use within the quota and
// no gang partly bound; every JobSet completes.
func TestQueueSuspendedJobSetsKill(t *testing.T) {
	const name = "qskilljs"
	ctx, ns := suspendScenario(t, name, 8*time.Minute, 2, 8)
	startJobSet(ctx, t)
	q := quotaConfig(t)
	var sets []string
	for i := range 8 {
		spec := jobSetSpec(false, replicatedJob("w", 1, 1, 2))
		if i%2 == 0 {
			spec = jobSetSpec(false, replicatedJob("w", 2, 2, 1))
		}
		js := fmt.Sprintf("s%02d", i)
		if got := readJobSetE2E(t, createJobSet(ctx, t, ns, js, spec)); !podreq.JobSetSuspended(got) {
			t.Fatalf("%s created unsuspended", js)
		}
		sets = append(sets, js)
	}
	const pods = 4*4 + 4 // every GPU pod of every JobSet, run once (backoffLimit 0)
	rounds, kills := drainWithKills(ctx, t, ns, &q, pods)
	// The JobSet controller marks the last ones completed a moment later.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, js := range sets {
			if !podreq.JobSetFinished(getJobSetE2E(ctx, t, ns, js)) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("not every JobSet completed: %v", err)
	}
	checkInvariants(ctx, t, &q)
	note(name, "%d JobSets queued suspended (4 gangs of 4) ran in %d rounds with %d kill -9 of the extender; no invariant violation", len(sets), rounds, kills)
}

// TestQueueSuspendedJobSetReclaimed: team qrjs-b borrows the 4 GPUs of
// team qrjs-g's guarantee with a JobSet queued suspended (2 Jobs of 2
// indexed pods, one gang). When qrjs-g asks for 2, reclaim takes the
// JobSet back by suspending it: the real JobSet controller suspends its
// Jobs, their pods go, qrjs-g's pod runs, and the JobSet, its record
// removed, waits in the queue again with no pods.
func TestQueueSuspendedJobSetReclaimed(t *testing.T) {
	const name = "qrjs"
	ctx, nsG := setup(t, name, "qrjs-g", 4*time.Minute)
	nsB := teamNamespace(ctx, t, "e2e-qrjs-b", "qrjs-b")
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	startJobSet(ctx, t)
	nodes(ctx, t, name, name, 1, harness.GPUNodeSpec{Model: "Rota SJS GPU", MemoryMiB: h100.MemoryMiB, Count: 4})
	suspendJobs(ctx, t, nsB)
	createJobSet(ctx, t, nsB, "borrowed", jobSetSpec(false, replicatedJob("w", 2, 2, 1)))
	waitPods(ctx, t, nsB, "the borrowed JobSet's 4 pods running", func(p []corev1.Pod) bool {
		return len(runningOf(jobSetPods(p, "borrowed"))) == 4
	})

	create(ctx, t, pod(nsG, "mine", name).GPUs(2).Obj())
	waitPods(ctx, t, nsG, "the guaranteed pod running", func(p []corev1.Pod) bool { return running(p, "mine") })
	waitEvent(ctx, t, nsB, "borrowed", "Requeued")
	js := getJobSetE2E(ctx, t, nsB, "borrowed")
	if _, recorded := js.Annotations[env.Names.AdmissionAnnotation]; !podreq.JobSetSuspended(js) || recorded ||
		js.Annotations[env.Names.QueuedJobAnnotation] != "true" {
		t.Fatalf("the reclaimed JobSet: suspended %v, annotations %v; want suspended, marked, without a record", podreq.JobSetSuspended(js), js.Annotations)
	}
	if live := jobSetPods(mustPods(ctx, t, nsB), "borrowed"); len(live) != 0 {
		t.Errorf("the reclaimed JobSet still has %d pods", len(live))
	}
	q := quotaConfig(t)
	checkInvariants(ctx, t, &q)
	note(name, "a borrowed JobSet queued suspended taken back by suspending it; its Jobs' pods gone, it waits again")
}

// userDynamic is a dynamic client of user (userClient made their Role).
func userDynamic(t *testing.T, user string) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(userConfig(t, user))
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func getJobSetE2E(ctx context.Context, t *testing.T, ns, name string) *podreq.JobSet {
	t.Helper()
	u, err := adminDynamic(t).Resource(jobset.JobSets).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return readJobSetE2E(t, u)
}

func readJobSetE2E(t *testing.T, u *unstructured.Unstructured) *podreq.JobSet {
	t.Helper()
	js := &podreq.JobSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, js); err != nil {
		t.Fatal(err)
	}
	return js
}
