package scheduling

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// Reason codes the adapter adds to placement's, for requests that never
// reach the engine.
const (
	codeInvalidRequest placement.Code = "InvalidRequest"
	codeNotBest        placement.Code = "NotBestScore"
)

// nodeNames returns the candidate names of args: NodeNames when the
// scheduler is nodeCacheCapable, else the names of Nodes.
func nodeNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	if args.Nodes == nil {
		return nil
	}
	out := make([]string, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		out[i] = args.Nodes.Items[i].Name
	}
	return out
}

// filterResult answers in the form the scheduler asked in.
func filterResult(args *extenderv1.ExtenderArgs, passed []string, failed, unresolvable extenderv1.FailedNodesMap) *extenderv1.ExtenderFilterResult {
	res := &extenderv1.ExtenderFilterResult{FailedNodes: failed, FailedAndUnresolvableNodes: unresolvable}
	if args.NodeNames != nil || args.Nodes == nil {
		res.NodeNames = &passed
		return res
	}
	keep := make(map[string]bool, len(passed))
	for _, n := range passed {
		keep[n] = true
	}
	list := &corev1.NodeList{}
	for i := range args.Nodes.Items {
		if keep[args.Nodes.Items[i].Name] {
			list.Items = append(list.Items, args.Nodes.Items[i])
		}
	}
	res.Nodes = list
	return res
}

// filterState collects one filter call's answer.
type filterState struct {
	passed   []string
	rejected []rejection
	nodes    int // candidates: the capacity rejected gets at its first use
	tally    placement.Tally
	gang     string
	note     string
}

// rejection is one refused node; its message is rendered only when the
// answer carries it (see failedMaps) or V(5) logs it.
type rejection struct {
	node       string
	reason     *placement.Reason // nil: text
	text       string
	resolvable bool
}

func (r rejection) message() string {
	if r.reason != nil {
		return r.reason.Message()
	}
	return r.text
}

func newFilterState(n int) *filterState {
	return &filterState{passed: make([]string, 0, n), nodes: n}
}

func (f *filterState) addRejection(r rejection) {
	if f.rejected == nil {
		f.rejected = make([]rejection, 0, f.nodes)
	}
	f.rejected = append(f.rejected, r)
}

func (f *filterState) reject(node string, r *placement.Reason) {
	f.addRejection(rejection{node: node, reason: r, resolvable: r.Resolvable})
	f.tally.Add(r, node, r.Message)
}

// rejectText refuses node with a message of the adapter's.
func (f *filterState) rejectText(node string, code placement.Code, resolvable bool, msg string) {
	f.addRejection(rejection{node: node, text: msg, resolvable: resolvable})
	f.tally.AddText(code, resolvable, node, msg)
}

// rejectAll fails every node with one message.
func (f *filterState) rejectAll(names []string, code placement.Code, resolvable bool, msg string) {
	f.passed = f.passed[:0]
	for _, n := range names {
		f.addRejection(rejection{node: n, text: msg, resolvable: resolvable})
	}
	if len(names) > 0 {
		f.tally.AddNodes(code, resolvable, names[0], func() string { return msg }, len(names))
	}
}

// failedMaps renders the refused nodes' messages into the answer's maps.
func (f *filterState) failedMaps() (failed, unresolvable extenderv1.FailedNodesMap) {
	failed, unresolvable = extenderv1.FailedNodesMap{}, extenderv1.FailedNodesMap{}
	for _, r := range f.rejected {
		if r.resolvable {
			failed[r.node] = r.message()
		} else {
			unresolvable[r.node] = r.message()
		}
	}
	return failed, unresolvable
}

