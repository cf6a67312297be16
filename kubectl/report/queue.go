package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	// Kind is "Job" for a Job queued suspended (Pod is then
	// "namespace/Job/name", the queue's key for it); empty for a pod.
	Kind string `json:"kind,omitempty"`

	created time.Time
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
		qp := QueuedPod{Pod: p.Namespace + "/" + p.Name, Team: t, Waiting: c.now.Sub(p.CreationTimestamp.Time).Round(time.Second).String(),
			created: p.CreationTimestamp.Time}
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
	q.Pods = append(q.Pods, c.queuedJobs(team)...)
	slices.SortFunc(q.Pods, func(a, b QueuedPod) int {
		if c := strings.Compare(a.Team, b.Team); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return q
}

// queuedJobs lists the Jobs and JobSets queued suspended that wait
// (suspended, with no admission record), each as one entry; team, when
// set, only that team's. They have no Queued condition: their Queued
// event, and the live view (--extender-url), say where they stand.
func (c *Cluster) queuedJobs(team string) []QueuedPod {
	var out []QueuedPod
	add := func(kind, key string, annotations map[string]string, created metav1.Time, pods []*corev1.Pod) {
		if _, recorded := annotations[c.o.Names.AdmissionAnnotation]; recorded || len(pods) == 0 {
			return // suspended after its admission: its pods are ending
		}
		t := c.teamOf(pods[0])
		if team != "" && t != team {
			return
		}
		qp := QueuedPod{Pod: key, Kind: kind, Team: t, created: created.Time,
			Waiting: c.now.Sub(created.Time).Round(time.Second).String(), Reason: "Suspended",
			Message: fmt.Sprintf("a %s of %d pods queued suspended: no pod exists until the queue admits it", kind, len(pods))}
		if pods[0].Spec.Priority != nil {
			qp.Priority = *pods[0].Spec.Priority
		}
		if g, err := podreq.GangOf(pods[0], c.o.Names); err == nil && g != nil {
			qp.Gang = g.Key
		}
		out = append(out, qp)
	}
	for i := range c.in.Jobs {
		j := &c.in.Jobs[i]
		if podreq.QueuedJob(j, c.o.Names) && podreq.Suspended(j) && !podreq.JobFinished(j) && j.DeletionTimestamp == nil {
			add("Job", podreq.JobWorkloadKey(j), j.Annotations, j.CreationTimestamp, podreq.JobPods(j, c.o.Names))
		}
	}
	for i := range c.in.JobSets {
		j := &c.in.JobSets[i]
		if j.Annotations[c.o.Names.QueuedJobAnnotation] == "true" && podreq.JobSetSuspended(j) && !podreq.JobSetFinished(j) && j.DeletionTimestamp == nil {
			add("JobSet", podreq.JobSetWorkloadKey(j), j.Annotations, j.CreationTimestamp, podreq.JobSetPods(j, c.o.Names))
		}
	}
	return out
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
