package handoff

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
)

const node = "n1"

var names = contract.Default

func uuid(i int) string { return fmt.Sprintf("GPU-%04d", i) }

type podOpt func(*corev1.Pod)

func pod(name string, seq int, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Unix(int64(seq), 0)), Annotations: map[string]string{}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func container(res string, n int64, init bool) podOpt {
	return func(p *corev1.Pod) {
		c := corev1.Container{Name: fmt.Sprintf("c%d", len(p.Spec.Containers)+len(p.Spec.InitContainers)),
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}}}
		if init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
	}
}

func assigned(whole bool, mib contract.MiB, idx ...int) podOpt {
	return func(p *corev1.Pod) {
		a := contract.Assignment{Version: contract.Version, Node: node, Whole: whole}
		for _, i := range idx {
			a.GPUs = append(a.GPUs, contract.AssignedGPU{Index: i, UUID: uuid(i), MemoryMiB: mib})
		}
		b, err := a.Marshal()
		if err != nil {
			panic(err)
		}
		p.Annotations[names.AssignmentAnnotation] = string(b)
	}
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func mem(gpu int, units ...int) []string {
	var out []string
	for _, u := range units {
		out = append(out, MemoryDeviceID(uuid(gpu), u))
	}
	return out
}

func TestUpsertForgetsPodsOfOtherNodes(t *testing.T) {
	m := NewMatcher(node, names, 1024)
	m.Upsert(pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0)))
	m.Upsert(pod("b", 2))
	moved := pod("a", 1, container(names.GPU, 1, false), assigned(true, 81920, 0))
	moved.Spec.NodeName = "n2"
	m.Upsert(moved)
	if diff := cmp.Diff(map[string]string{"uid-b": "ns/b"}, m.LivePods()); diff != "" {
		t.Errorf("after a pod moved to another node, LivePods() (-want +got):\n%s", diff)
	}
	m.Delete("uid-b")
	if got := m.LivePods(); len(got) != 0 {
		t.Errorf("after Delete, LivePods() = %v, want none", got)
	}
}
