package remediation

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/remediation"
)

// quarantined reports a new quarantine and, in on mode, writes it to the
// Node (annotation, and the taint for a whole node).
func (c *Controller) quarantined(ctx context.Context, t remediation.Target, why string) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", t.Node)
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: t.Node}
	if c.cfg.Mode != remediation.On {
		c.mu.Lock()
		c.quarantine.ReleaseNode(t.Node) // dry-run keeps nothing out of placement
		c.mu.Unlock()
		c.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonDryRun, "Dry run: would quarantine %s: %s", t, why)
		logger.Info("Dry run: would quarantine", "target", t.String(), "why", why)
		c.metrics.Actions.WithLabelValues(string(c.cfg.Mode), "quarantine", "").Inc()
		return
	}
	c.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonQuarantined,
		"%s quarantined (%s); no new GPU work until an admin sets %s=%s", t, why, c.names.QuarantineAnnotation, contract.QuarantineRelease)
	logger.Info("Quarantined", "target", t.String(), "why", why)
	c.metrics.Actions.WithLabelValues(string(c.cfg.Mode), "quarantine", "").Inc()
	if err := c.writeQuarantine(ctx, t.Node); err != nil {
		logger.Error(err, "Writing the quarantine to the Node failed; it holds in memory and is retried")
	}
	c.reapply(t.Node)
}

// annotationValue lists the node's quarantined targets: "node" and GPU UUIDs.
func annotationValue(ts []remediation.Target) string {
	node := false
	var gpus []string
	for _, t := range ts {
		if t.Kind == remediation.KindNode {
			node = true
		} else {
			gpus = append(gpus, t.GPU)
		}
	}
	return contract.FormatQuarantine(node, gpus)
}

// writeQuarantine makes the Node's annotation and taint match the
// in-memory quarantine of that node.
func (c *Controller) writeQuarantine(ctx context.Context, node string) error {
	c.mu.Lock()
	ts := c.quarantine.OnNode(node)
	c.mu.Unlock()
	want := annotationValue(ts)
	tainted := slices.ContainsFunc(ts, func(t remediation.Target) bool { return t.Kind == remediation.KindNode })
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		if cur := n.Annotations[c.names.QuarantineAnnotation]; cur != want {
			if want == "" {
				delete(n.Annotations, c.names.QuarantineAnnotation)
			} else {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations[c.names.QuarantineAnnotation] = want
			}
			changed = true
		}
		i := slices.IndexFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == c.names.QuarantineTaint })
		switch {
		case tainted && i < 0:
			now := metav1.Now()
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: c.names.QuarantineTaint, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
			changed = true
		case !tainted && i >= 0:
			n.Spec.Taints = slices.Delete(n.Spec.Taints, i, i+1)
			changed = true
		}
		if !changed {
			return nil
		}
		_, err = c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// restoreQuarantine reads the Node's quarantine annotation back into
// memory (after a restart) in on mode.
func (c *Controller) restoreQuarantine(ctx context.Context, node *corev1.Node, now time.Time) {
	v := node.Annotations[c.names.QuarantineAnnotation]
	whole, gpus, release := contract.ParseQuarantine(v)
	if c.cfg.Mode != remediation.On || release || (!whole && len(gpus) == 0) {
		return
	}
	added := false
	c.mu.Lock()
	if whole {
		added = c.quarantine.Add(remediation.NodeTarget(node.Name), now, "restored from the Node")
	}
	for _, uuid := range gpus {
		added = c.quarantine.Add(remediation.GPUTarget(node.Name, uuid), now, "restored from the Node") || added
	}
	c.mu.Unlock()
	if added {
		klog.FromContext(ctx).V(2).Info("Quarantine restored from the Node", "node", klog.KObj(node), "value", v)
		c.reapply(node.Name)
	}
}

// release acts on <domain>/quarantine=release: the node and its GPUs
// return to placement, the taint and annotation go. It reports whether
// anything was released.
func (c *Controller) release(ctx context.Context, node *corev1.Node) bool {
	if node.Annotations[c.names.QuarantineAnnotation] != contract.QuarantineRelease {
		c.mu.Lock()
		delete(c.releaseSeen, node.Name)
		c.mu.Unlock()
		return false
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "node", klog.KObj(node))
	c.mu.Lock()
	// One release per written annotation: until the informer delivers the
	// Node without it (or forever in dry-run, where it is not cleared), the
	// same version must neither release a quarantine that started since
	// nor repeat the event on every pass.
	if rv, seen := c.releaseSeen[node.Name]; seen && rv == node.ResourceVersion {
		c.mu.Unlock()
		return false
	}
	c.releaseSeen[node.Name] = node.ResourceVersion
	released := c.quarantine.ReleaseNode(node.Name)
	c.mu.Unlock()
	if c.cfg.Mode == remediation.On {
		if err := c.writeQuarantine(ctx, node.Name); err != nil {
			logger.Error(err, "Clearing the quarantine from the Node failed; retried")
		}
	}
	c.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name}, corev1.EventTypeNormal,
		ReasonReleased, "Quarantine released by an admin: %d targets return to placement", len(released))
	logger.Info("Quarantine released", "released", len(released))
	return true
}
