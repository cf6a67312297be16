package remediation

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/remediation"
)

// remediate plans and acts on one open fault's pods.
func (c *Controller) remediate(ctx context.Context, f remediation.Fault, now time.Time) {
	c.mu.Lock()
	todo := c.unhandledLocked(c.podsFor(f))
	if len(todo) == 0 {
		c.mu.Unlock()
		return
	}
	members := func(g string) []remediation.Pod { return c.undeletedLocked(c.members(g)) }
	decisions := c.planner.Plan(f, todo, members, now)
	c.mu.Unlock()
	for _, d := range decisions {
		c.act(ctx, f, d, now)
	}
}

// podsFor lists the live pods a fault touches: on the node, or holding the GPU.
func (c *Controller) podsFor(f remediation.Fault) []remediation.Pod {
	objs, err := c.pods.GetIndexer().ByIndex(state.NodeIndex, f.Target.Node)
	if err != nil {
		return nil
	}
	var out []remediation.Pod
	for _, obj := range objs {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil || podreq.Terminal(p) {
			continue
		}
		if f.Target.Kind == remediation.KindGPU {
			as, err := podreq.Assignment(p, c.names)
			if err != nil || as == nil || !slices.Contains(as.UUIDs(), f.Target.GPU) {
				continue
			}
		}
		out = append(out, c.toPod(p))
	}
	slices.SortFunc(out, func(a, b remediation.Pod) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

func (c *Controller) toPod(p *corev1.Pod) remediation.Pod {
	return remediation.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName,
		Gang: podreq.GangKey(p, c.names), MarkOnly: p.Labels[c.names.RemediationLabel] == contract.RemediationMarkOnly}
}

func (c *Controller) members(gang string) []remediation.Pod {
	objs, err := c.pods.GetIndexer().ByIndex(state.GangIndex, gang)
	if err != nil {
		return nil
	}
	var out []remediation.Pod
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp == nil && !podreq.Terminal(p) {
			out = append(out, c.toPod(p))
		}
	}
	slices.SortFunc(out, func(a, b remediation.Pod) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}
