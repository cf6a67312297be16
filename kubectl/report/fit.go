package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// FitAnalysis is what the placement engine says about a request on the
// cluster as it is now, and what would have to change for it to fit.
type FitAnalysis struct {
	FitsNow bool `json:"fitsNow"`
	// Where the request would go now (when FitsNow).
	Where string `json:"where,omitempty"`
	// Nodes is how many nodes publish a GPU topology; Fitting how many of
	// them the request fits (gangs: that hold at least one member).
	Nodes   int `json:"nodes"`
	Fitting int `json:"fitting"`
	// Reasons groups the nodes that do not fit by placement's message.
	Reasons []NodeReason `json:"reasons,omitempty"`
	// Hints say what would make it fit, in words.
	Hints []string `json:"hints,omitempty"`
}

// nodeInfos returns the ledger's nodes, sorted by name.
func (c *Cluster) nodeInfos() []*ledger.NodeInfo {
	out := make([]*ledger.NodeInfo, 0, c.snap.Len())
	for _, n := range c.nodeNames() {
		out = append(out, c.snap.Node(n))
	}
	return out
}

// nodeNames lists the nodes the current analysis may use: all of them, or,
// while a pod is analysed (forPod), those the scheduler could give it.
func (c *Cluster) nodeNames() []string {
	if c.only == nil {
		return c.snap.Names()
	}
	var out []string
	for _, n := range c.snap.Names() {
		if c.only(n) {
			out = append(out, n)
		}
	}
	return out
}

// forPod narrows the analysis to the nodes kube-scheduler could consider
// for p: not cordoned, and matching its nodeSelector (node affinity and
// taints are not evaluated). It returns the function that lifts the limit.
func (c *Cluster) forPod(p *corev1.Pod) func() {
	c.only = func(name string) bool {
		n := c.nodes[name]
		if n == nil {
			return true
		}
		if n.Spec.Unschedulable {
			return false
		}
		for k, v := range p.Spec.NodeSelector {
			if n.Labels[k] != v {
				return false
			}
		}
		return true
	}
	return func() { c.only = nil }
}

// tally groups per-node refusals by message, most nodes first.
type tally map[string]*NodeReason

func (t tally) add(msg, node string) {
	if r := t[msg]; r != nil {
		r.Nodes++
		return
	}
	t[msg] = &NodeReason{Nodes: 1, Reason: msg, Example: node}
}

