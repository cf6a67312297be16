package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
)

// Narrowing. kube-scheduler filters hundreds of nodes for every pod (every
// node with percentageOfNodesToScore: 100), which at thousands of nodes is
// most of its cost. For a pod the queue admits with room held, the ledger already knows where it goes: the
// admitting update gives it a required node affinity with one
// metadata.name term per candidate (its held node and the next best that
// fit it, Options.Narrow), which NodeAffinity's PreFilter turns into a node
// list. kube-scheduler and the extender then see those few nodes, and the
// held node is the one the extender passes, as it would have among all.
//
// The affinity can only be narrowed while the pod is gated, so there is no
// widening it later. The way out, for a pod none of its candidates took
// before its hold lapsed (kube-scheduler ruled them out for what it checks
// itself: CPU, ports, volumes, pod affinity), is its controller: the pod is
// evicted and its Job or ReplicaSet creates it again, gated, in the queue.
// Hence only pods a controller owns are narrowed; a bare pod has nobody to
// recreate it and is left to filter every node. A pod with required node
// affinity of its own is not narrowed either: inside its terms, a
// metadata.name requirement takes one value, so it could only be pinned to
// one node.

// narrowable reports whether pod may be narrowed at admission.
func (c *Controller) narrowable(pod *corev1.Pod, wl *workload) bool {
	if !c.o.Narrow || len(wl.pods) != 1 || len(wl.hold.Candidates) == 0 || metav1.GetControllerOf(pod) == nil {
		return false
	}
	if c.o.Parser.Of(pod).Gang != nil {
		return false // a gang is narrowed to its tier (tierSelector)
	}
	a := pod.Spec.Affinity
	return a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil
}

// narrowAffinity is the strategic-merge patch of spec.affinity that
// narrows a pod to nodes: one term per node (terms are ORed; a
// metadata.name field requirement takes one value).
func narrowAffinity(nodes []string) map[string]any {
	terms := make([]map[string]any, 0, len(nodes))
	for _, n := range nodes {
		terms = append(terms, map[string]any{"matchFields": []map[string]any{
			{"key": "metadata.name", "operator": string(corev1.NodeSelectorOpIn), "values": []string{n}},
		}})
	}
	return map[string]any{"nodeAffinity": map[string]any{
		"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": terms},
	}}
}

// stranded reports whether an admitted pod was narrowed, its hold has
// lapsed and kube-scheduler last found it unschedulable: none of its
// candidates will take it, and its affinity cannot be widened. The
// admission record is read only for unbound pods with required node
// affinity and an Unschedulable condition.
func (c *Controller) stranded(pod *corev1.Pod, now time.Time) (contract.Admission, bool) {
	if pod.Spec.NodeName != "" || pod.Spec.Affinity == nil || pod.Spec.Affinity.NodeAffinity == nil ||
		pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil || metav1.GetControllerOf(pod) == nil {
		return contract.Admission{}, false
	}
	unschedulable := false
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			unschedulable = true
		}
	}
	if !unschedulable {
		return contract.Admission{}, false
	}
	data, ok := pod.Annotations[c.o.Names.AdmissionAnnotation]
	if !ok {
		return contract.Admission{}, false
	}
	rec, err := contract.ParseAdmission([]byte(data))
	if err != nil || len(rec.NarrowedTo) == 0 || rec.Hold == nil { // only a held pod is narrowed
		return contract.Admission{}, false
	}
	return rec, !now.Before(rec.HoldUntil)
}

// requeue evicts stranded pods (Eviction API: the controller sees a
// disruption, a disruption budget holds) so that their controllers create
// them again, gated. At most one eviction per pod per HoldTTL.
func (c *Controller) requeue(ctx context.Context, pods []strandedPod, now time.Time) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	for uid, at := range c.requeued {
		if now.Sub(at) >= 2*c.o.HoldTTL {
			delete(c.requeued, uid) // long gone, or due again
		}
	}
	c.mu.Unlock()
	for _, s := range pods {
		c.mu.Lock()
		last, recent := c.requeued[s.pod.UID]
		due := !recent || now.Sub(last) >= c.o.HoldTTL
		if due {
			c.requeued[s.pod.UID] = now
		}
		c.mu.Unlock()
		if !due {
			continue
		}
		owner := metav1.GetControllerOf(s.pod)
		msg := fmt.Sprintf("none of the %d nodes it was narrowed to at admission (%s) took it while its room was held: evicted so that its %s %s creates it again, queued",
			len(s.rec.NarrowedTo), strings.Join(s.rec.NarrowedTo, ", "), owner.Kind, owner.Name)
		if err := c.evict(ctx, s.pod); err != nil {
			logger.Error(err, "Evicting a stranded narrowed pod failed", "pod", klog.KObj(s.pod))
			continue
		}
		c.event(s.pod, corev1.EventTypeWarning, "Requeued", msg)
		c.o.Metrics.Requeued.Inc()
		logger.Info("Requeued a narrowed pod that no candidate took", "pod", klog.KObj(s.pod), "narrowedTo", s.rec.NarrowedTo,
			"owner", owner.Kind+"/"+owner.Name)
	}
}

// strandedPod is a pod requeue evicts, with its admission record.
type strandedPod struct {
	pod *corev1.Pod
	rec contract.Admission
}
