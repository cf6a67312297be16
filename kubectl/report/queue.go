package report

import (
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

// QueuedPod is one pod waiting in Rota's queue, as the API shows it: the
// queue gate still on, and the queue controller's Queued condition (which
// may lag the controller's live view by up to its write interval).
type QueuedPod struct {
	Pod      string `json:"pod"`
	Team     string `json:"team"`
	Gang     string `json:"gang,omitempty"`
	Priority int32  `json:"priority"`
	// Waiting is how long since the pod was created.
	Waiting string `json:"waiting"`
	// Reason and Message are the Queued condition's ("" until the
	// controller has written one).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Queue lists the queued pods, by team, then priority, then age.
type Queue struct {
	Pods []QueuedPod `json:"pods"`
}

// Queue lists the pods still in the queue; team, when set, only that team's.
func (c *Cluster) Queue(team string) Queue {
	var q Queue
	for _, p := range c.pods {
		if !podreq.Queued(p, c.o.Names) || podreq.Terminal(p) {
			continue
		}
		t := c.teamOf(p)
		if team != "" && t != team {
			continue
		}
		qp := QueuedPod{Pod: p.Namespace + "/" + p.Name, Team: t, Waiting: c.now.Sub(p.CreationTimestamp.Time).Round(time.Second).String()}
		if p.Spec.Priority != nil {
			qp.Priority = *p.Spec.Priority
		}
		if g, err := podreq.GangOf(p, c.o.Names); err == nil && g != nil {
			qp.Gang = g.Key
		}
		if cond := QueuedCondition(p, c.o.Names.QueuedCondition); cond != nil {
			qp.Reason, qp.Message = cond.Reason, cond.Message
		}
		q.Pods = append(q.Pods, qp)
	}
	slices.SortFunc(q.Pods, func(a, b QueuedPod) int {
		if c := strings.Compare(a.Team, b.Team); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		pa, pb := c.pods[a.Pod], c.pods[b.Pod]
		if c := pa.CreationTimestamp.Compare(pb.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return q
}

// QueuedCondition returns the pod's Queued condition, nil when it has none.
func QueuedCondition(p *corev1.Pod, condType string) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if string(p.Status.Conditions[i].Type) == condType {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// LiveQueue is rota-extender's GET /debug/queue answer.
type LiveQueue = contract.QueueView
