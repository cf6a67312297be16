package invariant

import (
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/fixture"
)

var names = contract.Default

const gib = contract.MiB(1024)

func TestCheck(t *testing.T) {
	quotaCfg := &quota.Config{
		Teams: map[string]quota.Team{
			"vision": {GPUs: 2, GPUMemoryGiB: 40, Borrow: quota.Limits{GPUs: 2}},
			"nlp":    {GPUs: 1, Borrow: quota.Limits{GPUs: 4}},
		},
		SharedPool:   quota.Limits{GPUs: 2},
		UnknownTeams: quota.UnlimitedUnknown,
	}
	// The same teams in a group with a pool of 2 GPUs that may borrow 1
	// from above: 3 GPUs past their guarantees in all, no shared pool.
	treeCfg := &quota.Config{
		Groups: map[string]quota.Group{"lab": {GPUs: 2, Borrow: &quota.Limits{GPUs: 1}}},
		Teams: map[string]quota.Team{
			"vision": {GPUs: 2, GPUMemoryGiB: 40, Borrow: quota.Limits{GPUs: 4}, Group: "lab"},
			"nlp":    {GPUs: 1, Borrow: quota.Limits{GPUs: 4}, Group: "lab"},
		},
		SharedPool:   quota.Limits{GPUs: 1},
		UnknownTeams: quota.UnlimitedUnknown,
	}
	// treeCfg with node pool "lab-pool" owned by group lab: vision and nlp
	// place there, through their group.
	poolCfg := *treeCfg
	poolCfg.NodePools = map[string]quota.NodePool{"lab-pool": {Owner: "lab"}}
	poolLabel := names.Domain + "/node-pool"
	tests := []struct {
		name     string
		give     []runtime.Object
		giveOpts Options
		want     []Kind
		// wantText is a fragment the first violation's text must hold.
		wantText string
	}{
		{
			name: "healthy cluster",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(4, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "s1").MemoryMiB(40*gib).Share("n1", 0, 40*gib).Running("n1").Obj(),
				fixture.Pod("a", "s2").MemoryMiB(40*gib).Share("n1", 0, 40*gib).Running("n1").Obj(),
				fixture.Pod("a", "w").GPUs(2).Whole("n1", 80*gib, 2, 3).Running("n1").Obj(),
				fixture.Pod("a", "pending").GPUs(8).Obj(),
				fixture.Pod("a", "cpu").Running("n1").Obj(),
			},
		},
		{
			name: "memory over capacity",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(4, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "s1").MemoryMiB(50*gib).Share("n1", 1, 50*gib).Running("n1").Obj(),
				fixture.Pod("a", "s2").MemoryMiB(40*gib).Share("n1", 1, 40*gib).Running("n1").Obj(),
			},
			want:     []Kind{OverCapacity},
			wantText: "90 GiB, more than its 80 GiB",
		},
		{
			name: "finished pods hold nothing",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(4, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "s1").MemoryMiB(50*gib).Share("n1", 1, 50*gib).Running("n1").Phase(corev1.PodSucceeded).Obj(),
				fixture.Pod("a", "s2").MemoryMiB(40*gib).Share("n1", 1, 40*gib).Running("n1").Obj(),
			},
		},
		{
			name: "whole GPU shared",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(4, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "w").GPUs(1).Whole("n1", 80*gib, 0).Running("n1").Obj(),
				fixture.Pod("a", "s").MemoryMiB(1*gib).Share("n1", 0, 1*gib).Running("n1").Obj(),
			},
			want:     []Kind{WholeShared},
			wantText: "held whole by a/w",
		},
		{
			name: "two whole holders",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(4, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "w1").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
				fixture.Pod("a", "w2").GPUs(2).Whole("n1", 80*gib, 1, 2).Running("n1").Obj(),
			},
			want: []Kind{WholeShared},
		},
		{
			name: "assignment names a GPU the node lacks",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "w").GPUs(1).Whole("n1", 80*gib, 5).Running("n1").Obj(),
			},
			want: []Kind{UnknownGPU},
		},
		{
			name: "partly bound gang",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "g-0").GPUs(4).Gang("g", 3).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("a", "g-1").GPUs(4).Gang("g", 3).Whole("n1", 80*gib, 4, 5, 6, 7).Running("n1").Obj(),
				fixture.Pod("a", "g-2").GPUs(4).Gang("g", 3).Obj(),
			},
			want:     []Kind{PartialGang},
			wantText: "2 of 3 members bound",
		},
		{
			name: "a gang whose first member succeeded is ending, not partial",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "g-0").GPUs(4).Gang("g", 2).Whole("n1", 80*gib, 0, 1, 2, 3).Node("n1").Phase(corev1.PodSucceeded).Obj(),
				fixture.Pod("a", "g-1").GPUs(4).Gang("g", 2).Whole("n1", 80*gib, 4, 5, 6, 7).Running("n1").Obj(),
			},
		},
		{
			name: "a failed member does not excuse a partly bound gang",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "g-0").GPUs(4).Gang("g", 3).Whole("n1", 80*gib, 0, 1, 2, 3).Node("n1").Phase(corev1.PodFailed).Obj(),
				fixture.Pod("a", "g-1").GPUs(4).Gang("g", 3).Whole("n1", 80*gib, 4, 5, 6, 7).Running("n1").Obj(),
				fixture.Pod("a", "g-2").GPUs(4).Gang("g", 3).Obj(),
			},
			want: []Kind{PartialGang},
		},
		{
			name: "a member that succeeded without a node does not end the gang",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "g-0").GPUs(4).Gang("g", 2).Phase(corev1.PodSucceeded).Obj(),
				fixture.Pod("a", "g-1").GPUs(4).Gang("g", 2).Whole("n1", 80*gib, 4, 5, 6, 7).Running("n1").Obj(),
			},
			want: []Kind{PartialGang},
		},
		{
			name: "member missing entirely counts too",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "g-0").GPUs(4).Gang("g", 3).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("a", "g-1").GPUs(4).Gang("g", 3).Whole("n1", 80*gib, 4, 5, 6, 7).Running("n1").Obj(),
			},
			want: []Kind{PartialGang},
		},
		{
			name: "gang all bound or none bound",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "g-0").GPUs(4).Gang("g", 2).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("a", "g-1").GPUs(4).Gang("g", 2).Whole("n1", 80*gib, 4, 5, 6, 7).Running("n1").Obj(),
				fixture.Pod("a", "h-0").GPUs(4).Gang("h", 2).Obj(),
				fixture.Pod("a", "h-1").GPUs(4).Gang("h", 2).Obj(),
			},
		},
		{
			name: "unhealthy GPU given to a pod that has not started",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(4).Unhealthy(1, "XID 79").Obj(),
				fixture.Pod("a", "old").MemoryMiB(10*gib).Share("n1", 1, 10*gib).Running("n1").Obj(),
				fixture.Pod("a", "new").MemoryMiB(10*gib).Share("n1", 1, 10*gib).Running("n1").Phase(corev1.PodPending).Obj(),
			},
			want:     []Kind{UnhealthyGPU},
			wantText: "a/new",
		},
		{
			name: "bound without assignment",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "p").GPUs(1).Running("n1").Obj(),
			},
			want: []Kind{MissingAssign},
		},
		{
			name: "assignment for another node",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(4).Obj(), fixture.GPUNode("n2").GPUs(2, 80*gib).NVLink(4).Obj(),
				fixture.Pod("a", "p").GPUs(1).Whole("n2", 80*gib, 0).Running("n1").Obj(),
			},
			want: []Kind{NodeMismatch, UnknownGPU},
		},
		{
			name: "unreadable assignment",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(4).Obj(),
				func() *corev1.Pod {
					p := fixture.Pod("a", "p").GPUs(1).Running("n1").Obj()
					p.Annotations = map[string]string{names.AssignmentAnnotation: "{"}
					return p
				}(),
			},
			want: []Kind{BadAssignment},
		},
		{
			name: "namespace filter skips other namespaces",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(4).Obj(),
				fixture.Pod("b", "p").GPUs(1).Running("n1").Obj(),
			},
			giveOpts: Options{Namespace: "a"},
		},
		{
			name: "quota held, pending pods count",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"), fixture.Namespace("lm", "nlp"), fixture.Namespace("x", "other"),
				fixture.Pod("cv", "w").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
				fixture.Pod("cv", "q").GPUs(2).Obj(),
				fixture.Pod("cv", "m").MemoryMiB(40*gib).Share("n1", 7, 40*gib).Running("n1").Obj(),
				fixture.Pod("x", "big").GPUs(4).Whole("n1", 80*gib, 2, 3, 4, 5).Running("n1").Obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
		},
		{
			name: "team over guarantee plus borrow",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(4).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("cv", "q").GPUs(1).Obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
			want:     []Kind{QuotaExceeded, PoolExceeded},
			wantText: "team vision",
		},
		{
			name: "queued pods hold no quota",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(4).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("cv", "q").GPUs(8).Gated().Obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
		},
		{
			name: "teams together over the shared pool",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"), fixture.Namespace("lm", "nlp"),
				fixture.Pod("cv", "w").GPUs(4).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("lm", "q").GPUs(2).Obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
			want:     []Kind{PoolExceeded},
			wantText: "teams borrow 3 GPUs",
		},
		{
			name: "pods in their team's node pool",
			give: []runtime.Object{fixture.GPUNode("p1").GPUs(8, 80*gib).Label(poolLabel, "lab-pool").Obj(),
				fixture.GPUNode("n1").GPUs(8, 80*gib).Obj(), fixture.Namespace("cv", "vision"), fixture.Namespace("x", "other"),
				fixture.Pod("cv", "w").GPUs(2).Whole("p1", 80*gib, 0, 1).Running("p1").Obj(),
				fixture.Pod("x", "o").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
				fixture.Pod("x", "cpu").Running("p1").Obj(),
			},
			giveOpts: Options{Quota: &poolCfg},
		},
		{
			name: "a team's pod outside its node pool",
			give: []runtime.Object{fixture.GPUNode("p1").GPUs(8, 80*gib).Label(poolLabel, "lab-pool").Obj(),
				fixture.GPUNode("n1").GPUs(8, 80*gib).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
			},
			giveOpts: Options{Quota: &poolCfg},
			want:     []Kind{OutsidePool},
			wantText: "team vision places on node pool lab-pool, but the pod runs on node n1 of pool (none)",
		},
		{
			name: "another team's pod inside a node pool",
			give: []runtime.Object{fixture.GPUNode("p1").GPUs(8, 80*gib).Label(poolLabel, "lab-pool").Obj(),
				fixture.Namespace("x", "other"),
				fixture.Pod("x", "o").MemoryMiB(10*gib).Share("p1", 0, 10*gib).Running("p1").Obj(),
			},
			giveOpts: Options{Quota: &poolCfg},
			want:     []Kind{OutsidePool},
			wantText: "team other places on node pool (none), but the pod runs on node p1 of pool lab-pool",
		},
		{
			name: "a tree's pools lend past the shared pool",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"), fixture.Namespace("lm", "nlp"),
				fixture.Pod("cv", "w").GPUs(4).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("lm", "q").GPUs(2).Obj(),
			},
			giveOpts: Options{Quota: treeCfg},
		},
		{
			name: "a group borrows past its limit",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"), fixture.Namespace("lm", "nlp"),
				fixture.Pod("cv", "w").GPUs(5).Obj(),
				fixture.Pod("lm", "q").GPUs(2).Obj(),
			},
			giveOpts: Options{Quota: treeCfg},
			want:     []Kind{PoolExceeded, PoolExceeded},
			wantText: "group lab: its teams borrow 2 GPUs past the group's pool 2 GPUs, more than its borrow limit 1 GPU",
		},
		{
			name: "a forged assignment is checked against the kubelet's grant",
			// w really holds GPU 1 (the grant) but its record names GPU 0;
			// the next pod was then given GPU 1 too.
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(2).Obj(),
				fixture.Pod("a", "w").GPUs(1).Whole("n1", 80*gib, 0).Running("n1").Obj(),
				fixture.Pod("a", "next").GPUs(1).Whole("n1", 80*gib, 1).Running("n1").Obj(),
			},
			giveOpts: Options{Grants: map[types.UID]Grant{
				"uid-w":    {Whole: []string{fixture.UUID("n1", 1)}},
				"uid-next": {Whole: []string{fixture.UUID("n1", 1)}},
			}},
			want:     []Kind{GrantMismatch, WholeShared},
			wantText: "the kubelet granted the pod [" + fixture.UUID("n1", 1) + "]",
		},
		{
			name: "a removed assignment still counts what was granted",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(2, 80*gib).NVLink(2).Obj(),
				fixture.Pod("a", "w").GPUs(1).Running("n1").Obj(),
				fixture.Pod("a", "next").GPUs(1).Whole("n1", 80*gib, 1).Running("n1").Obj(),
			},
			giveOpts: Options{Grants: map[types.UID]Grant{"uid-w": {Whole: []string{fixture.UUID("n1", 1)}}}},
			want:     []Kind{MissingAssign, WholeShared},
		},
		{
			name: "a record naming another team does not move the pod's quota",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(4).Whole("n1", 80*gib, 0, 1, 2, 3).Running("n1").Obj(),
				fixture.Pod("cv", "x").GPUs(1).Whole("n1", 80*gib, 4).Running("n1").
					Annotation(names.AdmissionAnnotation, `{"version":"v1","admittedAt":"2026-01-01T00:00:00Z","team":"nlp"}`).Obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
			want:     []Kind{QuotaExceeded, PoolExceeded},
			wantText: "team vision",
		},
		{
			name: "a running Job queued suspended holds quota for the pods not made yet",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
				queuedJob("cv", "train", 3, false),
			},
			giveOpts: Options{Quota: quotaCfg},
			want:     []Kind{QuotaExceeded, PoolExceeded},
			wantText: "team vision",
		},
		{
			name: "a Job queued suspended: its pods count once, suspended it holds nothing",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
				queuedJob("cv", "train", 2, false),
				fixture.Pod("cv", "train-0").GPUs(1).Whole("n1", 80*gib, 2).Label(batchv1.ControllerUidLabel, "uid-job-train").Running("n1").Obj(),
				fixture.Pod("cv", "train-1").GPUs(1).Whole("n1", 80*gib, 3).Label(batchv1.ControllerUidLabel, "uid-job-train").Running("n1").Obj(),
				queuedJob("cv", "waiting", 8, true),
			},
			giveOpts: Options{Quota: quotaCfg},
		},
		{
			name: "a running JobSet queued suspended holds quota for the pods not made yet",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
			},
			giveOpts: Options{Quota: quotaCfg, JobSets: []podreq.JobSet{queuedJobSet("cv", "llm", 3, false)}},
			want:     []Kind{QuotaExceeded, PoolExceeded},
			wantText: "team vision",
		},
		{
			name: "a JobSet queued suspended: its pods count once, suspended it holds nothing",
			give: []runtime.Object{fixture.GPUNode("n1").GPUs(8, 80*gib).NVLink(4).Obj(), fixture.Namespace("cv", "vision"),
				fixture.Pod("cv", "w").GPUs(2).Whole("n1", 80*gib, 0, 1).Running("n1").Obj(),
				fixture.Pod("cv", "llm-w-0-0").GPUs(1).Whole("n1", 80*gib, 2).Label(podreq.JobSetUIDLabel, "uid-jobset-llm").Running("n1").Obj(),
				fixture.Pod("cv", "llm-w-1-0").GPUs(1).Whole("n1", 80*gib, 3).Label(podreq.JobSetUIDLabel, "uid-jobset-llm").Running("n1").Obj(),
			},
			giveOpts: Options{Quota: quotaCfg, JobSets: []podreq.JobSet{queuedJobSet("cv", "llm", 2, false), queuedJobSet("cv", "waiting", 8, true)}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.give...)
			got, err := Check(t.Context(), client, tc.giveOpts)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []Kind
			for _, v := range got {
				kinds = append(kinds, v.Kind)
			}
			if !slices.Equal(kinds, tc.want) {
				t.Fatalf("Check() kinds = %v, want %v\n%s", kinds, tc.want, Summary(got))
			}
			if tc.wantText != "" && !strings.Contains(got[0].String(), tc.wantText) {
				t.Errorf("Check()[0] = %q, want it to contain %q", got[0], tc.wantText)
			}
		})
	}
}

