//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueueDeadline: team qdeadline's quota is one GPU, held by "hold".
// Queued behind it: "old" (no deadline), then "soon", whose deadline less
// its 10-minute runtime is 10 minutes away (within the queue's 30-minute
// lead), then "missed", whose deadline has passed. "soon" goes ahead of
// "old" and says why; "missed" keeps its place and is told, once, that it
// cannot end by its deadline. When "hold" ends, "soon" runs, not "old".
func TestQueueDeadline(t *testing.T) {
	const name = "qdeadline"
	ctx, ns := setup(t, name, "qdeadline", 3*time.Minute)
	queueing(ctx, t)
	nodes(ctx, t, name, name, 1, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 2})
	create(ctx, t, pod(ns, "hold", name).GPUs(1).Obj())
	waitPods(ctx, t, ns, "hold running", func(p []corev1.Pod) bool { return running(p, "hold") })
	create(ctx, t, pod(ns, "old", name).GPUs(1).Obj())
	time.Sleep(1100 * time.Millisecond) // old is older by a second at least
	now := time.Now().UTC()
	create(ctx, t, pod(ns, "soon", name).GPUs(1).
		Annotation(env.Names.DeadlineAnnotation, now.Add(20*time.Minute).Format(time.RFC3339)).
		Annotation(env.Names.MaxRuntimeAnnotation, "10m").Obj())
	create(ctx, t, pod(ns, "missed", name).GPUs(1).
		Annotation(env.Names.DeadlineAnnotation, now.Add(-time.Minute).Format(time.RFC3339)).Obj())
	// Each pod's condition is written at most every 10 s.
	waitPods(ctx, t, ns, "the deadlines and positions in the Queued conditions", func(p []corev1.Pod) bool {
		s, o, m := byName(p, "soon"), byName(p, "old"), byName(p, "missed")
		return s != nil && o != nil && m != nil &&
			strings.HasPrefix(qcond(s, env.Names), "position 1 of 3") && strings.Contains(qcond(s, env.Names), "goes ahead") &&
			strings.HasPrefix(qcond(o, env.Names), "position 2 of 3") &&
			strings.HasPrefix(qcond(m, env.Names), "position 3 of 3") && strings.Contains(qcond(m, env.Names), "cannot end by its deadline")
	})
	evs, err := env.NamespaceEvents(ctx, ns, "DeadlineMissed")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || len(evs["missed"]) != 1 {
		t.Errorf("DeadlineMissed events %v, want one on missed", evs)
	}
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "hold", deleteNow); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(ctx, t, ns, "soon running", func(p []corev1.Pod) bool { return running(p, "soon") })
	if o := byName(pods, "old"); o == nil || !gated(o) {
		t.Error("old left the queue before soon's deadline was served")
	}
	note(name, "the pod with a near deadline went ahead of an older one; the one past its deadline was told")
	checkInvariants(ctx, t, nil)
}
