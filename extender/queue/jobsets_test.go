package queue

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

var jobSetsGVR = schema.GroupVersionResource{Group: podreq.JobSetGroup, Version: "v1alpha2", Resource: "jobsets"}

// queuedJobSet is a JobSet as rota-admission leaves it: suspended and
// marked, of replicas Indexed Jobs of parallelism one-GPU pods.
func queuedJobSet(name string, replicas, parallelism int64, age time.Duration) *unstructured.Unstructured {
	pod := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c",
		"resources": map[string]any{"limits": map[string]any{names.GPU: "1"}}}}}}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": podreq.JobSetGroup + "/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"namespace": "ml", "name": name, "uid": "js-" + name, "resourceVersion": "1",
			"creationTimestamp": t0.Add(-age).UTC().Format(time.RFC3339), "annotations": map[string]any{names.QueuedJobAnnotation: "true"}},
		"spec": map[string]any{"suspend": true, "replicatedJobs": []any{map[string]any{"name": "w", "replicas": replicas,
			"template": map[string]any{"spec": map[string]any{"parallelism": parallelism, "completions": parallelism,
				"completionMode": "Indexed", "template": pod}}}}}}}
}

// startJobSets is start with the JobSet API served and jobSets in it,
// read by Owners as rota-extender reads them.
func startJobSets(t *testing.T, cfg *quota.Config, h Holder, jobSets ...*unstructured.Unstructured) (*Controller, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	c, _ := start(t, cfg, h)
	objs := make([]runtime.Object, len(jobSets))
	for i, js := range jobSets {
		objs[i] = js
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{jobSetsGVR: "JobSetList"}, objs...)
	f := newOwnerFixture(t)
	f.serveJobSets()
	o := NewOwners(f.meta, f.disc)
	o.QueueJobSets(dyn, names)
	t.Cleanup(runOwners(t, o))
	c.o.Owners, c.o.Dynamic = o, dyn
	signing(c)
	return c, dyn
}

