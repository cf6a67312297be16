package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/quota"
)

// guardOver starts a Guard over fake informers: namespace "ml" is team
// vision, namespace "nlp" team nlp.
func guardOver(t *testing.T, cfg *quota.Config, objs ...runtime.Object) *Guard {
	t.Helper()
	objs = append(objs,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{names.TeamLabel: "vision"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nlp", Labels: map[string]string{names.TeamLabel: "nlp"}}})
	f := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	pods, nss := f.Core().V1().Pods().Informer(), f.Core().V1().Namespaces().Informer()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nss.HasSynced)
	return NewGuard(GuardOptions{Names: names, Pods: pods, Namespaces: nss, Quota: func() (*quota.Config, bool) { return cfg, true }})
}

func running(p *corev1.Pod, ns string) *corev1.Pod {
	p.Namespace, p.Spec.NodeName, p.Status.Phase = ns, "n1", corev1.PodRunning
	return p
}

func allocs(pods ...*corev1.Pod) []*ledger.Allocation {
	var out []*ledger.Allocation
	for _, p := range pods {
		out = append(out, &ledger.Allocation{PodUID: string(p.UID), Pod: p.Namespace + "/" + p.Name, Node: "n1"})
	}
	return out
}

func TestGuardSpare(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}, "nlp": {GPUs: 2}}}
	n1 := running(gpuPod("n1", 1, time.Hour, false), "nlp")
	n2 := running(gpuPod("n2", 1, time.Hour, false), "nlp")
	n3 := running(gpuPod("n3", 1, time.Hour, false), "nlp")
	v1 := running(gpuPod("v1", 1, time.Hour, false), "ml")
	preemptor := gpuPod("hi", 2, 0, false)
	g := guardOver(t, cfg, n1, n2, n3, v1)
	tests := []struct {
		name    string
		victims []*ledger.Allocation
		want    []string
	}{
		{name: "nlp gives back the GPU it borrowed", victims: allocs(n1)},
		{name: "but not one of its guarantee", victims: allocs(n1, n2), want: []string{"uid-n1", "uid-n2"}},
		{name: "the preemptor's own team is never spared", victims: allocs(v1)},
		{name: "only the team that would go below is kept", victims: allocs(n1, n2, v1), want: []string{"uid-n1", "uid-n2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			preemptor.Namespace = "ml"
			keep, why := g.For(preemptor)(tt.victims)
			var got []string
			for _, a := range tt.victims {
				if keep[a.PodUID] {
					got = append(got, a.PodUID)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("kept victims (-want +got):\n%s", d)
			}
			if (len(tt.want) > 0) != strings.Contains(why, "team nlp uses 3 GPUs of its 2 GPUs guarantee") {
				t.Errorf("why = %q", why)
			}
		})
	}
	// Without a quota configuration nothing was promised.
	if keep, _ := guardOver(t, nil, n1, n2, n3).For(preemptor)(allocs(n1, n2, n3)); len(keep) != 0 {
		t.Errorf("without a quota configuration the guard kept %v", keep)
	}
}
