package remediation

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/remediation"
)

// leaseTransform trims a node Lease to what the controller reads: its
// renew time.
func leaseTransform(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion},
		Spec: coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime}}, nil
}

// PodFailed counts a failed GPU pod against its node (state.Options.OnPodFailed).
func (c *Controller) PodFailed(ctx context.Context, node string) {
	now := c.now()
	c.mu.Lock()
	n, in := c.quarantine.Failure(remediation.NodeTarget(node), now, "GPU pods failed")
	c.mu.Unlock()
	if in {
		c.quarantined(ctx, remediation.NodeTarget(node), fmt.Sprintf("%d GPU pods failed within %s", n, c.cfg.QuarantineWindow))
	}
}

// observation is one target's health in one pass.
type observation struct {
	t      remediation.Target
	ok     bool
	cause  remediation.Cause
	detail string
}

// observe reads one node's health: Ready, Lease and each GPU. It returns
// the open faults and whether usability for placement changed.
func (c *Controller) observe(ctx context.Context, node *corev1.Node, now time.Time) ([]remediation.Fault, bool) {
	obs := append([]observation{c.nodeHealth(node, now)}, c.gpuObservations(node.Name)...)
	logger := func() klog.Logger { return klog.LoggerWithValues(klog.FromContext(ctx), "node", klog.KObj(node)) }
	faults, entered, changed := c.record(logger, obs, now)
	for _, t := range entered {
		c.quarantined(ctx, t, fmt.Sprintf("%d failures within %s", c.cfg.QuarantineThreshold, c.cfg.QuarantineWindow))
		changed = true
	}
	return faults, changed
}

// nodeHealth observes the node itself: its Ready condition, then how long
// ago its Lease was renewed.
func (c *Controller) nodeHealth(node *corev1.Node, now time.Time) observation {
	nt := remediation.NodeTarget(node.Name)
	o := observation{t: nt, ok: true}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			o = observation{t: nt, cause: remediation.NodeNotReady, detail: "Ready=" + string(cond.Status)}
		}
	}
	if !o.ok {
		return o
	}
	if age, late := c.leaseLate(node.Name, now); late {
		o = observation{t: nt, cause: remediation.NodeHeartbeatLost,
			detail: fmt.Sprintf("lease renewed %s ago", age.Round(time.Second))}
	}
	return o
}

// leaseLate returns how long ago the node's Lease was renewed and whether
// that is past the heartbeat timeout (never without a Lease).
func (c *Controller) leaseLate(node string, now time.Time) (time.Duration, bool) {
	if c.leases == nil {
		return 0, false
	}
	obj, ok, _ := c.leases.GetStore().GetByKey(corev1.NamespaceNodeLease + "/" + node)
	if !ok {
		return 0, false
	}
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil {
		return 0, false
	}
	age := now.Sub(l.Spec.RenewTime.Time)
	return age, age > c.cfg.HeartbeatTimeout
}

// gpuObservations observes the node's GPUs as extender/state parsed them
// from its topology annotation (none without a valid annotation).
func (c *Controller) gpuObservations(node string) []observation {
	gs, _ := c.gpuHealth(node)
	out := make([]observation, 0, len(gs))
	for _, g := range gs {
		o := observation{t: remediation.GPUTarget(node, g.UUID), ok: g.Healthy}
		if !o.ok {
			o.cause, o.detail = remediation.GPUUnhealthy, g.Reason
		}
		out = append(out, o)
	}
	return out
}

// record applies one node's observations to recovery and the open faults,
// counting each new fault towards quarantine. It returns the node's open
// faults, the targets that entered quarantine and whether usability for
// placement changed.
func (c *Controller) record(logger func() klog.Logger, obs []observation, now time.Time) ([]remediation.Fault, []remediation.Target, bool) {
	var faults []remediation.Fault
	var entered []remediation.Target
	changed := false
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range obs {
		changed = c.recovery.Observe(o.t, o.ok, now) || changed
		f, open := c.faults[o.t]
		switch {
		case o.ok && open:
			delete(c.faults, o.t)
			logger().Info("Recovered; takes new work after the quiet period unless quarantined",
				"target", o.t.String(), "quiet", c.cfg.RecoveryQuiet, "down", now.Sub(f.Since).Round(time.Second))
		case !o.ok:
			if !open || f.Cause != o.cause {
				var in bool
				f, in = c.openFaultLocked(o, now)
				logger().Info("Fault", "target", o.t.String(), "cause", o.cause, "detail", o.detail)
				if in {
					entered = append(entered, o.t)
				}
			}
			faults = append(faults, f)
		}
	}
	return faults, entered, changed
}

// openFaultLocked opens the fault o shows (or replaces one of another
// cause) and counts it towards quarantine; it reports whether the target
// entered quarantine.
func (c *Controller) openFaultLocked(o observation, now time.Time) (remediation.Fault, bool) {
	f := remediation.Fault{Target: o.t, Cause: o.cause, Detail: o.detail, Since: now}
	c.faults[o.t] = f
	c.metrics.Faults.WithLabelValues(string(o.cause)).Inc()
	_, in := c.quarantine.Failure(o.t, now, f.Message())
	return f, in
}
