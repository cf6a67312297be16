//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueueDefrag: team qdefrag's quota sets defrag. Two 2-GPU nodes each
// have one GPU taken: one by the pod of Job "mover" (annotated movable),
// one by the bare pod "fixed". A 2-GPU pod, "big", fits on neither. The
// queue moves the Job's pod (one move): it is evicted, "big" runs on the
// node it left, and the Job's new pod runs on the other node beside
// "fixed". Without moves, "big" would wait for ever.
func TestQueueDefrag(t *testing.T) {
	const name = "qdefrag"
	ctx, ns := setup(t, name, "qdefrag", 4*time.Minute)
	queueing(ctx, t)
	if err := env.StartControllerManager(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	const slot = "rota.test/defrag-slot"
	spec := harness.GPUNodeSpec{Model: "Rota Defrag GPU", MemoryMiB: h100.MemoryMiB, Count: 2}
	spec.Labels = map[string]string{slot: "a"}
	nodes(ctx, t, name, name+"-a", 1, spec)
	spec.Labels = map[string]string{slot: "b"}
	nodes(ctx, t, name, name+"-b", 1, spec)

	one, backoff := int32(1), int32(6)
	tmpl := pod(ns, "", name).GPUs(1).Annotation(env.Names.MovableAnnotation, "true").Obj()
	tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "mover", Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: &one, Completions: &one, BackoffLimit: &backoff,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: tmpl.Annotations}, Spec: tmpl.Spec}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteJobAtEnd(t, ns, "mover")
	pods := waitPods(ctx, t, ns, "the Job's pod running", func(p []corev1.Pod) bool {
		jp := jobPods(p, "mover")
		return len(jp) == 1 && jp[0].Status.Phase == corev1.PodRunning
	})
	first := jobPods(pods, "mover")[0]
	from := first.Spec.NodeName
	other := name + "-b-0"
	otherSlot := "b"
	if strings.HasPrefix(from, name+"-b") {
		other, otherSlot = name+"-a-0", "a"
	}
	create(ctx, t, pod(ns, "fixed", name).GPUs(1).NodeSelector(slot, otherSlot).Obj())
	waitPods(ctx, t, ns, "fixed running", func(p []corev1.Pod) bool { return running(p, "fixed") })

	create(ctx, t, pod(ns, "big", name).GPUs(2).Obj())
	pods = waitPods(ctx, t, ns, "big and the Job's new pod running", func(p []corev1.Pod) bool {
		jp := jobPods(p, "mover")
		return running(p, "big") && len(jp) == 1 && jp[0].Name != first.Name && jp[0].Status.Phase == corev1.PodRunning
	})
	if n := byName(pods, "big").Spec.NodeName; n != from {
		t.Errorf("big runs on %s, want %s (the node the move freed)", n, from)
	}
	if n := jobPods(pods, "mover")[0].Spec.NodeName; n != other {
		t.Errorf("the Job's new pod runs on %s, want %s", n, other)
	}
	if n := byName(pods, "fixed").Spec.NodeName; n != other {
		t.Errorf("fixed moved to %s", n)
	}
	moved, err := env.NamespaceEvents(ctx, ns, "Moved")
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 || moved[first.Name] == nil {
		t.Fatalf("Moved events on %v, want only on %s", moved, first.Name)
	}
	if msg := moved[first.Name][0].Message; !strings.Contains(msg, ns+"/big") || !strings.Contains(msg, "fragmented") {
		t.Errorf("the moved pod's event does not say for whom and why: %q", msg)
	}
	making, err := env.NamespaceEvents(ctx, ns, "MakingRoom")
	if err != nil {
		t.Fatal(err)
	}
	if making["big"] == nil || !strings.Contains(making["big"][0].Message, first.Name) {
		t.Errorf("big's MakingRoom event: %v", making["big"])
	}
	note(name, "one move: the Job's pod left %s for %s, the 2-GPU pod runs on %s", from, other, from)
	checkInvariants(ctx, t, nil)
}
