package room

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// Untolerated returns a NoSchedule or NoExecute taint of node that pod does
// not tolerate, as kube-scheduler's TaintToleration filter finds it.
// Comparison operators (Gt, Lt) are compared: the API server admits a
// toleration using them only where the feature is on. The zero logger
// discards (a value that does not parse is simply not tolerated).
func Untolerated(pod *corev1.Pod, node *corev1.Node) (corev1.Taint, bool) {
	return corev1helpers.FindMatchingUntoleratedTaint(klog.Logger{}, node.Spec.Taints, pod.Spec.Tolerations,
		func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, true)
}

// AffinityTerms names what the pod requires of its node, for a refusal.
func AffinityTerms(pod *corev1.Pod) string {
	var parts []string
	if len(pod.Spec.NodeSelector) > 0 {
		keys := make([]string, 0, len(pod.Spec.NodeSelector))
		for k := range pod.Spec.NodeSelector {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		sel := make([]string, len(keys))
		for i, k := range keys {
			sel[i] = k + "=" + pod.Spec.NodeSelector[k]
		}
		parts = append(parts, "nodeSelector "+strings.Join(sel, ","))
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		parts = append(parts, "required node affinity")
	}
	if len(parts) == 0 {
		return "node requirements"
	}
	return strings.Join(parts, " and ")
}
