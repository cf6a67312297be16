package queue

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/contract"
)

// candidateRoom is room (one node, n1) whose single-pod holds name n1, n2
// and n3 as candidates, as HoldRoom does with HoldCandidates 3.
type candidateRoom struct{ fakeRoom }

func (r *candidateRoom) HoldRoom(pods []*corev1.Pod, scope room.Scope, expires time.Time) (room.Hold, string) {
	h, reason := r.fakeRoom.HoldRoom(pods, scope, expires)
	if reason == "" && len(pods) == 1 {
		h.Candidates = []string{"n1", "n2", "n3"}
	}
	return h, reason
}

func ownedBy(p *corev1.Pod, kind, name string) *corev1.Pod {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: &yes}}
	return p
}

// affinityNodes lists the metadata.name values of a pod's required node
// affinity, one per term; nil when it has none.
func affinityNodes(t *testing.T, p *corev1.Pod) []string {
	t.Helper()
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchFields) != 1 || term.MatchFields[0].Key != "metadata.name" || len(term.MatchFields[0].Values) != 1 {
			t.Fatalf("pod %s: term %+v is not one metadata.name requirement", p.Name, term)
		}
		out = append(out, term.MatchFields[0].Values[0])
	}
	return out
}

func admissionOf(t *testing.T, p *corev1.Pod) contract.Admission {
	t.Helper()
	rec, err := contract.ParseAdmission([]byte(p.Annotations[names.AdmissionAnnotation]))
	if err != nil {
		t.Fatalf("pod %s: admission record: %v", p.Name, err)
	}
	return rec
}

// TestNarrowingAtAdmission: the admitting update narrows a single pod that
// a controller owns to its hold's candidates, and no other.
func TestNarrowingAtAdmission(t *testing.T) {
	withAffinity := ownedBy(gpuPod("own-affinity", 1, time.Hour, true), "Job", "j3")
	withAffinity.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}}}}}
	preferred := ownedBy(gpuPod("preferred", 1, time.Hour, true), "ReplicaSet", "rs")
	preferred.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 5, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}}
	gangMember := ownedBy(gpuPod("gang-0", 1, time.Hour, true), "Job", "j4")
	gangMember.Labels = map[string]string{names.GangLabel: "g"}
	gangMember.Annotations = map[string]string{names.GangSizeAnnotation: "1"}
	pods := []runtime.Object{
		ownedBy(gpuPod("job-pod", 1, time.Hour, true), "Job", "j1"),
		gpuPod("bare", 1, time.Hour, true),
		withAffinity, preferred, gangMember,
	}
	c, client := start(t, nil, &candidateRoom{fakeRoom{free: 8}}, pods...)
	c.o.Narrow = true
	c.Pass(t.Context())

	for _, tc := range []struct {
		pod  string
		want []string // the narrowed nodes; nil: not narrowed
	}{
		{"job-pod", []string{"n1", "n2", "n3"}},
		{"preferred", []string{"n1", "n2", "n3"}},
		{"bare", nil},
		{"gang-0", nil},
	} {
		p := get(t, client, tc.pod)
		if len(p.Spec.SchedulingGates) != 0 {
			t.Errorf("%s: still gated", tc.pod)
			continue
		}
		if got := affinityNodes(t, p); !slices.Equal(got, tc.want) {
			t.Errorf("%s: narrowed to %v, want %v", tc.pod, got, tc.want)
		}
		if got := admissionOf(t, p).NarrowedTo; !slices.Equal(got, tc.want) {
			t.Errorf("%s: admission record says narrowed to %v, want %v", tc.pod, got, tc.want)
		}
	}
	if p := get(t, client, "preferred"); len(p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("preferred: its preferred node affinity was lost: %+v", p.Spec.Affinity.NodeAffinity)
	}
	p := get(t, client, "own-affinity")
	terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 0 || terms[0].MatchExpressions[0].Key != "zone" || len(admissionOf(t, p).NarrowedTo) != 0 {
		t.Errorf("own-affinity: the pod's own required affinity changed: %+v", terms)
	}

	// Narrow off: nothing narrowed.
	c, client = start(t, nil, &candidateRoom{fakeRoom{free: 8}}, ownedBy(gpuPod("job-pod", 1, time.Hour, true), "Job", "j1"))
	c.Pass(t.Context())
	if got := affinityNodes(t, get(t, client, "job-pod")); got != nil {
		t.Errorf("with Narrow off the pod was narrowed to %v", got)
	}
}

// narrowedPod is a pod admitted at admitted, narrowed to n1 and n2, with
// room held for holdTTL, unbound, with the given PodScheduled reason.
func narrowedPod(t *testing.T, name string, admitted time.Time, holdTTL time.Duration, reason string) *corev1.Pod {
	t.Helper()
	p := ownedBy(gpuPod(name, 1, time.Hour, false), "Job", "j-"+name)
	rec := contract.Admission{Version: contract.Version, AdmittedAt: admitted, Team: "vision",
		Hold:      &contract.Assignment{Version: contract.Version, Node: "n1", GPUs: []contract.AssignedGPU{{Index: 0, UUID: "GPU-0", MemoryMiB: 1024}}, Whole: true},
		HoldUntil: admitted.Add(holdTTL), NarrowedTo: []string{"n1", "n2"}}
	data, err := rec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{names.AdmissionAnnotation: string(data)}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}
	for _, n := range rec.NarrowedTo {
		p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
			p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms,
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n}}}})
	}
	if reason != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason}}
	}
	return p
}

// TestStrandedNarrowedPodIsRequeued: a narrowed pod still unschedulable
// when its hold lapsed is evicted (for its controller to recreate), once;
// one whose hold still runs, one kube-scheduler has not tried, a bare one
// and a bound one are left alone.
func TestStrandedNarrowedPodIsRequeued(t *testing.T) {
	const ttl = 5 * time.Minute
	stranded := narrowedPod(t, "stranded", t0.Add(-ttl-time.Second), ttl, corev1.PodReasonUnschedulable)
	holding := narrowedPod(t, "holding", t0.Add(-ttl+time.Minute), ttl, corev1.PodReasonUnschedulable)
	untried := narrowedPod(t, "untried", t0.Add(-ttl-time.Minute), ttl, "")
	bare := narrowedPod(t, "bare", t0.Add(-ttl-time.Minute), ttl, corev1.PodReasonUnschedulable)
	bare.OwnerReferences = nil
	bound := narrowedPod(t, "bound", t0.Add(-ttl-time.Minute), ttl, corev1.PodReasonUnschedulable)
	bound.Spec.NodeName = "n1"
	c, client := start(t, nil, &fakeRoom{free: 8}, stranded, holding, untried, bare, bound)
	c.o.HoldTTL = ttl
	var evicted []string
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			evicted = append(evicted, a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
			return true, nil, nil
		}
		return false, nil, nil
	})
	c.Pass(t.Context())
	c.Pass(t.Context()) // a second pass before the pod is gone evicts it no second time
	if !slices.Equal(evicted, []string{"stranded"}) {
		t.Errorf("evicted %v, want only the stranded pod, once", evicted)
	}
}
