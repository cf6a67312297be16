package invariant

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

var names = contract.Default

const gib = contract.MiB(1024)

// gpuNode is a node with n GPUs of mem each; the GPUs in unhealthy are marked Unhealthy.
func gpuNode(name string, n int, mem contract.MiB, unhealthy ...int) *corev1.Node {
	t := contract.Topology{Version: contract.Version, MemoryUnitMiB: gib}
	for i := range n {
		g := contract.TopologyGPU{Index: i, UUID: uuid(name, i), Model: "H100", MemoryMiB: mem, Island: i / 4, Health: contract.Healthy}
		if slices.Contains(unhealthy, i) {
			g.Health, g.Reason = contract.Unhealthy, "XID 79"
		}
		t.GPUs = append(t.GPUs, g)
	}
	data, err := t.Marshal()
	if err != nil {
		panic(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{names.TopologyAnnotation: string(data)}}}
}

func uuid(node string, i int) string { return fmt.Sprintf("GPU-%s-%d", node, i) }

type podB struct{ p *corev1.Pod }

func pod(ns, name string) *podB {
	return &podB{p: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}}
}

func (b *podB) res(name, q string) *podB {
	rl := corev1.ResourceList{corev1.ResourceName(name): resource.MustParse(q)}
	b.p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
	return b
}
func (b *podB) mem(units int) *podB { return b.res(names.GPUMemory, fmt.Sprint(units)) }
func (b *podB) gpus(n int) *podB    { return b.res(names.GPU, fmt.Sprint(n)) }
func (b *podB) on(node string) *podB {
	b.p.Spec.NodeName = node
	b.p.Status.Phase = corev1.PodRunning
	return b
}
func (b *podB) phase(ph corev1.PodPhase) *podB { b.p.Status.Phase = ph; return b }
func (b *podB) gang(name string, size int) *podB {
	b.p.Labels = map[string]string{names.GangLabel: name}
	b.p.Annotations = map[string]string{names.GangSizeAnnotation: fmt.Sprint(size)}
	return b
}

// share assigns units GiB of GPU idx of node.
func (b *podB) share(node string, idx int, units int) *podB {
	return b.assign(contract.Assignment{Version: contract.Version, Node: node,
		GPUs: []contract.AssignedGPU{{Index: idx, UUID: uuid(node, idx), MemoryMiB: contract.MiB(units) * gib}}})
}

// whole assigns GPUs idxs of node whole.
func (b *podB) whole(node string, idxs ...int) *podB {
	a := contract.Assignment{Version: contract.Version, Node: node, Whole: true}
	for _, i := range idxs {
		a.GPUs = append(a.GPUs, contract.AssignedGPU{Index: i, UUID: uuid(node, i), MemoryMiB: 80 * gib})
	}
	return b.assign(a)
}

func (b *podB) assign(a contract.Assignment) *podB {
	data, err := a.Marshal()
	if err != nil {
		panic(err)
	}
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[names.AssignmentAnnotation] = string(data)
	return b
}
func (b *podB) obj() *corev1.Pod { return b.p.DeepCopy() }
func (b *podB) queued() *podB {
	b.p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: names.QueueGate}}
	return b
}

func team(name, t string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.TeamLabel: t}}}
}