func (t tally) sorted() []NodeReason {
	out := make([]NodeReason, 0, len(t))
	for _, r := range t {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b NodeReason) int {
		if c := cmp.Compare(b.Nodes, a.Nodes); c != 0 {
			return c
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return out
}

// fitPod runs placement.Fit for r on every node and explains the result.
func (c *Cluster) fitPod(r placement.Request) FitAnalysis {
	fa := FitAnalysis{Nodes: len(c.nodeNames())}
	if fa.Nodes == 0 {
		fa.Hints = append(fa.Hints, "no node publishes a GPU topology annotation ("+c.o.Names.TopologyAnnotation+"): is rota-device-plugin running?")
		return fa
	}
	t := tally{}
	var first *placement.Choice
	var firstNI *ledger.NodeInfo
	for _, ni := range c.nodeInfos() {
		ch, reason := placement.Fit(r, ni)
		if reason != nil {
			t.add(reason.Message(), ni.Name())
			continue
		}
		fa.Fitting++
		if first == nil {
			first, firstNI = &ch, ni
		}
	}
	fa.Reasons = t.sorted()
	if first != nil {
		fa.FitsNow = true
		fa.Where = describeChoice(*first, firstNI)
		if fa.Fitting > 1 {
			if fa.Fitting == 2 {
				fa.Where += "; 1 other node fits too"
			} else {
				fa.Where += fmt.Sprintf("; %d other nodes fit too", fa.Fitting-1)
			}
		}
		return fa
	}
	if r.Whole() {
		fa.Hints = append(fa.Hints, c.wholeHints(r)...)
	} else {
		fa.Hints = append(fa.Hints, c.shareHints(r)...)
	}
	return fa
}

// describeChoice is "h100-b1 GPUs 4,6 (1 NVLink island)" or "h100-b1 GPU 3 (40 GiB of 80 GiB free)".
func describeChoice(ch placement.Choice, ni *ledger.NodeInfo) string {
	idx := ch.Indexes(ni)
	if ch.Whole {
		return fmt.Sprintf("%s GPUs %s (%s)", ch.Node, joinInts(idx), plural(placement.IslandsOf(ch, ni), "NVLink island"))
	}
	s := ch.Slots[0]
	return fmt.Sprintf("%s GPU %d (%s of %s free)", ch.Node, idx[0], ni.FreeMiB(s), ni.Node.GPUs[s].MemoryMiB)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// wholeHints explains why k whole GPUs fit no node. The node it points at
// is the one with k healthy GPUs that is closest to fitting: the most idle
// GPUs, then the fewest GPUs held by non-preemptible pods, then by name.
func (c *Cluster) wholeHints(r placement.Request) []string {
	k := r.GPUs
	var best, biggest *ledger.NodeInfo
	for _, ni := range c.nodeInfos() {
		if biggest == nil || ni.HealthyGPUs() > biggest.HealthyGPUs() {
			biggest = ni
		}
		if ni.HealthyGPUs() < k {
			continue
		}
		if best == nil || ni.IdleGPUs() > best.IdleGPUs() ||
			(ni.IdleGPUs() == best.IdleGPUs() && pinned(ni) < pinned(best)) {
			best = ni
		}
	}
	if best == nil {
		return []string{fmt.Sprintf("needs %d whole GPUs on one node, but no node has that many healthy GPUs (the largest, %s, has %d): it can never fit; split it into a gang of smaller pods",
			k, biggest.Name(), biggest.HealthyGPUs())}
	}
	idle := best.IdleGPUs()
	hints := []string{fmt.Sprintf("needs %d whole GPUs on one node; the closest node, %s, has %d free: %d more must be freed there",
		k, best.Name(), idle, k-idle)}
	if h := holders(best); h != "" {
		hints = append(hints, fmt.Sprintf("on %s the GPUs are held by %s", best.Name(), h))
	}
	// Unhealthy GPUs that would otherwise have made a node fit.
	for _, ni := range c.nodeInfos() {
		idle, broken := ni.IdleGPUs(), unusedUnhealthy(ni)
		if idle < k && idle+len(broken) >= k {
			hints = append(hints, fmt.Sprintf("%s would fit if %s were healthy", ni.Name(), strings.Join(broken, ", ")))
		}
	}
	return hints
}

// pinned counts the node's GPUs held by pods that may not be preempted.
func pinned(ni *ledger.NodeInfo) int {
	n := 0
	for _, a := range ni.Allocs {
		if !a.Preemptible {
			n += len(a.GPUs)
		}
	}
	return n
}

// holders lists the pods holding GPUs on ni, largest first: "research/sweep-0
// (4 GPUs), vision/detector-serve (60 GiB share, not preemptible)".
func holders(ni *ledger.NodeInfo) string {
	as := make([]*ledger.Allocation, 0, len(ni.Allocs))
	for _, a := range gpuAllocs(ni) {
		as = append(as, a)
	}
	slices.SortFunc(as, func(a, b *ledger.Allocation) int {
		if c := cmp.Compare(len(b.GPUs), len(a.GPUs)); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	var parts []string
	for i, a := range as {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("%d more", len(as)-i))
			break
		}
		what := plural(len(a.GPUs), "GPU")
		if !a.Whole {
			what = a.GPUs[0].MemoryMiB.String() + " share"
		}
		if !a.Preemptible {
			what += ", not preemptible"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", a.Pod, what))
	}
	return strings.Join(parts, ", ")
}

// unusedUnhealthy lists the node's unhealthy GPUs that hold no pod.
func unusedUnhealthy(ni *ledger.NodeInfo) []string {
	var out []string
	for s, g := range ni.Node.GPUs {
		if !g.Healthy && ni.Use[s].Pods == 0 {
			out = append(out, fmt.Sprintf("GPU %d (%s)", g.Index, healthReason(g.Reason)))
		}
	}
	return out
}

func healthReason(r string) string {
	if r == "" {
		return "unhealthy"
	}
	return r
}

// shareHints explains why a memory share fits no GPU.
func (c *Cluster) shareHints(r placement.Request) []string {
	var bestNI *ledger.NodeInfo
	bestSlot, bestFree := -1, contract.MiB(-1)
	var need, largest contract.MiB
	for _, ni := range c.nodeInfos() {
		need = r.NeedMiB(ni.Node.MemoryUnitMiB)
		for s, g := range ni.Node.GPUs {
			if !g.Healthy {
				continue
			}
			largest = max(largest, g.MemoryMiB)
			if f := ni.FreeMiB(s); f > bestFree {
				bestNI, bestSlot, bestFree = ni, s, f
			}
		}
	}
	if largest < need {
		return []string{fmt.Sprintf("needs %s on one GPU, but the largest healthy GPU has %s: it can never fit; ask for whole GPUs instead", need, largest)}
	}
	if bestSlot < 0 {
		return []string{"no healthy GPU in the cluster"}
	}
	g := bestNI.Node.GPUs[bestSlot]
	return []string{fmt.Sprintf("needs %s on one GPU; the GPU with the most free memory (%s GPU %d, %s) has %s free: %s more must be freed on one GPU",
		need, bestNI.Name(), g.Index, g.Model, bestFree, need-bestFree)}
}

// slots counts how many members of r node ni holds at once, by placing
// them one by one on a scratch copy (as placement.PlanGang's fill does).
func slots(r placement.Request, ni *ledger.NodeInfo, limit int) int {
	n := 0
	for n < limit {
		ch, reason := placement.Fit(r, ni)
		if reason != nil {
			break
		}
		a := ch.Allocation(r, ni)
		a.PodUID = fmt.Sprintf("what-if-%d", n)
		ni = ni.With(&a)
		n++
	}
	return n
}

// fitGang plans the gang's unplaced members with placement.PlanGang (as the
// extender does) and explains the result.
func (c *Cluster) fitGang(gp *GangProgress, member placement.Request, uids, pods []string) FitAnalysis {
	fa := FitAnalysis{Nodes: len(c.nodeNames())}
	need := len(uids)
	if need == 0 {
		fa.FitsNow = true
		fa.Where = "every member is placed"
		return fa
	}
	g := placement.Gang{Name: gp.Name, Member: member, UIDs: uids, Pods: pods}
	plan, reason := placement.PlanGang(g, c.snap, c.nodeNames(), len(c.o.Tiers.Tiers))
	each := member.Describe(c.o.MemoryUnitMiB)
	// Per node and per tier group: how many members fit.
	type group struct {
		name  string
		slots int
		nodes []string
	}
	total := 0
	var best group
	tiers := make([]map[string]*group, len(c.o.Tiers.Tiers))
	for i := range tiers {
		tiers[i] = map[string]*group{}
	}
	t := tally{}
	for _, ni := range c.nodeInfos() {
		s := slots(member, ni, need)
		if s == 0 {
			_, r := placement.Fit(member, ni)
			if r != nil {
				t.add(r.Message(), ni.Name())
			}
			continue
		}
		fa.Fitting++
		total += s
		if s > best.slots {
			best = group{name: ni.Name(), slots: s}
		}
		for lvl := range tiers {
			v := ni.Node.Tier(lvl)
			if v == "" {
				continue
			}
			gr := tiers[lvl][v]
			if gr == nil {
				gr = &group{name: v}
				tiers[lvl][v] = gr
			}
			gr.slots += s
			gr.nodes = append(gr.nodes, ni.Name())
		}
	}
	fa.Reasons = t.sorted()
	if reason == nil {
		fa.FitsNow = gp.Missing == 0
		fa.Where = c.describePlan(plan)
		if gp.Missing > 0 {
			fa.Hints = append(fa.Hints, fmt.Sprintf("only %d of %d members exist: the extender places none until the other %d are created (check the controller that creates them)",
				gp.Created, gp.Size, gp.Missing))
		}
		return fa
	}
	short := need - min(total, need)
	var where []string
	where = append(where, fmt.Sprintf("best node %s: %d", orNone(best.name), best.slots))
	bestLeaf := ""
	for lvl, groups := range tiers {
		var bg *group
		for _, gr := range groups {
			if bg == nil || gr.slots > bg.slots || (gr.slots == bg.slots && gr.name < bg.name) {
				bg = gr
			}
		}
		if bg != nil {
			where = append(where, fmt.Sprintf("best %s %s: %d", tierName(c.o.Tiers.Tiers[lvl]), bg.name, bg.slots))
			if lvl == 0 {
				bestLeaf = bg.name
			}
		}
	}
	fa.Hints = append(fa.Hints, fmt.Sprintf("the %d unplaced members need %s each; the cluster has room for %d now (%s)",
		need, each, min(total, need), strings.Join(where, ", ")))
	more := ""
	models := c.modelsOf(bestLeaf)
	if member.Whole() {
		more = fmt.Sprintf("free %d more whole %sGPUs for the other %s", short*member.GPUs, models, plural(short, "member"))
	} else {
		more = fmt.Sprintf("free %s more on %sGPUs (%s each) for the other %s", member.NeedMiB(c.o.MemoryUnitMiB)*contract.MiB(short),
			models, member.NeedMiB(c.o.MemoryUnitMiB), plural(short, "member"))
	}
	if bestLeaf != "" {
		more += fmt.Sprintf(", ideally in %s %s so the gang shares a leaf switch", tierName(c.o.Tiers.Tiers[0]), bestLeaf)
	}
	fa.Hints = append(fa.Hints, more)
	if gp.Missing > 0 {
		fa.Hints = append(fa.Hints, fmt.Sprintf("only %d of %d members exist: the other %d must be created too", gp.Created, gp.Size, gp.Missing))
	}
	return fa
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// tierName is a tier label's last path element: "leaf", "zone".
func tierName(label string) string {
	if i := strings.LastIndexAny(label, "/."); i >= 0 {
		return label[i+1:]
	}
	return label
}

// modelsOf names the GPU models of a leaf's nodes ("H100 "), or "" when
// there are several or none.
func (c *Cluster) modelsOf(leaf string) string {
	var models []string
	for _, ni := range c.nodeInfos() {
		if leaf != "" && ni.Node.Tier(0) != leaf {
			continue
		}
		for _, m := range ni.Node.Models() {
			if !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
	}
	if len(models) != 1 {
		return ""
	}
	return models[0] + " "
}

// describePlan says where a gang plan puts the members.
func (c *Cluster) describePlan(p placement.GangPlan) string {
	nodes := p.Nodes()
	switch {
	case p.Level == placement.TierNode:
		return fmt.Sprintf("%s, all members on node %s", plural(len(p.Allocations), "member"), p.Where)
	case p.Level < len(c.o.Tiers.Tiers):
		return fmt.Sprintf("%s in %s %s: %s", plural(len(p.Allocations), "member"), tierName(c.o.Tiers.Tiers[p.Level]), p.Where, strings.Join(nodes, ", "))
	}
	return fmt.Sprintf("%s across the cluster: %s", plural(len(p.Allocations), "member"), strings.Join(nodes, ", "))
}
