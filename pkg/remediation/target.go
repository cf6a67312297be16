package remediation

import (
	"cmp"
	"slices"
	"time"
)

// Kind of a remediation target.
type Kind string

const (
	KindGPU  Kind = "gpu"
	KindNode Kind = "node"
)

// Target is a GPU (Node plus its UUID) or a whole node (GPU empty).
type Target struct {
	Kind Kind
	Node string
	GPU  string
}

// NodeTarget is the whole node.
func NodeTarget(node string) Target { return Target{Kind: KindNode, Node: node} }

// GPUTarget is one GPU of node.
func GPUTarget(node, uuid string) Target { return Target{Kind: KindGPU, Node: node, GPU: uuid} }

// Name is what the target is called in metrics and messages: the node name
// or the GPU UUID.
func (t Target) Name() string {
	if t.Kind == KindGPU {
		return t.GPU
	}
	return t.Node
}

// String is "node n1" or "GPU GPU-1a2b on node n1".
func (t Target) String() string {
	if t.Kind == KindGPU {
		return "GPU " + t.GPU + " on node " + t.Node
	}
	return "node " + t.Node
}

func compareTargets(a, b Target) int {
	return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.GPU, b.GPU))
}

// Entry is why and since when a target is quarantined.
type Entry struct {
	Since  time.Time
	Reason string
}

// Quarantine takes GPUs and nodes with Threshold failures within Window out
// of placement until an admin releases them. A GPU is out when it or its
// node is quarantined.
type Quarantine struct {
	Threshold int
	windows   *Windows
	set       map[Target]Entry
}

// NewQuarantine quarantines a target at its threshold-th failure within window.
func NewQuarantine(threshold int, window time.Duration) *Quarantine {
	return &Quarantine{Threshold: threshold, windows: NewWindows(window), set: map[Target]Entry{}}
}

func key(t Target) string { return string(t.Kind) + "/" + t.Node + "/" + t.GPU }

// Failure records one failure of t at now. It returns the failures within
// the window and whether t entered quarantine with this one (false when it
// already was, or is still under the threshold).
func (q *Quarantine) Failure(t Target, now time.Time, reason string) (int, bool) {
	n := q.windows.Add(key(t), now)
	if _, in := q.set[t]; in || q.Threshold <= 0 || n < q.Threshold {
		return n, false
	}
	q.set[t] = Entry{Since: now, Reason: reason}
	return n, true
}

// Add puts t in quarantine (restoring it from the API after a restart); it
// reports whether t was not in yet.
func (q *Quarantine) Add(t Target, now time.Time, reason string) bool {
	if _, in := q.set[t]; in {
		return false
	}
	q.set[t] = Entry{Since: now, Reason: reason}
	return true
}

// Has reports whether t itself is quarantined.
func (q *Quarantine) Has(t Target) bool { _, ok := q.set[t]; return ok }

// Covers reports whether GPU uuid of node may not take new work: the GPU
// or its node is quarantined.
func (q *Quarantine) Covers(node, uuid string) bool {
	return q.Has(NodeTarget(node)) || (uuid != "" && q.Has(GPUTarget(node, uuid)))
}

// ReleaseNode returns the node and all its GPUs to placement and forgets
// their failures; it returns what was released, sorted.
func (q *Quarantine) ReleaseNode(node string) []Target {
	var out []Target
	for t := range q.set {
		if t.Node == node {
			out = append(out, t)
			delete(q.set, t)
		}
	}
	for k := range q.windows.events {
		if len(k) > 0 && (k == key(NodeTarget(node)) || hasNodePrefix(k, node)) {
			delete(q.windows.events, k)
		}
	}
	slices.SortFunc(out, compareTargets)
	return out
}

func hasNodePrefix(k, node string) bool {
	p := string(KindGPU) + "/" + node + "/"
	return len(k) > len(p) && k[:len(p)] == p
}

// List returns the quarantined targets, sorted by node, kind, GPU.
func (q *Quarantine) List() []Target {
	out := make([]Target, 0, len(q.set))
	for t := range q.set {
		out = append(out, t)
	}
	slices.SortFunc(out, compareTargets)
	return out
}

// OnNode returns the node's quarantined targets, sorted.
func (q *Quarantine) OnNode(node string) []Target {
	var out []Target
	for t := range q.set {
		if t.Node == node {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, compareTargets)
	return out
}

// Entry returns why t is quarantined.
func (q *Quarantine) Entry(t Target) (Entry, bool) { e, ok := q.set[t]; return e, ok }
