//go:build e2e

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/invariant"
)

const gib = contract.MiB(1024)

// GPU models the scenarios use.
var (
	h100 = harness.GPUNodeSpec{Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 80 * gib}
	h200 = harness.GPUNodeSpec{Model: "NVIDIA H200 141GB HBM3e", MemoryMiB: 141 * gib}
	t4   = harness.GPUNodeSpec{Model: "Tesla T4", MemoryMiB: 15 * gib}
)

// setup starts a scenario: a namespace of its own (labelled with team
// unless team is ""), a context bounded by limit, and the pods deleted at
// the end so that later scenarios start from a quiet cluster.
func setup(t *testing.T, name, team string, limit time.Duration) (context.Context, string) {
	t.Helper()
	scenario(t, name)
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	t.Cleanup(cancel)
	ns := "e2e-" + name
	if err := env.CreateNamespace(ctx, ns, team); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := env.DeletePods(dctx, ns); err != nil {
			t.Logf("cleaning up namespace %s: %v", ns, err)
		}
	})
	return ctx, ns
}

// nodes creates the scenario's GPU nodes: spec copies named name-0, name-1, ...
func nodes(ctx context.Context, t *testing.T, scenarioName, prefix string, count int, spec harness.GPUNodeSpec) []*harness.GPUNode {
	t.Helper()
	var specs []harness.GPUNodeSpec
	for i := range count {
		s := spec
		s.Name = prefix + "-" + strconv.Itoa(i)
		s.Labels = map[string]string{ScenarioLabel: scenarioName}
		for k, v := range spec.Labels {
			s.Labels[k] = v
		}
		specs = append(specs, s)
	}
	ns, err := env.AddGPUNodes(ctx, specs...)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// pod starts a pod pinned to the scenario's nodes.
func pod(ns, name, scenarioName string) *harness.PodBuilder {
	return harness.Pod(ns, name).NodeSelector(ScenarioLabel, scenarioName)
}

func create(ctx context.Context, t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := env.CreatePod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// waitPods waits for cond on the namespace's pods, failing with what they look like.
func waitPods(ctx context.Context, t *testing.T, ns, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	pods, err := env.WaitPods(ctx, ns, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v\n%s", what, err, describe(context.Background(), pods))
	}
	return pods
}

// describe lists pods with node, phase and last scheduling failure.
func describe(ctx context.Context, pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		b.WriteString("  " + p.Name + " node=" + p.Spec.NodeName + " phase=" + string(p.Status.Phase))
		if p.Spec.NodeName == "" {
			if msg, err := env.LastFailedScheduling(ctx, p.Namespace, p.Name); err == nil && msg != "" {
				b.WriteString(" FailedScheduling: " + msg)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// assignment returns a pod's assignment, failing the test when it has none.
func assignment(t *testing.T, p *corev1.Pod) *contract.Assignment {
	t.Helper()
	a, err := env.Assignment(p)
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	if a == nil {
		t.Fatalf("pod %s is bound to %s without an assignment", p.Name, p.Spec.NodeName)
	}
	return a
}

// checkInvariants fails the test on any invariant violation.
func checkInvariants(ctx context.Context, t *testing.T, q *quota.Config) {
	t.Helper()
	vs, err := env.CheckInvariants(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) > 0 {
		t.Errorf("invariant violations:\n%s", invariant.Summary(vs))
	}
}

// failedScheduling waits until the pod has a FailedScheduling event and returns its message.
func failedScheduling(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		msg, err = env.LastFailedScheduling(ctx, ns, name)
		return err == nil && msg != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no FailedScheduling event: %v", ns, name, err)
	}
	return msg
}

// holdsFor checks, every interval for d, that check still holds; its first
// error fails the test (waitPods' counterpart: what must not happen).
func holdsFor(ctx context.Context, t *testing.T, d, interval time.Duration, check func(context.Context) error) {
	t.Helper()
	// check gets the scenario's context, not the window's: a call made as
	// the window closes must not fail for the window's deadline.
	err := wait.PollUntilContextTimeout(ctx, interval, d, true, func(context.Context) (bool, error) {
		return false, check(ctx)
	})
	if ctx.Err() != nil || !wait.Interrupted(err) {
		t.Fatal(err)
	}
}

// retryCreate creates p every 200 ms, for up to 10 s, until ok says the
// answer is the wanted one (a pod created, or a denial); it returns the last
// answer.
func retryCreate(ctx context.Context, t *testing.T, p *corev1.Pod, ok func(error) bool) error {
	t.Helper()
	var last error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = env.CreatePod(ctx, p.DeepCopy())
		return ok(last), nil
	})
	return last
}

func getPod(ctx context.Context, t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deleteNow deletes without a grace period.
var deleteNow = metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
