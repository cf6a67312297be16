//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// The GPU models of TestQueuePerModel: team qmodel has quota for 2 GPUs of
// model A and none of model B.
const (
	modelA = "Rota Model A GPU"
	modelB = "Rota Model B GPU"
)

// TestQueuePerModel: per-model quota holds. A pod that accepts only a
// model its team has no quota for can never run and is refused at
// creation, with the team's models; pods of model A are admitted up to the
// team's 2 GPUs of A and the rest queue, waiting for quota, while model B's
// GPUs stand free; a pod that accepts any model is charged to, and runs
// on, model A.
func TestQueuePerModel(t *testing.T) {
	const name = "qmodel"
	ctx, ns := setup(t, name, "qmodel", 3*time.Minute)
	queueing(ctx, t)
	nodes(ctx, t, name, "qmodel-a", 1, harness.GPUNodeSpec{Model: modelA, MemoryMiB: 24 * gib, Count: 4})
	nodes(ctx, t, name, "qmodel-b", 1, harness.GPUNodeSpec{Model: modelB, MemoryMiB: 24 * gib, Count: 4})
	accepts := func(p *harness.PodBuilder, model string) *corev1.Pod {
		return p.Annotation(env.Names.GPUModelsAnnotation, model).Obj()
	}

	_, err := env.CreatePod(ctx, accepts(pod(ns, "b-only", name).GPUs(1), modelB))
	mustDeny(t, "a pod accepting only model B", err,
		`team qmodel has GPU quota only for GPU models "Rota Model A GPU"; this pod accepts only "Rota Model B GPU"`, "so it can never run")

	create(ctx, t, accepts(pod(ns, "a-0", name).GPUs(1), modelA))
	create(ctx, t, accepts(pod(ns, "a-1", name).GPUs(1), modelA))
	waitPods(ctx, t, ns, "a-0 and a-1 running", func(p []corev1.Pod) bool { return running(p, "a-0", "a-1") })
	create(ctx, t, accepts(pod(ns, "a-2", name).GPUs(1), modelA))
	time.Sleep(1100 * time.Millisecond) // a-2 is older than any-0 by a clear margin
	create(ctx, t, pod(ns, "any-0", name).GPUs(1).Obj())
	pods := waitPods(ctx, t, ns, "a-2 and any-0 queued for quota", func(p []corev1.Pod) bool {
		for _, n := range []string{"a-2", "any-0"} {
			q := byName(p, n)
			if q == nil || !gated(q) || queuedCondition(q) == nil || queuedCondition(q).Reason != "Quota" {
				return false
			}
		}
		return true
	})
	t.Logf("any-0: %s", queuedCondition(byName(pods, "any-0")).Message)
	// They stay queued, pass after pass, with model B's 4 GPUs free.
	holdsFor(ctx, t, 4*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		pods, err := env.Pods(ctx, ns)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Spec.NodeName == "qmodel-b-0" {
				return fmt.Errorf("pod %s bound to the model B node: the team has no quota for model B", p.Name)
			}
			if (p.Name == "a-2" || p.Name == "any-0") && !gated(&p) {
				return fmt.Errorf("%s admitted while team qmodel uses its 2 GPUs of model A", p.Name)
			}
		}
		return nil
	})

	// Room frees on model A, one GPU at a time: the older a-2 first, then
	// any-0, each charged to model A and placed on it.
	for _, step := range []struct{ end, next, still string }{{"a-0", "a-2", "any-0"}, {"a-1", "any-0", ""}} {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, step.end, deleteNow); err != nil {
			t.Fatal(err)
		}
		pods = waitPods(ctx, t, ns, step.next+" running", func(p []corev1.Pod) bool { return running(p, step.next) })
		if s := byName(pods, step.still); step.still != "" && (s == nil || !gated(s)) {
			t.Errorf("%s admitted with %s: team qmodel would hold 3 GPUs of model A", step.still, step.next)
		}
		p := byName(pods, step.next)
		adm, err := podreq.AdmissionOf(p, env.Names)
		if err != nil || adm == nil || adm.Team != "qmodel" || adm.Model != modelA {
			t.Errorf("%s's admission record = %+v, %v; want team qmodel, model %q", step.next, adm, err, modelA)
		}
		if p.Spec.NodeName != "qmodel-a-0" {
			t.Errorf("%s runs on %s, want the model A node qmodel-a-0 (it is charged to model A)", step.next, p.Spec.NodeName)
		}
	}
	pods, err = env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	onA := 0
	for _, p := range pods {
		if p.Spec.NodeName == "qmodel-a-0" && p.DeletionTimestamp == nil && !podreq.Terminal(&p) {
			onA++
		}
	}
	if onA != 2 {
		t.Errorf("%d pods on model A, want 2 (the team's quota)", onA)
	}
	note(name, "only-B refused at creation; A admitted to 2 GPUs, the rest queued for quota with B free; any-model pod charged to and placed on A")
	checkInvariants(ctx, t, nil)
}
