package podreq

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rota-sched/rota/pkg/contract"
)

// jobSetJSON is a JobSet with a CPU-only launcher and GPU workers (2 Jobs
// of 4 indexed pods), before any Job succeeded.
const jobSetJSON = `{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet",
"metadata":{"name":"llm","namespace":"ml","uid":"js-uid"},
"spec":{"suspend":true,"replicatedJobs":[
 {"name":"launcher","template":{"spec":{"template":{"spec":{"containers":[{"name":"c"}]}}}}},
 {"name":"workers","replicas":2,"template":{"spec":{"parallelism":4,"completions":4,"completionMode":"Indexed",
  "template":{"metadata":{"annotations":{"example.com/admission":"{}","keep":"me"}},
   "spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"2"},"requests":{"cpu":"1"}}}]}}}}}]}}`

func readJobSet(t *testing.T, raw string) *JobSet {
	t.Helper()
	o, err := ReadJobSet([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestJobSetPods(t *testing.T) {
	n := contract.Default
	o := readJobSet(t, jobSetJSON)
	if !JobSetSuspended(o) || JobSetFinished(o) || !JobSetSuspendable(o, n) {
		t.Fatalf("suspended %v, finished %v, suspendable %v", JobSetSuspended(o), JobSetFinished(o), JobSetSuspendable(o, n))
	}
	if got := JobSetMembers(o, n); got != 8 {
		t.Fatalf("JobSetMembers = %d, want 8 (the launcher asks for no GPU)", got)
	}
	pods := JobSetPods(o, n)
	if len(pods) != 8 {
		t.Fatalf("%d planned pods, want 8", len(pods))
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if seen[string(p.UID)] || seen[p.Name] {
			t.Fatalf("planned pod %s (%s) twice", p.Name, p.UID)
		}
		seen[string(p.UID)], seen[p.Name] = true, true
		if JobSetControllerUID(p) != "js-uid" || p.Labels[ReplicatedJobLabel] != "workers" || p.Labels[JobSetNameLabel] != "llm" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
		if p.Labels[n.GangLabel] != "llm" || p.Annotations[n.GangSizeAnnotation] != "8" {
			t.Errorf("pod %s is not in gang llm of 8: %v %v", p.Name, p.Labels, p.Annotations)
		}
		if _, ok := p.Annotations[n.AdmissionAnnotation]; ok || p.Annotations["keep"] != "me" {
			t.Errorf("pod %s annotations %v: the template's record must go, the rest stay", p.Name, p.Annotations)
		}
		if ref := p.OwnerReferences; len(ref) != 1 || ref[0].Kind != "JobSet" || ref[0].UID != "js-uid" || ref[0].APIVersion != "jobset.x-k8s.io/v1alpha2" {
			t.Errorf("pod %s owner %v", p.Name, ref)
		}
	}
	if pods[0].Name != "llm-workers-0-0" || pods[7].Name != "llm-workers-1-3" {
		t.Errorf("names %s .. %s", pods[0].Name, pods[7].Name)
	}

	// The last wave: one worker Job succeeded, so 4 pods are left, while
	// the record's subject stays the JobSet's size.
	subject := JobSetRecordSubject(o, n)
	o.Status.ReplicatedJobsStatus = append(o.Status.ReplicatedJobsStatus, struct {
		Name      string `json:"name"`
		Succeeded int32  `json:"succeeded"`
	}{"workers", 1})
	if got := len(JobSetPods(o, n)); got != 4 {
		t.Errorf("%d planned pods after a worker Job succeeded, want 4", got)
	}
	if JobSetRecordSubject(o, n) != subject || subject != "jobset/js-uid/8" {
		t.Errorf("subject %q, then %q", subject, JobSetRecordSubject(o, n))
	}
	o.Status.Conditions = append(o.Status.Conditions, metavOK("Completed"))
	if !JobSetFinished(o) {
		t.Error("a Completed JobSet is not finished")
	}
}

func TestJobSetSuspendable(t *testing.T) {
	n := contract.Default
	for _, tc := range []struct {
		name string
		edit func(string) string
		want bool
	}{
		{"GPU workers", func(s string) string { return s }, true},
		{"owned by a training job", func(s string) string {
			return strings.Replace(s, `"uid":"js-uid"`, `"uid":"js-uid","ownerReferences":[{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","name":"t","uid":"t","controller":true}]`, 1)
		}, false},
		{"Kueue's", func(s string) string {
			return strings.Replace(s, `"uid":"js-uid"`, `"uid":"js-uid","labels":{"kueue.x-k8s.io/queue-name":"q"}`, 1)
		}, false},
		{"no GPU", func(s string) string { return strings.ReplaceAll(s, `"example.com/gpu":"2"`, `"memory":"1Gi"`) }, false},
		{"too many pods", func(s string) string { return strings.Replace(s, `"replicas":2`, `"replicas":2147483647`, 1) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := readJobSet(t, tc.edit(jobSetJSON))
			if got := JobSetSuspendable(o, n); got != tc.want {
				t.Errorf("JobSetSuspendable = %v, want %v", got, tc.want)
			}
			if !tc.want && JobSetMembers(o, n) > MaxSuspendedPods && JobSetPods(o, n) != nil {
				t.Error("planned the pods of a JobSet past MaxSuspendedPods")
			}
		})
	}
}

func TestJobSetOneShape(t *testing.T) {
	opts := Options{Names: contract.Default}
	two := strings.Replace(jobSetJSON, `{"name":"launcher","template":{"spec":{"template":{"spec":{"containers":[{"name":"c"}]}}}}}`,
		`{"name":"driver","template":{"spec":{"template":{"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"%s"},"requests":{"cpu":"1"}}}]}}}}}`, 1)
	for _, tc := range []struct {
		name, raw, err string
	}{
		{"one GPU replicated job", jobSetJSON, ""},
		{"two of one shape", strings.Replace(two, "%s", "2", 1), ""},
		{"two shapes", strings.Replace(two, "%s", "1", 1), `"driver" and "workers" ask for different resources`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := JobSetOneShape(readJobSet(t, tc.raw), opts)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("JobSetOneShape = %v, want %q", err, tc.err)
			}
		})
	}
}

// A Job of more pods at once than MaxSuspendedPods keeps gated pods, and
// its pods are never planned (a user cannot make the webhook or the queue
// allocate them).
func TestJobPastMaxSuspendedPods(t *testing.T) {
	n := contract.Default
	p := int32(MaxSuspendedPods + 1)
	j := jobOfParallelism(p)
	if Suspendable(j, n) || JobPods(j, n) != nil {
		t.Errorf("a Job of %d pods at once is queued suspended or planned", p)
	}
	if j := jobOfParallelism(MaxSuspendedPods); !Suspendable(j, n) {
		t.Errorf("a Job of %d pods at once is not queued suspended", MaxSuspendedPods)
	}
}

func jobOfParallelism(p int32) *batchv1.Job {
	j := &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: ptr.To(p)}}
	j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceName(contract.Default.GPU): resource.MustParse("1")}}}}
	return j
}

