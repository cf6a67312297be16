//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
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
	ctx, ns := setup(t, name, "qsusp", 6*time.Minute)
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	nodes(ctx, t, name, "qsusp", 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4})
	alice := userClient(ctx, t, ns, "alice")
	label := []byte(`{"metadata":{"labels":{"` + env.Names.QueueingLabel + `":"` + contract.QueueingSuspend + `"}}}`)
	if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

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
	// The webhook's view learns the namespace's label from its informer:
	// a dry run shows when Jobs are queued suspended there.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := alice.BatchV1().Jobs(ns).Create(ctx, job("probe", 1, false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && podreq.Suspended(got) && podreq.QueuedJob(got, env.Names), nil
	}); err != nil {
		t.Fatalf("Jobs in %s are not created suspended: %v", ns, err)
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
