package scheduling

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/placement"
)

func checkPod(mod func(*corev1.PodSpec)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if mod != nil {
		mod(&p.Spec)
	}
	return p
}

func requests(cpu, mem string) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Containers[0].Resources.Requests = corev1.ResourceList{}
		if cpu != "" {
			s.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			s.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
		}
	}
}

func required(terms ...corev1.NodeSelectorTerm) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

func tolerate(ts ...corev1.Toleration) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) { s.Tolerations = ts }
}

func checkNodeObj(taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a", "gpu": "h100", "kubernetes.io/hostname": "n1"}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}},
	}
}

// TestCheckNode: kube-scheduler's NodeAffinity, TaintToleration and (for
// CPU and memory) NodeResourcesFit verdicts, each way.
func TestCheckNode(t *testing.T) {
	gpuTaint := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name     string
		givePod  *corev1.Pod
		giveNode *corev1.Node
		giveUse  *nodeUse
		wantCode placement.Code // "": admitted
		wantMsg  string
	}{
		{name: "no constraints", givePod: checkPod(nil), giveNode: checkNodeObj()},
		{name: "nodeSelector matches", givePod: checkPod(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"zone": "a"} }),
			giveNode: checkNodeObj()},
		{name: "nodeSelector names a value the node lacks",
			givePod:  checkPod(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"zone": "b", "gpu": "h100"} }),
			giveNode: checkNodeObj(), wantCode: codeNodeAffinity,
			wantMsg: "node n1 does not match the pod's nodeSelector gpu=h100,zone=b"},
		{name: "nodeSelector names a label the node lacks",
			givePod:  checkPod(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"pool": "batch"} }),
			giveNode: checkNodeObj(), wantCode: codeNodeAffinity},
		{name: "required affinity In matches",
			givePod: checkPod(required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100", "h100"}}}})),
			giveNode: checkNodeObj()},
		{name: "required affinity NotIn excludes",
			givePod: checkPod(required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "gpu", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"h100"}}}})),
			giveNode: checkNodeObj(), wantCode: codeNodeAffinity, wantMsg: "does not match the pod's required node affinity"},
		{name: "required affinity: one of two terms matches",
			givePod: checkPod(required(
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z"}}}},
				corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}})),
			giveNode: checkNodeObj()},
		{name: "required affinity on the node's name (matchFields)",
			givePod: checkPod(required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n2"}}}})),
			giveNode: checkNodeObj(), wantCode: codeNodeAffinity},
		{name: "nodeSelector matches but affinity does not: both must",
			givePod: checkPod(func(s *corev1.PodSpec) {
				s.NodeSelector = map[string]string{"zone": "a"}
				required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpDoesNotExist}}})(s)
			}),
			giveNode: checkNodeObj(), wantCode: codeNodeAffinity, wantMsg: "nodeSelector zone=a and required node affinity"},
		{name: "invalid affinity operator",
			givePod: checkPod(required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "gpu", Operator: "Near", Values: []string{"h100"}}}})),
			giveNode: checkNodeObj(), wantCode: codeNodeAffinity, wantMsg: "node affinity is invalid"},
		{name: "untolerated NoSchedule taint", givePod: checkPod(nil), giveNode: checkNodeObj(gpuTaint),
			wantCode: codeUntoleratedTaint, wantMsg: "node n1 has taint nvidia.com/gpu=present:NoSchedule that the pod does not tolerate"},
		{name: "untolerated NoExecute taint", givePod: checkPod(nil),
			giveNode: checkNodeObj(corev1.Taint{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}),
			wantCode: codeUntoleratedTaint, wantMsg: "node.kubernetes.io/unreachable:NoExecute"},
		{name: "PreferNoSchedule is no refusal", givePod: checkPod(nil),
			giveNode: checkNodeObj(corev1.Taint{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule})},
		{name: "taint tolerated by Exists", givePod: checkPod(tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists})),
			giveNode: checkNodeObj(gpuTaint)},
		{name: "taint tolerated by Equal and effect", givePod: checkPod(tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Value: "present",
			Effect: corev1.TaintEffectNoSchedule})), giveNode: checkNodeObj(gpuTaint)},
		{name: "toleration of another value", givePod: checkPod(tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Value: "absent"})),
			giveNode: checkNodeObj(gpuTaint), wantCode: codeUntoleratedTaint},
		{name: "toleration of another effect", givePod: checkPod(tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute})), giveNode: checkNodeObj(gpuTaint), wantCode: codeUntoleratedTaint},
		{name: "second taint untolerated", givePod: checkPod(tolerate(corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists})),
			giveNode: checkNodeObj(gpuTaint, corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}),
			wantCode: codeUntoleratedTaint, wantMsg: "dedicated=infra:NoSchedule"},
		{name: "tolerate everything", givePod: checkPod(tolerate(corev1.Toleration{Operator: corev1.TolerationOpExists})),
			giveNode: checkNodeObj(gpuTaint, corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoExecute})},
		{name: "CPU fits exactly", givePod: checkPod(requests("1", "")), giveNode: checkNodeObj(), giveUse: &nodeUse{CPUMilli: 3000}},
		{name: "CPU short", givePod: checkPod(requests("1500m", "")), giveNode: checkNodeObj(), giveUse: &nodeUse{CPUMilli: 3000},
			wantCode: placement.InsufficientCPU, wantMsg: "node n1 has 1000m CPU free (allocatable 4000m, requested 3000m), pod requests 1500m"},
		{name: "CPU over allocatable on an empty node", givePod: checkPod(requests("5", "")), giveNode: checkNodeObj(), giveUse: &nodeUse{},
			wantCode: placement.InsufficientCPU},
		{name: "memory short", givePod: checkPod(requests("", "3Gi")), giveNode: checkNodeObj(), giveUse: &nodeUse{MemoryMiB: 6 * 1024},
			wantCode: placement.InsufficientHostMemory, wantMsg: "node n1 has 2 GiB memory free (allocatable 8 GiB, requested 6 GiB), pod requests 3 GiB"},
		{name: "memory fits exactly", givePod: checkPod(requests("", "2Gi")), giveNode: checkNodeObj(), giveUse: &nodeUse{MemoryMiB: 6 * 1024}},
		{name: "resources not checked without use (GPU pods: the ledger's)", givePod: checkPod(requests("64", "1Ti")), giveNode: checkNodeObj()},
		{name: "node reporting no allocatable is not checked", givePod: checkPod(requests("64", "1Ti")),
			giveNode: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}, giveUse: &nodeUse{}},
		{name: "no requests fit a full node", givePod: checkPod(nil), giveNode: checkNodeObj(), giveUse: &nodeUse{CPUMilli: 4000, MemoryMiB: 8192}},
		{name: "init container counts (max of init and app)", givePod: checkPod(func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("3")}}}}
			requests("1", "")(s)
		}), giveNode: checkNodeObj(), giveUse: &nodeUse{CPUMilli: 1500}, wantCode: placement.InsufficientCPU, wantMsg: "pod requests 3000m"},
		{name: "affinity is checked before taints", givePod: checkPod(func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"zone": "b"} }),
			giveNode: checkNodeObj(gpuTaint), wantCode: codeNodeAffinity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := checkNode(tc.givePod, tc.giveNode, tc.giveUse)
			if tc.wantCode == "" {
				if got != nil {
					t.Fatalf("checkNode = %+v, want admitted", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("checkNode admitted, want %s", tc.wantCode)
			}
			if got.code != tc.wantCode || !strings.Contains(got.msg, tc.wantMsg) {
				t.Errorf("checkNode = %s %q, want %s containing %q", got.code, got.msg, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

func TestSchedulerOf(t *testing.T) {
	if got := schedulerOf(checkPod(nil)); got != corev1.DefaultSchedulerName {
		t.Errorf("empty schedulerName = %q, want %q", got, corev1.DefaultSchedulerName)
	}
	if got := schedulerOf(checkPod(func(s *corev1.PodSpec) { s.SchedulerName = "rota-scheduler" })); got != "rota-scheduler" {
		t.Errorf("schedulerName = %q", got)
	}
}
