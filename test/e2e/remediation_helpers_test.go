//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// heartbeat stops and restarts one simulated node's Lease renewals. The
// node simulator renews every node's Lease on a timer; an admission policy
// bound to that one Lease refuses any update that moves its renewTime
// forward, so the simulator's renewals fail as a dead kubelet's would never
// arrive. The test may still move the time back.
type heartbeat struct {
	node string
	lift func(wait bool)
}

// stopHeartbeat freezes the node's Lease and backdates its last renewal by
// ago (how long the kubelet has been silent). It returns once the policy
// is enforced and the backdated Lease is stored, at the time of the fault.
func stopHeartbeat(ctx context.Context, t *testing.T, node string, ago time.Duration) (*heartbeat, time.Time) {
	t.Helper()
	lift := refuseByPolicy(ctx, t, "rota-e2e-heartbeat-"+node, &admissionregistrationv1.MatchResources{
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			ResourceNames: []string{node},
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"},
					Resources: []string{"leases"}},
			},
		}},
	}, "!has(object.spec.renewTime) || !has(oldObject.spec.renewTime) || object.spec.renewTime <= oldObject.spec.renewTime",
		"e2e: the heartbeat of node "+node+" is stopped",
		func(ctx context.Context) error { return renewLease(ctx, node, time.Now(), true) })
	if err := renewLease(ctx, node, time.Now().Add(-ago), false); err != nil {
		t.Fatalf("backdating the lease of %s: %v", node, err)
	}
	return &heartbeat{node: node, lift: lift}, time.Now()
}

// resume removes the policy and renews the Lease now, as a kubelet coming
// back would.
func (h *heartbeat) resume(ctx context.Context, t *testing.T) {
	t.Helper()
	h.lift(true)
	if err := renewLease(ctx, h.node, time.Now(), false); err != nil {
		t.Fatalf("the lease of %s cannot be renewed again: %v", h.node, err)
	}
}

func renewLease(ctx context.Context, node string, at time.Time, dryRun bool) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"renewTime": metav1.NewMicroTime(at)}})
	if err != nil {
		return err
	}
	o := metav1.PatchOptions{}
	if dryRun {
		o.DryRun = []string{metav1.DryRunAll}
	}
	_, err = env.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, node, types.MergePatchType, patch, o)
	return err
}

// failPod reports a running pod's container as exited with code 1 (phase
// Failed), as the kubelet does for a crashed pod with restartPolicy Never.
func failPod(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodFailed
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, new(bool)
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				Message: "CUDA error: an illegal memory access was encountered", FinishedAt: now}}
		}
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status = corev1.ConditionFalse
			}
		}
		_, err = env.Client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("failing pod %s/%s: %v", ns, name, err)
	}
}

// nodeEvents returns the events with reason about a Node (they live in
// the default namespace).
func nodeEvents(ctx context.Context, t *testing.T, node, reason string) []corev1.Event {
	t.Helper()
	l, err := env.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", node),
			fields.OneTermEqualSelector("involvedObject.kind", "Node"), fields.OneTermEqualSelector("reason", reason)).String()})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitFor polls cond every 50 ms (finer than waitPods, for timings).
func waitFor(ctx context.Context, t *testing.T, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// hasQuarantineTaint reports whether the node carries the quarantine taint.
func hasQuarantineTaint(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == env.Names.QuarantineTaint && t.Effect == corev1.TaintEffectNoSchedule
	})
}

// quantiles returns the median and the 90th percentile (nearest rank).
func quantiles(ds []time.Duration) (median, p90 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0
	}
	if len(s)%2 == 1 {
		median = s[len(s)/2]
	} else {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return median, s[int(math.Ceil(0.9*float64(len(s))))-1]
}

// ms rounds durations for a log line.
func ms(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
