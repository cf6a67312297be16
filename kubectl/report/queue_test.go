package report

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rota-sched/rota/pkg/podreq"
)

func TestQueue(t *testing.T) {
	o := DefaultOptions()
	n := o.Names
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	queued := func(ns, name string, prio int32, age time.Duration, msg string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("u-" + ns + name),
			CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec: corev1.PodSpec{Priority: &prio, SchedulingGates: []corev1.PodSchedulingGate{{Name: n.QueueGate}},
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceName(n.GPU): resource.MustParse("1")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
		if msg != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodConditionType(n.QueuedCondition), Status: corev1.ConditionTrue,
				Reason: "Quota", Message: msg}}
		}
		return p
	}
	admitted := queued("ml", "running", 0, time.Hour, "")
	admitted.Spec.SchedulingGates = nil
	in := Input{Now: now,
		Namespaces: []corev1.Namespace{
			{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{n.TeamLabel: "vision"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "nlp", Labels: map[string]string{n.TeamLabel: "nlp"}}}},
		Pods: []corev1.Pod{
			queued("ml", "old", 0, 2*time.Hour, "position 2 of 3 in team vision; waiting for quota"),
			queued("ml", "urgent", 100, time.Minute, "position 1 of 3 in team vision; waiting for room"),
			queued("ml", "new", 0, time.Minute, ""),
			queued("nlp", "a", 0, time.Minute, ""),
			admitted,
		}}
	c := Build(in, o)
	var got []string
	for _, p := range c.Queue("").Pods {
		got = append(got, p.Team+" "+p.Pod)
	}
	want := []string{"nlp nlp/a", "vision ml/urgent", "vision ml/old", "vision ml/new"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Queue() order (-want +got):\n%s", diff)
	}
	if q := c.Queue("vision"); len(q.Pods) != 3 || q.Pods[1].Message != "position 2 of 3 in team vision; waiting for quota" || q.Pods[1].Waiting != "2h0m0s" {
		t.Errorf("Queue(vision) = %+v, want 3 pods with the condition's message", q)
	}
	w, err := c.WhyPod("ml", "old")
	if err != nil {
		t.Fatal(err)
	}
	if w.Queued == nil || !strings.Contains(w.Summary, "queued (team vision): position 2 of 3") {
		t.Errorf("WhyPod(old) summary %q, queued %+v; want the queue position", w.Summary, w.Queued)
	}
}

// A pod held by Kueue's gates, or by a gate of someone else's, is
// explained as held there, not as waiting for GPUs.
func TestWhyGatedElsewhere(t *testing.T) {
	o := DefaultOptions()
	n := o.Names
	pod := func(name string, gates ...string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kq", Name: name, UID: types.UID("u-" + name)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceName(n.GPU): resource.MustParse("1")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending}}
		for _, g := range gates {
			p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: g})
		}
		return p
	}
	kq := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kq", Labels: map[string]string{n.TeamLabel: "vision", n.QueueingLabel: "kueue"}}}
	c := Build(Input{Namespaces: []corev1.Namespace{kq}, Pods: []corev1.Pod{pod("kueue", "kueue.x-k8s.io/admission"), pod("tas", "kueue.x-k8s.io/topology"),
		pod("other", "example.org/wait")}}, o)
	for name, want := range map[string]string{
		"kueue": "held by Kueue (scheduling gate kueue.x-k8s.io/admission)",
		"tas":   "admitted by Kueue, which is choosing its nodes",
		"other": "held by scheduling gate(s) example.org/wait, which are not Rota's",
	} {
		w, err := c.WhyPod("kq", name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.Summary, want) {
			t.Errorf("WhyPod(%s) summary %q, want %q", name, w.Summary, want)
		}
		if !strings.Contains(w.Quota.Note, "Kueue's ClusterQueue is its quota") {
			t.Errorf("WhyPod(%s) quota note %q, want Kueue's ClusterQueue named as the quota", name, w.Quota.Note)
		}
		if slices.ContainsFunc(w.Notes, func(s string) bool { return strings.Contains(s, "no FailedScheduling event") }) {
			t.Errorf("WhyPod(%s) notes %q: a gated pod is not tried by the scheduler", name, w.Notes)
		}
	}
}

