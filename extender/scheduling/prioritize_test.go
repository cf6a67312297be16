package scheduling_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/extender/scheduling/schedulingtest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/fixture"
)

func TestPrioritize(t *testing.T) {
	// Three 2-GPU nodes with 0, 20 and 40 GiB in use on GPU 0, and one with 21.
	objs := []runtime.Object{gpuNode("n0", 2, 1).Obj()}
	for _, used := range []contract.MiB{20, 21, 40} {
		n := fmt.Sprintf("n%d", used)
		objs = append(objs, gpuNode(n, 2, 1).Obj(),
			fixture.Pod(ns, fmt.Sprintf("u%d", used)).MemoryMiB(used*gib).Running(n).Share(n, 0, used*gib).Obj())
	}
	nodes := []string{"n0", "n20", "n21", "n40"}
	tests := []struct {
		policy string
		want   map[string]int64
	}{
		// binpack: fuller first; 20 vs 21 GiB differ by little but do not tie.
		{"binpack", map[string]int64{"n40": 10, "n21": 9, "n20": 8, "n0": 7}},
		{"spread", map[string]int64{"n0": 10, "n20": 9, "n21": 8, "n40": 7}},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			e := schedulingtest.New(t, schedulingtest.Options{Policy: tc.policy}, objs...)
			got, err := e.Ext.Prioritize(e.Ctx, schedulingtest.Args(fixture.Pod(ns, "p").MemoryMiB(10*gib).Obj(), nodes...))
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]int64{}
			for _, h := range got {
				m[h.Host] = h.Score
			}
			if diff := cmp.Diff(tc.want, m); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("pod without Rota resources is neutral", func(t *testing.T) {
		e := schedulingtest.New(t, schedulingtest.Options{}, objs...)
		got, err := e.Ext.Prioritize(e.Ctx, schedulingtest.Args(fixture.Pod(ns, "p").Obj(), "n0", "n40"))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(extenderv1.HostPriorityList{{Host: "n0"}, {Host: "n40"}}, got); diff != "" {
			t.Errorf("scores (-want +got):\n%s", diff)
		}
	})
}
