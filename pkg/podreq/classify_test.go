package podreq

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
)

// classifyPod is a pod bound to node with the given containers, priority 5,
// not preemptible, and, when as is not "", that assignment annotation.
func classifyPod(node, as string, containers ...corev1.Container) *corev1.Pod {
	p := pod(containers...)
	prio := int32(5)
	p.Spec.NodeName, p.Spec.Priority = node, &prio
	p.Labels = map[string]string{names.PreemptibleLabel: "false"}
	if as != "" {
		p.Annotations = map[string]string{names.AssignmentAnnotation: as}
	}
	p.Status.Phase = corev1.PodRunning
	return p
}

// assignmentOn is an 8 GiB share of GPU 1 of node.
func assignmentOn(node string) *contract.Assignment {
	return &contract.Assignment{Version: contract.Version, Node: node,
		GPUs: []contract.AssignedGPU{{Index: 1, UUID: "GPU-1", MemoryMiB: 8192}}}
}

func assignmentDoc(t *testing.T, node string) string {
	t.Helper()
	data, err := assignmentOn(node).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// assignmentRead is assignmentOn as a reader gets it back from the
// annotation (with whatever Marshal adds, such as the rotanext build's
// writer).
func assignmentRead(t *testing.T, node string) *contract.Assignment {
	t.Helper()
	a, err := contract.ParseAssignment([]byte(assignmentDoc(t, node)))
	if err != nil {
		t.Fatal(err)
	}
	return &a
}

func TestClassify(t *testing.T) {
	onN1, onN2 := assignmentDoc(t, "n1"), assignmentDoc(t, "n2")
	cpu := ctr("cpu", "2", "memory", "1Gi")
	share := ctr(names.GPUMemory, "8", "cpu", "2", "memory", "1Gi")
	gpuFree := &ledger.Allocation{PodUID: "uid-1", Pod: "ns/p", Node: "n1", CPUMilli: 2000, HostMemoryMiB: 1024, Priority: 5}
	tests := []struct {
		name        string
		give        *corev1.Pod
		want        Classification
		wantProblem string
	}{
		{
			name: "terminal, even with an assignment",
			give: func() *corev1.Pod {
				p := classifyPod("n1", onN1, share)
				p.Status.Phase = corev1.PodSucceeded
				return p
			}(),
			want: Classification{Kind: KindTerminal},
		},
		{
			name: "failed",
			give: func() *corev1.Pod { p := classifyPod("n1", "{", share); p.Status.Phase = corev1.PodFailed; return p }(),
			want: Classification{Kind: KindTerminal},
		},
		{
			name: "unbound with an assignment holds nothing",
			give: classifyPod("", onN1, share),
			want: Classification{Kind: KindUnbound},
		},
		{
			name: "unbound with an unreadable assignment",
			give: classifyPod("", "{", share),
			want: Classification{Kind: KindUnbound},
		},
		{
			name:        "invalid assignment: nothing accounted, CPU neither",
			give:        classifyPod("n1", "{", share),
			want:        Classification{Kind: KindInvalid, Node: "n1", Err: errors.New("any")},
			wantProblem: "Invalid GPU assignment annotation on a bound pod; its GPUs are not accounted: pod ns/p annotation",
		},
		{
			name:        "asks for GPUs without assignment: CPU accounted",
			give:        classifyPod("n1", "", share),
			want:        Classification{Kind: KindUnaccounted, Node: "n1", Allocation: gpuFree},
			wantProblem: "Bound pod asks for GPUs but carries no assignment; it was not bound through Rota",
		},
		{
			name: "asks for GPUs in an init container only",
			give: func() *corev1.Pod {
				p := classifyPod("n1", "", cpu)
				p.Spec.InitContainers = []corev1.Container{ctr(names.GPU, "1")}
				return p
			}(),
			want:        Classification{Kind: KindUnaccounted, Node: "n1", Allocation: gpuFree},
			wantProblem: "Bound pod asks for GPUs but carries no assignment",
		},
		{
			name:        "assignment for another node: nothing accounted",
			give:        classifyPod("n1", onN2, share),
			want:        Classification{Kind: KindWrongNode, Node: "n1", Assignment: assignmentRead(t, "n2")},
			wantProblem: "GPU assignment names another node than the pod is bound to; its GPUs are not accounted (assigned node n2, bound to n1)",
		},
		{
			name: "GPU-free: CPU and memory",
			give: classifyPod("n1", "", cpu),
			want: Classification{Kind: KindGPUFree, Node: "n1", Allocation: gpuFree},
		},
		{
			name: "GPU-free taking nothing: no allocation",
			give: classifyPod("n1", "", corev1.Container{Name: "c"}),
			want: Classification{Kind: KindGPUFree, Node: "n1"},
		},
		{
			name: "allocated",
			give: classifyPod("n1", onN1, share),
			want: Classification{Kind: KindAllocated, Node: "n1", Assignment: assignmentRead(t, "n1"),
				Allocation: &ledger.Allocation{PodUID: "uid-1", Pod: "ns/p", Node: "n1", State: ledger.Committed,
					GPUs: []ledger.Share{{Index: 1, UUID: "GPU-1", MemoryMiB: 8192}}, CPUMilli: 2000, HostMemoryMiB: 1024, Priority: 5}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Classify(tc.give, names)
			// Errors by presence (the text is checked through Problem).
			errSet := cmp.Comparer(func(a, b error) bool { return (a == nil) == (b == nil) })
			if d := cmp.Diff(tc.want, got, errSet); d != "" {
				t.Errorf("Classify() mismatch (-want +got):\n%s", d)
			}
			if got.Kind.Problem() != (tc.wantProblem != "") {
				t.Errorf("%s.Problem() = %v", got.Kind, got.Kind.Problem())
			}
			if p := got.Problem(); !strings.HasPrefix(p, tc.wantProblem) || (tc.wantProblem == "") != (p == "") {
				t.Errorf("Problem() = %q, want it to start with %q", p, tc.wantProblem)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindTerminal: "Terminal", KindAllocated: "Allocated", 0: "Kind(0)", 99: "Kind(99)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

// GangKey reads the labels only: a member whose size annotation is broken
// still has its gang's key; GangOf's key is GangKey's.
func TestGangKey(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		annots map[string]string
		want   string
	}{
		{"none", nil, nil, ""},
		{"gang label", map[string]string{names.GangLabel: "g"}, map[string]string{names.GangSizeAnnotation: "2"}, "ns/g"},
		{"gang label, size missing", map[string]string{names.GangLabel: "g"}, nil, "ns/g"},
		{"gang label, size broken", map[string]string{names.GangLabel: "g"}, map[string]string{names.GangSizeAnnotation: "two"}, "ns/g"},
		{"pod group", map[string]string{contract.PodGroupLabel: "pg"}, nil, "ns/pg"},
		{"gang label wins", map[string]string{names.GangLabel: "g", contract.PodGroupLabel: "pg"}, nil, "ns/g"},
		{"empty gang label falls back to the pod group", map[string]string{names.GangLabel: "", contract.PodGroupLabel: "pg"}, nil, "ns/pg"},
		{"empty labels", map[string]string{names.GangLabel: "", contract.PodGroupLabel: ""}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod()
			p.Labels, p.Annotations = tc.labels, tc.annots
			if got := GangKey(p, names); got != tc.want {
				t.Errorf("GangKey() = %q, want %q", got, tc.want)
			}
			if ref, err := GangOf(p, names); err == nil && ref != nil && ref.Key != tc.want {
				t.Errorf("GangOf().Key = %q, GangKey() = %q", ref.Key, tc.want)
			}
		})
	}
}

func TestAllocatable(t *testing.T) {
	n := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("95500m"), corev1.ResourceMemory: resource.MustParse("1025Mi")}}}
	q := n.Status.Allocatable[corev1.ResourceMemory]
	q.Add(resource.MustParse("512Ki")) // rounded down
	n.Status.Allocatable[corev1.ResourceMemory] = q
	if cpu, mem := Allocatable(n); cpu != 95500 || mem != 1025 {
		t.Errorf("Allocatable() = %dm, %v; want 95500m, 1025 MiB", cpu, mem)
	}
	if cpu, mem := Allocatable(&corev1.Node{}); cpu != 0 || mem != 0 {
		t.Errorf("Allocatable(no status) = %dm, %v; want 0, 0", cpu, mem)
	}
}
