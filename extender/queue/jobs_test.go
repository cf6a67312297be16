package queue

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

var jobsKey = contract.RecordKey(strings.Repeat("k", contract.MinRecordKeyBytes))

// queuedJob is a Job as rota-admission leaves it in a namespace that
// queues Jobs suspended: suspended and marked.
func queuedJob(name string, parallelism int32, gpus int64, age time.Duration) *batchv1.Job {
	tmpl := gpuPod("tmpl", gpus, 0, false)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("job-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(t0.Add(-age)), Annotations: map[string]string{names.QueuedJobAnnotation: "true"}},
		Spec: batchv1.JobSpec{Parallelism: ptr.To(parallelism), Completions: ptr.To(parallelism), Suspend: ptr.To(true),
			Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}},
	}
}

// jobPod is a gated pod the Job controller made for job.
func jobPod(job *batchv1.Job, name string, gpus int64) *corev1.Pod {
	p := gpuPod(name, gpus, 0, true)
	p.Labels = map[string]string{batchv1.ControllerUidLabel: string(job.UID)}
	p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	return p
}

func signing(c *Controller) {
	c.o.Records = podreq.Records{Key: jobsKey}
	c.o.Parser = podreq.NewParser(podreq.Options{Names: names, MemoryUnitMiB: c.o.MemoryUnitMiB}, c.o.Records, 0)
}

func getJob(t *testing.T, client *fake.Clientset, name string) *batchv1.Job {
	t.Helper()
	j, err := client.BatchV1().Jobs("ml").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func syncJobs(t *testing.T, c *Controller, client *fake.Clientset) {
	t.Helper()
	waitFor(t, func() bool {
		for _, obj := range c.o.Jobs.GetStore().List() {
			in := obj.(*batchv1.Job)
			got, err := client.BatchV1().Jobs(in.Namespace).Get(t.Context(), in.Name, metav1.GetOptions{})
			// The fake keeps resourceVersions: compare what the queue reads.
			if err != nil || !c.sameQueueState(jobOwner{got}, jobOwner{in}) {
				return false
			}
		}
		return true
	})
}

// A Job queued suspended is admitted whole by one patch (unsuspended, its
// record signed for it) when its team's quota has room for all its pods;
// the next waits; the admitted Job's gated pods are then admitted through
// its record without counting its quota twice.
func TestJobQueuedSuspended(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	a, b := queuedJob("a", 2, 1, 2*time.Hour), queuedJob("b", 3, 1, time.Hour)
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, a, b)
	signing(c)
	c.Pass(t.Context())

	gotA := getJob(t, client, "a")
	if podreq.Suspended(gotA) {
		t.Fatalf("job a stayed suspended; held %v", r.held)
	}
	adm, forged := c.o.Records.JobAdmission(gotA, names)
	if adm == nil || forged != nil || adm.Team != "vision" {
		t.Fatalf("job a's record = %+v (unbelieved %+v); want one signed for team vision", adm, forged)
	}
	if !podreq.Suspended(getJob(t, client, "b")) {
		t.Fatalf("job b (3 GPUs) was admitted past quota: 2 of 4 taken by job a")
	}
	if want := []string{"a-0", "a-1"}; strings.Join(r.held, ",") != strings.Join(want, ",") {
		t.Errorf("held %v, want room for a's two planned pods %v", r.held, want)
	}
	ps, _ := c.Positions()
	if len(ps) != 1 || ps[0].Pod != "ml/Job/b" || !strings.Contains(ps[0].Reason, "Quota") {
		t.Errorf("positions = %+v, want ml/Job/b waiting for quota", ps)
	}

	// The Job controller creates a's pods, gated, as for any GPU pod; the
	// owner adds a pod that names job a but asks for 4 GPUs (its template
	// asks 1): it is not a's to admit, and waits for quota as its own.
	for _, p := range []*corev1.Pod{jobPod(gotA, "a-x", 1), jobPod(gotA, "big", 4)} {
		if _, err := client.CoreV1().Pods("ml").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == 2 })
	syncJobs(t, c, client)
	c.Pass(t.Context())
	if !podreq.Queued(get(t, client, "big"), names) {
		t.Fatalf("a 4-GPU pod naming job a (1-GPU template) was admitted through a's record")
	}
	if _, err := client.CoreV1().Pods("ml").Create(t.Context(), jobPod(gotA, "a-y", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == 3 })
	c.Pass(t.Context())
	for _, n := range []string{"a-x", "a-y"} {
		p := get(t, client, n)
		adm, _ := c.o.Records.Admission(p, names)
		if podreq.Queued(p, names) || adm == nil || adm.Team != "vision" {
			t.Errorf("%s: gates %v, record %+v; want admitted through job a's record with its own", n, p.Spec.SchedulingGates, adm)
		}
	}
	if !podreq.Queued(get(t, client, "big"), names) {
		t.Errorf("big was admitted past quota")
	}
	if !podreq.Suspended(getJob(t, client, "b")) {
		t.Errorf("job b admitted: a's pods were counted twice as free")
	}
	if !strings.Contains(strings.Join(r.released, ","), "a-0") {
		t.Errorf("job a's planned hold was not given back for its pods (released %v)", r.released)
	}
}

