package server

import (
	"net/http"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func TestPrioritize(t *testing.T) {
	// Three 2-GPU nodes with 0, 20 and 40 GiB in use on GPU 0, and a full one.
	objs := []runtime.Object{node("n0", 2, 80, 1, "l"), node("n20", 2, 80, 1, "l"), node("n40", 2, 80, 1, "l"),
		node("n21", 2, 80, 1, "l"),
		bound(pod("u20").mem(20).obj(), "n20", 0, 20*1024, false),
		bound(pod("u21").mem(21).obj(), "n21", 0, 21*1024, false),
		bound(pod("u40").mem(40).obj(), "n40", 0, 40*1024, false)}
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
			f := newFixture(t, fixtureOpts{policy: tc.policy}, objs...)
			var got extenderv1.HostPriorityList
			if code := f.post("/prioritize", args(pod("p").mem(10).obj(), "n0", "n20", "n21", "n40"), &got); code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			m := map[string]int64{}
			for _, h := range got {
				m[h.Host] = h.Score
			}
			if !reflect.DeepEqual(m, tc.want) {
				t.Errorf("scores = %v, want %v", m, tc.want)
			}
		})
	}
	t.Run("pod without Rota resources is neutral", func(t *testing.T) {
		f := newFixture(t, fixtureOpts{}, objs...)
		var got extenderv1.HostPriorityList
		f.post("/prioritize", args(pod("p").obj(), "n0", "n40"), &got)
		want := extenderv1.HostPriorityList{{Host: "n0"}, {Host: "n40"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}