func getJobSet(t *testing.T, dyn *dynamicfake.FakeDynamicClient, name string) *podreq.JobSet {
	t.Helper()
	u, err := dyn.Resource(jobSetsGVR).Namespace("ml").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jobSetFrom(u)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// waitJobSets waits until the owners' cache holds what the API does.
func waitJobSets(t *testing.T, c *Controller, dyn *dynamicfake.FakeDynamicClient) {
	t.Helper()
	waitFor(t, func() bool {
		in, ok := c.o.Owners.QueuedJobSets()
		if !ok {
			return false
		}
		for _, js := range in {
			got := getJobSet(t, dyn, js.Name)
			if !c.sameQueueState(jobSetOwner{got}, jobSetOwner{js}) {
				return false
			}
		}
		return true
	})
}

// jobSetPod is a gated pod the JobSet's Job made, as the webhook names
// its gang.
func jobSetPod(js *podreq.JobSet, name string, gpus int64, gang string, size int) *corev1.Pod {
	p := gpuPod(name, gpus, 0, true)
	p.Labels = map[string]string{podreq.JobSetUIDLabel: string(js.UID), names.GangLabel: gang}
	p.Annotations = map[string]string{names.GangSizeAnnotation: strconv.Itoa(size)}
	return p
}

// A JobSet queued suspended is admitted whole by one patch (unsuspended,
// its record signed for it) when its team's quota has room for all its GPU
// pods; the next waits. Its gated pods are then admitted through its
// record; a pod that names it by the JobSet controller's label but asks
// for more than its template does is not. Reclaim takes it back by
// suspending it.
func TestJobSetQueuedSuspended(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	r := &fakeRoom{free: 8}
	c, dyn := startJobSets(t, cfg, r, queuedJobSet("a", 2, 2, 2*time.Hour), queuedJobSet("b", 1, 2, time.Hour))
	c.Pass(t.Context())

	a := getJobSet(t, dyn, "a")
	if podreq.JobSetSuspended(a) {
		t.Fatalf("JobSet a stayed suspended; held %v", r.held)
	}
	adm, forged := c.o.Records.WorkloadAdmission(a.Annotations, podreq.JobSetRecordSubject(a, names), names)
	if adm == nil || forged != nil || adm.Team != "vision" {
		t.Fatalf("JobSet a's record = %+v (unbelieved %+v); want one signed for team vision", adm, forged)
	}
	if forged, _ := c.o.Records.WorkloadAdmission(a.Annotations, "jobset/js-b/4", names); forged != nil {
		t.Fatal("JobSet a's record is believed for another JobSet")
	}
	if !podreq.JobSetSuspended(getJobSet(t, dyn, "b")) {
		t.Fatal("JobSet b (2 GPUs) was admitted past quota: 4 of 4 taken by JobSet a")
	}
	if want := "a-w-0-0,a-w-0-1,a-w-1-0,a-w-1-1"; strings.Join(r.held, ",") != want {
		t.Errorf("held %v, want room for a's four planned pods %s", r.held, want)
	}
	ps, _ := c.Positions()
	if len(ps) != 1 || ps[0].Pod != "ml/JobSet/b" || !strings.Contains(ps[0].Reason, "Quota") {
		t.Errorf("positions = %+v, want ml/JobSet/b waiting for quota", ps)
	}

	// The JobSet's Jobs make its pods, gated; the owner adds one naming
	// the JobSet that asks for 2 GPUs (the template asks 1).
	pods := []*corev1.Pod{jobSetPod(a, "a-w-0-0-x", 1, "a", 4), jobSetPod(a, "a-w-0-1-x", 1, "a", 4),
		jobSetPod(a, "a-w-1-0-x", 1, "a", 4), jobSetPod(a, "a-w-1-1-x", 1, "a", 4), jobSetPod(a, "big", 2, "", 0)}
	for _, p := range pods {
		if _, err := c.o.Client.CoreV1().Pods("ml").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == len(pods) })
	waitJobSets(t, c, dyn)
	c.Pass(t.Context())
	client := c.o.Client
	for _, p := range pods[:4] {
		got, err := client.CoreV1().Pods("ml").Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if adm, _ := c.o.Records.Admission(got, names); podreq.Queued(got, names) || adm == nil || adm.Team != "vision" {
			t.Errorf("%s: gates %v, record %+v; want admitted through JobSet a's record with its own", p.Name, got.Spec.SchedulingGates, adm)
		}
	}
	if big, _ := client.CoreV1().Pods("ml").Get(t.Context(), "big", metav1.GetOptions{}); !podreq.Queued(big, names) {
		t.Error("a 2-GPU pod naming JobSet a (1-GPU template) was admitted through a's record")
	}
	if !podreq.JobSetSuspended(getJobSet(t, dyn, "b")) {
		t.Error("JobSet b admitted: a's pods were counted twice as free")
	}

	// Reclaim takes a back by suspending it.
	running := pods[0].DeepCopy()
	running.Spec.SchedulingGates, running.Spec.NodeName = nil, "n1"
	if err := c.takeBack(t.Context(), running); err != nil {
		t.Fatal(err)
	}
	if !podreq.JobSetSuspended(getJobSet(t, dyn, "a")) {
		t.Fatal("reclaim did not suspend JobSet a")
	}
}

// A JobSet in its last wave (a Job of its workers succeeded, as the JobSet
// controller counts in its status) is charged for the pods it has left:
// JobSet b fits beside it.
func TestJobSetLastWaveCharge(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	r := &fakeRoom{free: 8}
	c, dyn := startJobSets(t, cfg, r, queuedJobSet("a", 2, 2, 2*time.Hour))
	c.Pass(t.Context())
	if podreq.JobSetSuspended(getJobSet(t, dyn, "a")) {
		t.Fatal("JobSet a was not admitted")
	}
	u, err := dyn.Resource(jobSetsGVR).Namespace("ml").Get(t.Context(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = map[string]any{"replicatedJobsStatus": []any{map[string]any{"name": "w", "succeeded": int64(1)}}}
	u.SetResourceVersion("7") // the fake keeps what it is given; the API server moves it
	if _, err := dyn.Resource(jobSetsGVR).Namespace("ml").Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(jobSetsGVR).Namespace("ml").Create(t.Context(), queuedJobSet("b", 1, 2, time.Hour), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		in, _ := c.o.Owners.QueuedJobSets()
		for _, js := range in {
			if js.Name == "a" && len(js.Status.ReplicatedJobsStatus) == 1 {
				return len(in) == 2
			}
		}
		return false
	})
	c.Pass(t.Context())
	if podreq.JobSetSuspended(getJobSet(t, dyn, "b")) {
		ps, _ := c.Positions()
		t.Fatalf("JobSet b waits beside a's last Job of 2 pods: %+v", ps)
	}
}