func metavOK(kind string) metav1.Condition {
	return metav1.Condition{Type: kind, Status: metav1.ConditionTrue}
}

// JobSetPods never panics, plans as many pods as JobSetMembers says of a
// JobSet nothing has succeeded of, and never more than MaxSuspendedPods.
func FuzzJobSetPods(f *testing.F) {
	f.Add([]byte(jobSetJSON))
	f.Add([]byte(`{"spec":{"replicatedJobs":[{"name":"w","replicas":3,"template":{"spec":{"parallelism":100000,"template":{"spec":{"containers":[{"resources":{"limits":{"example.com/gpu":"1"}}}]}}}}}]}}`))
	f.Add([]byte(`{"status":{"replicatedJobsStatus":[{"name":"w","succeeded":-5}]},"spec":{"replicatedJobs":[{"name":"w","template":{"spec":{"template":{"spec":{"containers":[{"resources":{"limits":{"example.com/gpu":"1"}}}]}}}}}]}}`))
	n := contract.Default
	f.Fuzz(func(t *testing.T, raw []byte) {
		o, err := ReadJobSet(raw)
		if err != nil {
			return
		}
		pods := JobSetPods(o, n)
		if len(pods) > MaxSuspendedPods {
			t.Fatalf("planned %d pods", len(pods))
		}
		if len(o.Status.ReplicatedJobsStatus) == 0 && JobSetMembers(o, n) <= MaxSuspendedPods && len(pods) != JobSetMembers(o, n) {
			t.Fatalf("planned %d pods, JobSetMembers %d", len(pods), JobSetMembers(o, n))
		}
	})
}
