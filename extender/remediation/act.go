package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/remediation"
)

// act carries out one decision on a faulty pod: in dry-run a report; else
// the event and pod condition, then the deletion (or its deferral).
func (c *Controller) act(ctx context.Context, f remediation.Fault, d remediation.Decision, now time.Time) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KRef(d.Pod.Namespace, d.Pod.Name),
		"node", d.Pod.Node, "action", d.Action, "cause", f.Cause)
	ctx = klog.NewContext(ctx, logger)
	grace := c.grace(d.Pod)
	if d.DryRun {
		c.reportDryRun(logger, f, d, grace)
		return
	}
	uid := types.UID(d.Pod.UID)
	marked := c.action(uid) == remediation.Deferred
	if !marked && !c.mark(ctx, f, d, grace, now) {
		return // the pod is gone
	}
	switch d.Action {
	case remediation.Mark:
		c.done(uid, remediation.Mark)
	case remediation.Deferred:
		c.deferDeletion(logger, d, marked)
		return
	case remediation.Delete:
		if !c.evict(ctx, f, d, grace) {
			return
		}
	}
	c.metrics.Actions.WithLabelValues(string(c.cfg.Mode), string(d.Action), string(f.Cause)).Inc()
}

func podRef(p remediation.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}
}

// reportDryRun reports what d would do, once per pod and action.
func (c *Controller) reportDryRun(logger klog.Logger, f remediation.Fault, d remediation.Decision, grace time.Duration) {
	if !c.firstReport(d) {
		return
	}
	c.recorder.Eventf(podRef(d.Pod), corev1.EventTypeWarning, ReasonDryRun, "Dry run: would %s: %s", verb(d.Action, grace), d.Reason)
	logger.Info("Dry run: remediation not applied", "reason", d.Reason)
	c.metrics.Actions.WithLabelValues(string(c.cfg.Mode), string(d.Action), string(f.Cause)).Inc()
}

// mark records the fault on the pod: a Warning event and the pod condition
// (status subresource). It reports false when the pod is gone.
func (c *Controller) mark(ctx context.Context, f remediation.Fault, d remediation.Decision, grace time.Duration, now time.Time) bool {
	c.recorder.Eventf(podRef(d.Pod), corev1.EventTypeWarning, ReasonGPUFailure, "%s; %s", d.Reason, verb(d.Action, grace))
	err := c.setCondition(ctx, d, f, now)
	switch {
	case apierrors.IsNotFound(err):
		c.done(types.UID(d.Pod.UID), remediation.Delete)
		return false
	case err != nil:
		klog.FromContext(ctx).Error(err, "Setting the pod's failure condition failed")
	}
	return true
}

// deferDeletion records a deletion the rate limit holds back; the first
// time (not yet marked) it says so in an event.
func (c *Controller) deferDeletion(logger klog.Logger, d remediation.Decision, marked bool) {
	if !marked {
		c.recorder.Eventf(podRef(d.Pod), corev1.EventTypeNormal, ReasonDeferred, "Deletion deferred by the remediation rate limit; retried shortly")
	}
	c.done(types.UID(d.Pod.UID), remediation.Deferred)
	c.metrics.RateLimited.Inc()
	logger.V(2).Info("Deletion deferred by the rate limit")
}

// evict evicts the pod (this UID only) through the Eviction API with the
// grace period, so that PodDisruptionBudgets hold and the pod's controller
// sees a disruption. It reports false when the eviction did not happen and
// is retried on the next pass: a budget that allows no disruption now (the
// API server's 429) is reported on the pod as RemediationBlocked.
func (c *Controller) evict(ctx context.Context, f remediation.Fault, d remediation.Decision, grace time.Duration) bool {
	logger := klog.FromContext(ctx)
	uid := types.UID(d.Pod.UID)
	secs := int64(grace / time.Second)
	err := c.client.PolicyV1().Evictions(d.Pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: d.Pod.Name, Namespace: d.Pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &uid}}})
	switch {
	case err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err):
	case apierrors.IsTooManyRequests(err):
		c.recorder.Eventf(podRef(d.Pod), corev1.EventTypeWarning, ReasonBlocked,
			"Eviction for the GPU fault refused by a PodDisruptionBudget (%v); retried shortly", err)
		logger.Info("Eviction refused by a PodDisruptionBudget; retried on the next pass", "err", err)
		return false
	default:
		logger.Error(err, "Evicting the pod failed; retried on the next pass")
		return false
	}
	c.done(uid, remediation.Delete)
	c.metrics.FaultToDelete.Observe(c.now().Sub(f.Since).Seconds())
	logger.Info("Pod evicted for a fault", "reason", d.Reason, "grace", grace)
	return true
}

func verb(a remediation.Action, grace time.Duration) string {
	switch a {
	case remediation.Delete, remediation.Deferred:
		return fmt.Sprintf("evicting the pod (grace %s; disruption budgets hold) so its controller recreates it elsewhere", grace)
	}
	return "marking the pod only (label " + contract.RemediationMarkOnly + " or a mark-only gang member)"
}

// grace is the deletion's grace period: the pod's checkpoint-grace
// annotation (capped), else the configured default.
func (c *Controller) grace(p remediation.Pod) time.Duration {
	g := c.cfg.GracePeriod
	obj, ok, _ := c.pods.GetIndexer().GetByKey(p.Key())
	if !ok {
		return g
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return g
	}
	if d, ok := podreq.CheckpointGrace(pod, c.names, c.cfg.MaxCheckpointGrace); ok {
		g = d
	}
	return g
}

func (c *Controller) setCondition(ctx context.Context, d remediation.Decision, f remediation.Fault, now time.Time) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodConditionType(c.names.GPUFailureCondition), Status: corev1.ConditionTrue,
		Reason: string(f.Cause), Message: d.Reason, LastTransitionTime: metav1.NewTime(now),
	}}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Pods(d.Pod.Namespace).Patch(ctx, d.Pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	return err
}