// A Job queued suspended is listed as one entry, in its team's order by
// its creation; one admitted, or suspended after its admission, is not.
func TestQueueListsSuspendedJobs(t *testing.T) {
	o := DefaultOptions()
	n := o.Names
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	job := func(name string, age time.Duration, suspended, recorded bool) batchv1.Job {
		j := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("u-" + name),
			CreationTimestamp: metav1.NewTime(now.Add(-age)), Annotations: map[string]string{n.QueuedJobAnnotation: "true"}},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](4), Suspend: ptr.To(suspended), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceName(n.GPU): resource.MustParse("1")}}}}}}}}
		if recorded {
			j.Annotations[n.AdmissionAnnotation] = `{}`
		}
		return j
	}
	gated := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", UID: "u-p", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: n.QueueGate}}, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(n.GPU): resource.MustParse("1")}}}}}}
	in := Input{Now: now,
		Namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{n.TeamLabel: "vision"}}}},
		Pods:       []corev1.Pod{gated},
		Jobs: []batchv1.Job{job("old", 2*time.Hour, true, false), job("running", 3*time.Hour, false, true),
			job("ending", 3*time.Hour, true, true), job("new", time.Minute, true, false)}}
	// A JobSet queued suspended is listed the same way; one admitted is not.
	for _, js := range []struct {
		name      string
		age       time.Duration
		suspended bool
	}{{"llm", 30 * time.Minute, true}, {"llm-running", 4 * time.Hour, false}} {
		j := job(js.name, js.age, js.suspended, !js.suspended)
		in.JobSets = append(in.JobSets, podreq.JobSet{ObjectMeta: j.ObjectMeta, Spec: podreq.JobSetSpec{Suspend: j.Spec.Suspend,
			ReplicatedJobs: []podreq.ReplicatedJob{{Name: "w", Replicas: ptr.To[int32](2), Template: batchv1.JobTemplateSpec{Spec: j.Spec}}}}})
	}
	var got []string
	for _, p := range Build(in, o).Queue("vision").Pods {
		got = append(got, p.Pod+" "+p.Kind+" "+p.Waiting+" "+p.Message)
	}
	want := []string{"ml/Job/old Job 2h0m0s a Job of 4 pods queued suspended: no pod exists until the queue admits it", "ml/p  1h0m0s ",
		"ml/JobSet/llm JobSet 30m0s a JobSet of 8 pods queued suspended: no pod exists until the queue admits it",
		"ml/Job/new Job 1m0s a Job of 4 pods queued suspended: no pod exists until the queue admits it"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Queue(vision) (-want +got):\n%s", diff)
	}
}

// WhyJob says where a Job queued suspended stands: waiting (with its
// team's quota), admitted, taken back; and that another Job's pods are what
// to ask about.
func TestWhyJob(t *testing.T) {
	o := DefaultOptions()
	n := o.Names
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	job := func(name string, suspended, marked bool, record string) batchv1.Job {
		j := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("u-" + name),
			CreationTimestamp: metav1.NewTime(now.Add(-time.Hour)), Annotations: map[string]string{}},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Suspend: ptr.To(suspended), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceName(n.GPU): resource.MustParse("1")}}}}}}}}
		if marked {
			j.Annotations[n.QueuedJobAnnotation] = "true"
		}
		if record != "" {
			j.Annotations[n.AdmissionAnnotation] = record
		}
		return j
	}
	rec := `{"version":"v1","admittedAt":"2026-12-01T11:30:00Z","team":"vision"}`
	held := job("held", true, true, "")
	held.Annotations[n.ReservationAnnotation] = `{"version":"v1","since":"2026-12-01T11:50:00Z","holdUntil":"2026-12-01T13:50:00Z",` +
		`"domain":"tier 0 leaf-a","expectedStart":"2026-12-01T12:20:00Z"}`
	in := Input{Now: now,
		Namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{n.TeamLabel: "vision"}}}},
		Jobs: []batchv1.Job{job("waiting", true, true, ""), job("running", false, true, rec), job("back", true, true, rec),
			job("plain", false, false, ""), held}}
	c := Build(in, o)
	for name, want := range map[string]string{
		"waiting": "queued suspended (team vision): no pod exists until the queue admits all 2 at once",
		"held":    "room held for it in tier 0 leaf-a since 2026-12-01T11:50:00Z, until 2026-12-01T13:50:00Z, expected start 2026-12-01T12:20:00Z",
		"running": "admitted to team vision 30m0s ago; 0 of its 2 pods exist",
		"back":    "taken back (suspended after its admission)",
		"plain":   "not queued suspended",
	} {
		w, err := c.WhyJob("ml", name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.Summary, want) || w.Kind != "Job" || w.Pod != "ml/Job/"+name {
			t.Errorf("WhyJob(%s) = %q (%s %s), want it to say %q", name, w.Summary, w.Kind, w.Pod, want)
		}
	}
	if _, err := c.WhyJob("ml", "nope"); err == nil {
		t.Error("WhyJob of a missing Job: no error")
	}

	// A JobSet is explained the same way, its pods found by the JobSet
	// controller's label.
	jobSet := func(j batchv1.Job) podreq.JobSet {
		return podreq.JobSet{ObjectMeta: j.ObjectMeta, Spec: podreq.JobSetSpec{Suspend: j.Spec.Suspend,
			ReplicatedJobs: []podreq.ReplicatedJob{{Name: "w", Replicas: ptr.To[int32](2), Template: batchv1.JobTemplateSpec{Spec: j.Spec}}}}}
	}
	podOf := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "llm-w-0-0", UID: "u-pod",
		Labels: map[string]string{podreq.JobSetUIDLabel: "u-running"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	in.JobSets = []podreq.JobSet{jobSet(job("waiting", true, true, "")), jobSet(job("running", false, true, rec))}
	in.Pods = []corev1.Pod{podOf}
	c = Build(in, o)
	for name, want := range map[string]string{
		"waiting": "queued suspended (team vision): no pod exists until the queue admits all 4 at once; its Queued event said where it stood (kubectl describe jobset waiting)",
		"running": "admitted to team vision 30m0s ago; 1 of its 4 pods exist",
	} {
		w, err := c.WhyJobSet("ml", name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(w.Summary, want) || w.Kind != "JobSet" || w.Pod != "ml/JobSet/"+name {
			t.Errorf("WhyJobSet(%s) = %q (%s %s), want it to say %q", name, w.Summary, w.Kind, w.Pod, want)
		}
	}
	if _, err := c.WhyJobSet("ml", "nope"); err == nil {
		t.Error("WhyJobSet of a missing JobSet: no error")
	}
}