// A record Rota did not sign for this Job (copied from another Job, or
// kept after the parallelism grew) is not believed: the Job is not charged
// as admitted, and its pods are not admitted through it.
func TestJobRecordNotBelieved(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	a := queuedJob("a", 2, 1, 2*time.Hour)
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, a)
	signing(c)
	c.Pass(t.Context())
	gotA := getJob(t, client, "a")
	if podreq.Suspended(gotA) {
		t.Fatal("job a was not admitted")
	}

	// The owner raises a's parallelism (the records policy refuses it;
	// here it got through) and starts a forged Job with a's record.
	grown := gotA.DeepCopy()
	grown.Spec.Parallelism, grown.Spec.Completions = ptr.To[int32](4), ptr.To[int32](4)
	if _, err := client.BatchV1().Jobs("ml").Update(t.Context(), grown, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	forged := queuedJob("f", 2, 1, time.Hour)
	forged.Spec.Suspend = ptr.To(false)
	forged.Annotations[names.AdmissionAnnotation] = gotA.Annotations[names.AdmissionAnnotation]
	forged, err := client.BatchV1().Jobs("ml").Create(t.Context(), forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := []*corev1.Pod{jobPod(grown, "a-0", 1), jobPod(grown, "a-1", 1), jobPod(grown, "a-2", 1), jobPod(forged, "f-0", 1),
		jobPod(forged, "f-1", 1)}
	for _, p := range pods {
		if _, err := client.CoreV1().Pods("ml").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == len(pods) })
	syncJobs(t, c, client)
	r.free = 8
	c.Pass(t.Context())
	c.Pass(t.Context())
	// Each unbelieved record (a's, grown; f's, copied) is counted once.
	if got := testutil.ToFloat64(c.o.Metrics.DisbelievedRecords); got != 2 {
		t.Errorf("%v unbelieved records reported over two passes, want 2 (each once)", got)
	}
	admitted := 0
	for _, p := range pods {
		got := get(t, client, p.Name)
		if !podreq.Queued(got, names) {
			admitted++
		}
	}
	// Neither record holds: each pod queues as its own, 4 GPUs of quota.
	if admitted != 4 {
		t.Errorf("%d pods admitted, want 4 (team vision's quota, each pod counted as its own)", admitted)
	}
}

// Reclaim takes an admitted Job back by suspending it (evicted, its pods
// would be made again and admitted by its record); once its pods are
// gone, its record goes and it queues again.
func TestJobTakenBackBySuspending(t *testing.T) {
	a := queuedJob("a", 1, 1, time.Hour)
	r := &fakeRoom{free: 8}
	c, client := start(t, nil, r, a)
	signing(c)
	c.Pass(t.Context())
	gotA := getJob(t, client, "a")
	pod := jobPod(gotA, "a-x", 1)
	pod.Spec.SchedulingGates, pod.Spec.NodeName = nil, "n1"
	syncJobs(t, c, client)
	c.Pass(t.Context())
	if err := c.takeBack(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if !podreq.Suspended(getJob(t, client, "a")) {
		t.Fatal("reclaim did not suspend job a")
	}
	// The Job controller deletes the pod; it terminates for a while.
	pod.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	if _, err := client.CoreV1().Pods("ml").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == 1 })
	syncJobs(t, c, client)
	c.Pass(t.Context())
	if _, ok := getJob(t, client, "a").Annotations[names.AdmissionAnnotation]; !ok {
		t.Fatal("job a lost its record while its pod was still terminating")
	}
	if err := client.CoreV1().Pods("ml").Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == 0 })
	c.Pass(t.Context()) // no pods left: the record goes
	got := getJob(t, client, "a")
	if _, ok := got.Annotations[names.AdmissionAnnotation]; ok {
		t.Fatalf("job a suspended with no pods kept its record: %v", got.Annotations)
	}
	if !podreq.QueuedJob(got, names) {
		t.Errorf("job a lost its queued mark")
	}
}

// In its last wave an admitted Job is charged only for the completions it
// has left: Job a (parallelism 4 of 6 completions, 4 succeeded) runs two
// pods at most, so Job b (2 GPUs) fits team vision's quota of 4 beside it.
// Counted at its parallelism, a would hold all 4 and b would wait.
func TestJobLastWaveCharge(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	a := queuedJob("a", 4, 1, 2*time.Hour)
	a.Spec.Completions = ptr.To[int32](6)
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, a)
	signing(c)
	c.Pass(t.Context())
	gotA := getJob(t, client, "a")
	if podreq.Suspended(gotA) {
		t.Fatal("job a was not admitted")
	}
	gotA.Status.Succeeded = 4  // the Job controller's count after the first wave
	gotA.ResourceVersion = "7" // the fake keeps what it is given; the API server moves it
	if _, err := client.BatchV1().Jobs("ml").UpdateStatus(t.Context(), gotA, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := queuedJob("b", 2, 1, time.Hour)
	if _, err := client.BatchV1().Jobs("ml").Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, obj := range c.o.Jobs.GetStore().List() {
			if j := obj.(*batchv1.Job); j.Name == "a" && j.Status.Succeeded == 4 {
				return len(c.o.Jobs.GetStore().List()) == 2
			}
		}
		return false
	})
	c.Pass(t.Context())
	if podreq.Suspended(getJob(t, client, "b")) {
		ps, _ := c.Positions()
		t.Fatalf("job b waits beside job a's last wave of 2 pods: %+v", ps)
	}
}