// queuedJob is a Job queued suspended (marked) of n one-GPU pods.
func queuedJob(ns, name string, n int32, suspended bool) *batchv1.Job {
	tmpl := fixture.Pod(ns, "t").GPUs(1).Obj()
	return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-job-" + name),
		Annotations: map[string]string{names.QueuedJobAnnotation: "true"}},
		Spec: batchv1.JobSpec{Parallelism: &n, Completions: &n, Suspend: &suspended, Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}
}

// queuedJobSet is a JobSet queued suspended (marked) of n Jobs of one
// one-GPU pod.
func queuedJobSet(ns, name string, n int32, suspended bool) podreq.JobSet {
	tmpl := fixture.Pod(ns, "t").GPUs(1).Obj()
	js := podreq.JobSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-jobset-" + name),
		Annotations: map[string]string{names.QueuedJobAnnotation: "true"}}}
	js.Spec.Suspend = &suspended
	js.Spec.ReplicatedJobs = []podreq.ReplicatedJob{{Name: "w", Replicas: &n,
		Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: tmpl.Spec}}}}}
	return js
}

func TestSummary(t *testing.T) {
	if got := Summary(nil); got != "no violations" {
		t.Errorf("Summary(nil) = %q", got)
	}
	got := Summary([]Violation{{Kind: PartialGang, Object: "gang a/g", Message: "1 of 2 members bound"}})
	if want := "PartialGang: gang a/g: 1 of 2 members bound"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}
