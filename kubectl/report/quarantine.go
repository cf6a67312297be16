package report

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

// Quarantine is what rota-extender's remediation keeps out of placement on
// one node, as written on the Node: the <domain>/quarantine annotation
// ("node" and GPU UUIDs) and, for a whole node, the
// <domain>/quarantined:NoSchedule taint.
type Quarantine struct {
	Node string `json:"node"`
	// WholeNode: the node itself is quarantined (annotation lists "node").
	WholeNode bool `json:"wholeNode"`
	// GPUs are the quarantined GPUs' UUIDs, sorted.
	GPUs []string `json:"gpus,omitempty"`
	// Tainted: the node carries the quarantine taint.
	Tainted bool `json:"tainted"`
	// ReleasePending: an admin asked for the release
	// (<domain>/quarantine=release) and rota-extender has not acted yet.
	ReleasePending bool `json:"releasePending"`
}

// Quarantined reports whether anything on the node is out of placement
// and not yet asked to be released.
func (q Quarantine) Quarantined() bool {
	return !q.ReleasePending && (q.WholeNode || len(q.GPUs) > 0 || q.Tainted)
}

// Targets lists what a release returns to placement: "node" first, then
// the GPU UUIDs.
func (q Quarantine) Targets() []string {
	var out []string
	if q.WholeNode || q.Tainted {
		out = append(out, contract.QuarantineNode)
	}
	return append(out, q.GPUs...)
}

// NodeQuarantine reads one Node's quarantine (contract.ParseQuarantine, as
// rota-extender reads it after a restart).
func NodeQuarantine(n *corev1.Node, names contract.Names) Quarantine {
	q := Quarantine{Node: n.Name}
	q.Tainted = slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == names.QuarantineTaint })
	q.WholeNode, q.GPUs, q.ReleasePending = contract.ParseQuarantine(n.Annotations[names.QuarantineAnnotation])
	return q
}

// Quarantines returns the nodes with anything quarantined (or a release
// pending), sorted by node name.
func Quarantines(nodes []corev1.Node, names contract.Names) []Quarantine {
	var out []Quarantine
	for i := range nodes {
		if q := NodeQuarantine(&nodes[i], names); q.Quarantined() || q.ReleasePending {
			out = append(out, q)
		}
	}
	slices.SortFunc(out, func(a, b Quarantine) int { return strings.Compare(a.Node, b.Node) })
	return out
}