func TestCheck(t *testing.T) {
	quotaCfg := &quota.Config{
		Teams: map[string]quota.Team{
			"vision": {GPUs: 2, GPUMemoryGiB: 40, Borrow: quota.Limits{GPUs: 2}},
			"nlp":    {GPUs: 1, Borrow: quota.Limits{GPUs: 4}},
		},
		SharedPool:   quota.Limits{GPUs: 2},
		UnknownTeams: quota.UnlimitedUnknown,
	}
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
			give: []runtime.Object{gpuNode("n1", 4, 80*gib),
				pod("a", "s1").mem(40).share("n1", 0, 40).on("n1").obj(),
				pod("a", "s2").mem(40).share("n1", 0, 40).on("n1").obj(),
				pod("a", "w").gpus(2).whole("n1", 2, 3).on("n1").obj(),
				pod("a", "pending").gpus(8).obj(),
				pod("a", "cpu").on("n1").obj(),
			},
		},
		{
			name: "memory over capacity",
			give: []runtime.Object{gpuNode("n1", 4, 80*gib),
				pod("a", "s1").mem(50).share("n1", 1, 50).on("n1").obj(),
				pod("a", "s2").mem(40).share("n1", 1, 40).on("n1").obj(),
			},
			want:     []Kind{OverCapacity},
			wantText: "90 GiB, more than its 80 GiB",
		},
		{
			name: "finished pods hold nothing",
			give: []runtime.Object{gpuNode("n1", 4, 80*gib),
				pod("a", "s1").mem(50).share("n1", 1, 50).on("n1").phase(corev1.PodSucceeded).obj(),
				pod("a", "s2").mem(40).share("n1", 1, 40).on("n1").obj(),
			},
		},
		{
			name: "whole GPU shared",
			give: []runtime.Object{gpuNode("n1", 4, 80*gib),
				pod("a", "w").gpus(1).whole("n1", 0).on("n1").obj(),
				pod("a", "s").mem(1).share("n1", 0, 1).on("n1").obj(),
			},
			want:     []Kind{WholeShared},
			wantText: "held whole by a/w",
		},
		{
			name: "two whole holders",
			give: []runtime.Object{gpuNode("n1", 4, 80*gib),
				pod("a", "w1").gpus(2).whole("n1", 0, 1).on("n1").obj(),
				pod("a", "w2").gpus(2).whole("n1", 1, 2).on("n1").obj(),
			},
			want: []Kind{WholeShared},
		},
		{
			name: "assignment names a GPU the node lacks",
			give: []runtime.Object{gpuNode("n1", 2, 80*gib),
				pod("a", "w").gpus(1).whole("n1", 5).on("n1").obj(),
			},
			want: []Kind{UnknownGPU},
		},
		{
			name: "partly bound gang",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib),
				pod("a", "g-0").gpus(4).gang("g", 3).whole("n1", 0, 1, 2, 3).on("n1").obj(),
				pod("a", "g-1").gpus(4).gang("g", 3).whole("n1", 4, 5, 6, 7).on("n1").obj(),
				pod("a", "g-2").gpus(4).gang("g", 3).obj(),
			},
			want:     []Kind{PartialGang},
			wantText: "2 of 3 members bound",
		},
		{
			name: "member missing entirely counts too",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib),
				pod("a", "g-0").gpus(4).gang("g", 3).whole("n1", 0, 1, 2, 3).on("n1").obj(),
				pod("a", "g-1").gpus(4).gang("g", 3).whole("n1", 4, 5, 6, 7).on("n1").obj(),
			},
			want: []Kind{PartialGang},
		},
		{
			name: "gang all bound or none bound",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib),
				pod("a", "g-0").gpus(4).gang("g", 2).whole("n1", 0, 1, 2, 3).on("n1").obj(),
				pod("a", "g-1").gpus(4).gang("g", 2).whole("n1", 4, 5, 6, 7).on("n1").obj(),
				pod("a", "h-0").gpus(4).gang("h", 2).obj(),
				pod("a", "h-1").gpus(4).gang("h", 2).obj(),
			},
		},
		{
			name: "unhealthy GPU given to a pod that has not started",
			give: []runtime.Object{gpuNode("n1", 2, 80*gib, 1),
				pod("a", "old").mem(10).share("n1", 1, 10).on("n1").obj(),
				pod("a", "new").mem(10).share("n1", 1, 10).on("n1").phase(corev1.PodPending).obj(),
			},
			want:     []Kind{UnhealthyGPU},
			wantText: "a/new",
		},
		{
			name: "bound without assignment",
			give: []runtime.Object{gpuNode("n1", 2, 80*gib),
				pod("a", "p").gpus(1).on("n1").obj(),
			},
			want: []Kind{MissingAssign},
		},
		{
			name: "assignment for another node",
			give: []runtime.Object{gpuNode("n1", 2, 80*gib), gpuNode("n2", 2, 80*gib),
				pod("a", "p").gpus(1).whole("n2", 0).on("n1").obj(),
			},
			want: []Kind{NodeMismatch, UnknownGPU},
		},
		{
			name: "unreadable assignment",
			give: []runtime.Object{gpuNode("n1", 2, 80*gib),
				func() *corev1.Pod {
					p := pod("a", "p").gpus(1).on("n1").obj()
					p.Annotations = map[string]string{names.AssignmentAnnotation: "{"}
					return p
				}(),
			},
			want: []Kind{BadAssignment},
		},
		{
			name: "namespace filter skips other namespaces",
			give: []runtime.Object{gpuNode("n1", 2, 80*gib),
				pod("b", "p").gpus(1).on("n1").obj(),
			},
			giveOpts: Options{Namespace: "a"},
		},
		{
			name: "quota held, pending pods count",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib), team("cv", "vision"), team("lm", "nlp"), team("x", "other"),
				pod("cv", "w").gpus(2).whole("n1", 0, 1).on("n1").obj(),
				pod("cv", "q").gpus(2).obj(),
				pod("cv", "m").mem(40).share("n1", 7, 40).on("n1").obj(),
				pod("x", "big").gpus(4).whole("n1", 2, 3, 4, 5).on("n1").obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
		},
		{
			name: "team over guarantee plus borrow",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib), team("cv", "vision"),
				pod("cv", "w").gpus(4).whole("n1", 0, 1, 2, 3).on("n1").obj(),
				pod("cv", "q").gpus(1).obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
			want:     []Kind{QuotaExceeded, PoolExceeded},
			wantText: "team vision",
		},
		{
			name: "queued pods hold no quota",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib), team("cv", "vision"),
				pod("cv", "w").gpus(4).whole("n1", 0, 1, 2, 3).on("n1").obj(),
				pod("cv", "q").gpus(8).queued().obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
		},
		{
			name: "teams together over the shared pool",
			give: []runtime.Object{gpuNode("n1", 8, 80*gib), team("cv", "vision"), team("lm", "nlp"),
				pod("cv", "w").gpus(4).whole("n1", 0, 1, 2, 3).on("n1").obj(),
				pod("lm", "q").gpus(2).obj(),
			},
			giveOpts: Options{Quota: quotaCfg},
			want:     []Kind{PoolExceeded},
			wantText: "teams borrow 3 GPUs",
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

func TestSummary(t *testing.T) {
	if got := Summary(nil); got != "no violations" {
		t.Errorf("Summary(nil) = %q", got)
	}
	got := Summary([]Violation{{Kind: PartialGang, Object: "gang a/g", Message: "1 of 2 members bound"}})
	if want := "PartialGang: gang a/g: 1 of 2 members bound"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}