// Filter answers the filter verb: which of the candidate nodes the pod fits.
// Pods that ask for no Rota resource pass every node, or with
// FilterBestOnly the nodes of their best score class (see gpuFreeScores).
// A gang member passes only its slot's node once its gang is planned (see
// gangs).
func (e *Extender) Filter(ctx context.Context, args *extenderv1.ExtenderArgs) *extenderv1.ExtenderFilterResult {
	start := e.now()
	if args == nil || args.Pod == nil {
		e.metrics.Decisions.WithLabelValues("filter", "error", "NoPod").Inc()
		return &extenderv1.ExtenderFilterResult{Error: "filter: the request names no pod"}
	}
	if err := e.notReady("filter"); err != nil {
		return &extenderv1.ExtenderFilterResult{Error: err.Error()}
	}
	pod := args.Pod
	names := nodeNames(args)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod))
	f := newFilterState(len(names))
	switch {
	case !podreq.Wants(pod, e.names):
		e.filterGPUFree(pod, names, f)
	default:
		req, err := e.request(pod)
		if err != nil {
			f.rejectAll(names, codeInvalidRequest, false, "invalid GPU request: "+err.Error())
			break
		}
		if e.held(pod, names, f) {
			break
		}
		snap := e.ledger.Snapshot()
		if ref := e.o.Parser.Of(pod).Gang; ref != nil {
			if done := e.gangs.filter(ctx, pod, req, ref, names, snap, f); done {
				break
			}
		}
		e.fitAll(req, names, snap, f)
	}
	outcome := "fit"
	if len(f.passed) == 0 && len(names) > 0 {
		outcome = "nofit"
	}
	for _, r := range f.tally.Counts() {
		e.metrics.Decisions.WithLabelValues("filter", outcome, string(r.Code)).Add(float64(r.Nodes))
	}
	if len(f.tally.Counts()) == 0 {
		e.metrics.Decisions.WithLabelValues("filter", outcome, "").Inc()
	}
	d := Decision{Time: start, Verb: "filter", Outcome: outcome, Nodes: len(names), Fits: len(f.passed),
		Gang: f.gang, Message: f.note, Reasons: f.tally.Sorted(), Duration: e.now().Sub(start).String()}
	if outcome == "nofit" {
		d.Message = f.tally.Summary(len(names))
		if f.note != "" {
			d.Message = f.note
		}
		e.refuse(pod, d.Message)
	}
	e.decisions.add(pod.Namespace+"/"+pod.Name, d)
	logger.V(4).Info("Filter decision", "outcome", outcome, "nodes", len(names), "fits", len(f.passed),
		"gang", f.gang, "message", d.Message)
	if v := logger.V(5); v.Enabled() {
		for _, r := range f.rejected {
			v.Info("Filter node", "node", r.node, "fits", false, "resolvable", r.resolvable, "reason", r.message())
		}
	}
	if len(f.passed) > 0 {
		// kube-scheduler reads why nodes failed only when none passed (for
		// FailedScheduling and preemption); when some pass it drops the
		// nodes missing from NodeNames and never looks at the reasons
		// (findNodesThatPassExtenders, v1.37). Leaving them out saves
		// rendering, encoding and decoding one message per refused node: at
		// 5,000 nodes, hundreds of KiB per pod. The decision record
		// (/debug/pods) keeps them grouped by reason, and V(5) logs each.
		return filterResult(args, f.passed, nil, nil)
	}
	failed, unresolvable := f.failedMaps()
	return filterResult(args, f.passed, failed, unresolvable)
}

// held passes only the held node to a single pod that holds room (the queue
// controller's admission hold, or an earlier bind's reservation). When
// kube-scheduler ruled that node out, the hold is dropped and the pod is
// placed where it fits.
func (e *Extender) held(pod *corev1.Pod, names []string, f *filterState) bool {
	node, ok := e.room.HeldNode(pod)
	if !ok {
		return false
	}
	if slices.Contains(names, node) {
		f.passed = append(f.passed, node)
		f.note = "room held on node " + node + " since the pod was admitted"
		return true
	}
	e.ledger.Release(string(pod.UID))
	f.note = "room was held on node " + node + ", which kube-scheduler ruled out; placed where it fits"
	return false
}

