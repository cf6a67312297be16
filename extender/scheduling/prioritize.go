package scheduling

import (
	"context"

	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// Prioritize answers the prioritize verb: the policy's fine score of each
// node, mapped onto 0..MaxExtenderPriority by RankScores (rank-preserving).
// A gang member with a slot scores its slot's node 10 and the others 0; a
// pod that asks for no GPU but for CPU or memory is scored by
// gpuFreeScores; a pod that asks for none of these scores every node 0.
func (e *Extender) Prioritize(ctx context.Context, args *extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error) {
	start := e.now()
	if args == nil || args.Pod == nil {
		e.metrics.Decisions.WithLabelValues("prioritize", "error", "NoPod").Inc()
		return nil, errNoPod
	}
	if err := e.notReady("prioritize"); err != nil {
		return nil, err
	}
	pod := args.Pod
	names := nodeNames(args)
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KObj(pod))
	fine := make([]int64, len(names))
	outcome := "scored"
	req, err := e.request(pod)
	policy := e.policyFor(req)
	switch {
	case err == nil && !podreq.Wants(pod, e.names) && (req.CPUMilli > 0 || req.HostMemoryMiB > 0):
		fine = e.gpuFreeScores(req, names, e.ledger.Snapshot())
	case !podreq.Wants(pod, e.names) || err != nil:
		outcome = "neutral"
		for i := range fine {
			fine[i] = NoFit // every node 0
		}
	default:
		if a, ok := e.ledger.Get(string(pod.UID)); ok && a.State == ledger.Reserved && a.Gang != "" {
			outcome = "gang-slot"
			for i, n := range names {
				fine[i] = NoFit
				if n == a.Node {
					fine[i] = placement.MaxScore
				}
			}
			break
		}
		snap := e.ledger.Snapshot()
		for i, n := range names {
			ni := snap.Node(n)
			c, reason := placement.Fit(req, ni)
			if reason != nil {
				fine[i] = NoFit
				continue
			}
			fine[i] = policy.Score(req, ni, c)
		}
	}
	scores := RankScores(fine, extenderv1.MaxExtenderPriority)
	out := make(extenderv1.HostPriorityList, len(names))
	for i, n := range names {
		out[i] = extenderv1.HostPriority{Host: n, Score: scores[i]}
	}
	classes := scoreClasses(names, fine, scores)
	e.metrics.Decisions.WithLabelValues("prioritize", outcome, policy.Name()).Inc()
	e.decisions.add(pod.Namespace+"/"+pod.Name, Decision{Time: start, Verb: "prioritize", Outcome: outcome,
		Nodes: len(names), Classes: classes, Duration: e.now().Sub(start).String()})
	best := ""
	if len(classes) > 0 {
		best = classes[0].ExampleNode
	}
	logger.V(4).Info("Prioritize decision", "outcome", outcome, "nodes", len(names), "classes", len(classes),
		"policy", policy.Name(), "best", best)
	if v := logger.V(5); v.Enabled() {
		for i, n := range names {
			v.Info("Prioritize node", "node", n, "score", scores[i], "fineScore", fine[i])
		}
	}
	return out, nil
}

// scoreClasses groups nodes by extender score, best first, with their
// highest fine score (at most the top eleven classes, 10..0).
func scoreClasses(names []string, fine, scores []int64) []ScoreClass {
	var byScore [extenderv1.MaxExtenderPriority + 1]ScoreClass
	for i, n := range names {
		s := scores[i]
		if s < 0 || s > extenderv1.MaxExtenderPriority {
			continue
		}
		c := &byScore[s]
		if c.Nodes == 0 || fine[i] > c.FineScore {
			c.FineScore, c.ExampleNode = fine[i], n
		}
		c.Score = s
		c.Nodes++
	}
	var out []ScoreClass
	for s := extenderv1.MaxExtenderPriority; s >= 0; s-- {
		if byScore[s].Nodes > 0 {
			out = append(out, byScore[s])
		}
	}
	return out
}
