package report

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestNodeQuarantine(t *testing.T) {
	names := contract.Default
	taint := corev1.Taint{Key: names.QuarantineTaint, Effect: corev1.TaintEffectNoSchedule}
	node := func(ann string, taints ...corev1.Taint) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: taints}}
		if ann != "-" {
			n.Annotations = map[string]string{names.QuarantineAnnotation: ann}
		}
		return n
	}
	tests := []struct {
		name            string
		give            corev1.Node
		want            Quarantine
		wantQuarantined bool
		wantTargets     []string
	}{
		{"none", node("-"), Quarantine{Node: "n1"}, false, nil},
		{"empty annotation", node(""), Quarantine{Node: "n1"}, false, nil},
		{"node and GPUs, as the controller writes them", node("GPU-b, node ,GPU-a,GPU-b", taint),
			Quarantine{Node: "n1", WholeNode: true, GPUs: []string{"GPU-a", "GPU-b"}, Tainted: true}, true,
			[]string{"node", "GPU-a", "GPU-b"}},
		{"GPU only", node("GPU-a"), Quarantine{Node: "n1", GPUs: []string{"GPU-a"}}, true, []string{"GPU-a"}},
		{"taint only", node("-", taint), Quarantine{Node: "n1", Tainted: true}, true, []string{"node"}},
		{"release pending", node("release", taint), Quarantine{Node: "n1", Tainted: true, ReleasePending: true}, false, []string{"node"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NodeQuarantine(&tc.give, names)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("NodeQuarantine = %+v, want %+v", got, tc.want)
			}
			if got.Quarantined() != tc.wantQuarantined {
				t.Errorf("Quarantined() = %v, want %v", got.Quarantined(), tc.wantQuarantined)
			}
			if ts := got.Targets(); !reflect.DeepEqual(ts, tc.wantTargets) {
				t.Errorf("Targets() = %q, want %q", ts, tc.wantTargets)
			}
		})
	}
	all := Quarantines([]corev1.Node{node("-"), {ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{
		names.QuarantineAnnotation: "node"}}}}, names)
	if len(all) != 1 || all[0].Node != "a" {
		t.Errorf("Quarantines = %+v, want node a only", all)
	}
}