// filterGPUFree passes every node to a pod that asks for no GPU; with
// FilterBestOnly only the nodes where its CPU and memory strand the fewest
// GPUs (a node without GPUs first).
func (e *Extender) filterGPUFree(pod *corev1.Pod, names []string, f *filterState) {
	req, err := e.request(pod)
	switch {
	case err != nil:
		f.passed = append(f.passed, names...)
		f.note = "pod asks for no GPU; its request could not be read: " + err.Error()
		return
	case req.CPUMilli <= 0 && req.HostMemoryMiB <= 0:
		f.passed = append(f.passed, names...)
		f.note = "pod asks for no GPU, CPU or memory"
		return
	}
	e.passUnheld(req, names, f)
	switch {
	case !e.o.FilterBestOnly:
		f.note = "pod asks for no GPU; prioritize ranks the nodes by the GPUs its CPU and memory would strand"
		return
	}
	scores := e.gpuFreeScores(req, f.passed, e.ledger.Snapshot())
	e.keepBest(scores, f, e.policyFor(req).Name())
	f.note = "pod asks for no GPU; nodes where its CPU and memory strand the fewest GPUs"
}

// passUnheld passes the nodes whose CPU and memory a reservation does not
// hold against a pod that asks for no GPU (it takes them from the held job
// unless it ends before the job's expected start).
func (e *Extender) passUnheld(req placement.Request, names []string, f *filterState) {
	snap := e.ledger.Snapshot()
	for _, n := range names {
		if ni := snap.Node(n); ni != nil && ni.Claim != nil {
			if _, reason := placement.Fit(req, ni); reason != nil && reason.Code == placement.Held {
				reason.Node = n
				f.reject(n, reason)
				continue
			}
		}
		f.passed = append(f.passed, n)
	}
}

// gpuFreeScores scores the nodes for a pod that asks for no GPU: a node
// without GPUs (unknown to the ledger) scores above any GPU node, since
// nothing there can strand a GPU; a GPU node by the policy; a GPU node
// whose free CPU or memory looks short to the ledger gets NoFit, a score,
// not a refusal (kube-scheduler, which counts CPU itself, already passed
// the node; the ledger may lag behind it by an event).
func (e *Extender) gpuFreeScores(req placement.Request, names []string, snap *ledger.Snapshot) []int64 {
	scores := make([]int64, len(names))
	policy := e.policyFor(req)
	for i, n := range names {
		ni := snap.Node(n)
		if ni == nil {
			scores[i] = placement.MaxScore + 1
			continue
		}
		c, reason := placement.Fit(req, ni)
		if reason != nil {
			scores[i] = NoFit
			continue
		}
		scores[i] = policy.Score(req, ni, c)
	}
	return scores
}

// notBest is the tally's reason for a node FilterBestOnly drops.
var notBest = &placement.Reason{Code: codeNotBest, Resolvable: true}

// fitAll runs placement.Fit on every candidate node; with FilterBestOnly it
// keeps only the nodes of the best score class.
func (e *Extender) fitAll(req placement.Request, names []string, snap *ledger.Snapshot, f *filterState) {
	var scores []int64
	policy := e.policyFor(req)
	for _, n := range names {
		ni := snap.Node(n)
		c, reason := placement.Fit(req, ni)
		if reason != nil {
			if reason.Node == "" {
				reason.Node = n
			}
			f.reject(n, reason)
			continue
		}
		f.passed = append(f.passed, n)
		if e.o.FilterBestOnly {
			scores = append(scores, policy.Score(req, ni, c))
		}
	}
	if !e.o.FilterBestOnly {
		return
	}
	e.keepBest(scores, f, policy.Name())
}

// keepBest keeps the passed nodes of the best score (scores[i] is
// f.passed[i]'s) and counts the others as not best.
func (e *Extender) keepBest(scores []int64, f *filterState, policy string) {
	if len(f.passed) < 2 {
		return
	}
	best := scores[0]
	for _, s := range scores {
		best = max(best, s)
	}
	kept := f.passed[:0]
	for i, n := range f.passed {
		if scores[i] == best {
			kept = append(kept, n)
			continue
		}
		// Only counted: a better node passed, so the answer carries no
		// reasons (see Filter), and the decision record keeps one example.
		f.tally.Add(notBest, n, func() string {
			return fmt.Sprintf("another node scores higher under the %s policy (%d < %d)", policy, scores[i], best)
		})
	}
	f.passed = kept
}
