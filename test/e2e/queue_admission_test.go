//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// The queue's admission side on the real API server: the chart's
// MutatingWebhookConfiguration gates GPU pods at creation, the validating
// webhook refuses only what can never run and lets only the queue
// controller's identity remove the gate. Team queue (quotaDoc): 4 GPUs,
// borrow 2 from a shared pool of 2, maxQueuedPods 3. Each scenario turns
// the queue gate on for itself (queueing, queue_test.go). rota-extender's
// queue controller runs meanwhile and admits queued pods when the team's
// quota has room; where a pod must stay queued, pods of the same team in a
// namespace with queueing off (admitted at creation) hold the quota.

// queueModel is a GPU model only these scenarios' nodes have.
const queueModel = "Rota Queue Test GPU 24GB"

// queueNodes gives the scenario two 8-GPU nodes of queueModel, so that a
// 7-GPU pod passes the largest-node check whichever scenarios ran before.
func queueNodes(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	nodes(ctx, t, name, name, 2, harness.GPUNodeSpec{Model: queueModel, Count: 8, MemoryMiB: 24 * gib})
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

// offNamespace creates the scenario's second namespace, of team queue with
// queueing off, and deletes its pods at the end.
func offNamespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	off := "e2e-" + name + "-off"
	if err := env.CreateNamespace(ctx, off, "queue"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.DeletePods(dctx, off)
	})
	if err := env.SetNamespaceQueueing(ctx, off, false); err != nil {
		t.Fatal(err)
	}
	return off
}

// holdQuota takes gpus of team queue's quota with ungated pods admitted at
// creation in the queueing-off namespace off (one pod per at most 4 GPUs).
func holdQuota(ctx context.Context, t *testing.T, off, name string, gpus int) {
	t.Helper()
	for i := 0; gpus > 0; i++ {
		n := min(gpus, 4)
		if p := create(ctx, t, pod(off, fmt.Sprintf("hold-%d", i), name).GPUs(n).Obj()); gated(p) {
			t.Fatalf("pod of a namespace with queueing off created gated")
		}
		gpus -= n
	}
}

func gated(p *corev1.Pod) bool { return harness.HasQueueGate(p, env.Names.QueueGate) }

// mustDeny expects a webhook denial that contains every want.
func mustDeny(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !harness.IsWebhookDenial(err) {
		t.Fatalf("%s: got %v, want a denial by the webhook", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: denial %q does not say %q", what, err, w)
		}
	}
	t.Logf("%s: %v", what, err)
}

// TestQueueGatesGPUPods: a GPU pod is created with the queue gate (the API
// shows it in spec.schedulingGates of the created pod); two that together
// exceed the team's quota + borrow are both queued, not refused; a pod that
// asks for a GPU in an init container only is gated, a CPU-only pod is not.
func TestQueueGatesGPUPods(t *testing.T) {
	const name = "queuegate"
	ctx, ns := setup(t, name, "queue", 2*time.Minute)
	queueing(ctx, t)
	queueNodes(ctx, t, name)

	// 2 x 4 GPUs: more than the team's 4 + 2 at once, each within reach.
	for _, n := range []string{"train-0", "train-1"} {
		p := create(ctx, t, pod(ns, n, name).GPUs(4).Obj())
		if !gated(p) {
			t.Fatalf("GPU pod %s created with gates %v, want %s", n, p.Spec.SchedulingGates, env.Names.QueueGate)
		}
	}
	initOnly := pod(ns, "prep", name).Obj()
	initOnly.Spec.InitContainers = []corev1.Container{{Name: "prep", Image: "rota.test/prep:1",
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceName(env.Names.GPU): mustQ("1")},
			Requests: corev1.ResourceList{corev1.ResourceName(env.Names.GPU): mustQ("1")}}}}
	if p := create(ctx, t, initOnly); !gated(p) {
		t.Errorf("pod with a GPU in its init container only: gates %v, want the queue gate", p.Spec.SchedulingGates)
	}
	web := create(ctx, t, pod(ns, "web", name).CPU("100m").Obj())
	if len(web.Spec.SchedulingGates) != 0 {
		t.Errorf("CPU-only pod created with gates %v, want none", web.Spec.SchedulingGates)
	}
	note(name, "GPU pods created gated (over the team's current quota too), CPU-only pod not")
}

// removeGate removes every scheduling gate of a pod as client, by a JSON
// patch (what kubectl edit or kubectl patch sends).
func removeGate(ctx context.Context, client kubernetes.Interface, ns, name string) error {
	patch, _ := json.Marshal([]map[string]any{{"op": "remove", "path": "/spec/schedulingGates"}})
	_, err := client.CoreV1().Pods(ns).Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

// TestQueueGateRemoval: an admin removing the gate by hand is refused with
// the message; an update that keeps the gate is allowed; rota-extender's
// identity (the queue controller's) removes it, and the pod then counts as
// the team's admitted use: the next pod of the team in a namespace with
// queueing off is refused with the numbers. The team's quota is held by a
// pod of that namespace, so the queue controller leaves the pod queued.
func TestQueueGateRemoval(t *testing.T) {
	const name = "queueungate"
	ctx, ns := setup(t, name, "queue", 2*time.Minute)
	queueing(ctx, t)
	queueNodes(ctx, t, name)
	off := offNamespace(ctx, t, name)
	holdQuota(ctx, t, off, name, 4)
	p := create(ctx, t, pod(ns, "job", name).GPUs(4).Obj()) // 4 + 4 > 4 quota + 2 borrow: waits
	if !gated(p) {
		t.Fatalf("created with gates %v", p.Spec.SchedulingGates)
	}

	// The records policy refuses it inside the API server; without the
	// policy, rota-admission's webhook still does.
	if on, err := env.RecordsPolicyOn(ctx); err != nil {
		t.Fatal(err)
	} else if on {
		if err := removeGate(ctx, env.Client, ns, "job"); err == nil || !strings.Contains(err.Error(), "is removed only by Rota's queue") {
			t.Fatalf("admin removes the gate with the records policy: got %v, want the policy's refusal", err)
		}
		recordsPolicyOff(ctx, t)
	}
	mustDeny(t, "admin removes the gate", removeGate(ctx, env.Client, ns, "job"),
		"only Rota's queue controller may remove scheduling gate "+env.Names.QueueGate,
		"the pod is queued: kubectl rota why job -n "+ns)
	if env.RBAC == nil {
		t.Log("admin credentials: the extender is the admin, so the refusal above is all this mode checks")
		return
	}
	patch := []byte(`{"metadata":{"annotations":{"note":"still queued"}}}`)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(ctx, "job", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("an update that keeps the gate: %v", err)
	}
	if p := getPod(ctx, t, ns, "job"); !gated(p) {
		t.Fatalf("job was admitted while its team's quota is held: gates %v", p.Spec.SchedulingGates)
	}
	ext, err := env.ClientAs("rota-extender")
	if err != nil {
		t.Fatal(err)
	}
	if err := removeGate(ctx, ext, ns, "job"); err != nil {
		t.Fatalf("rota-extender's identity (%s) removing the gate: %v", env.Users["rota-extender"], err)
	}
	if p := getPod(ctx, t, ns, "job"); gated(p) {
		t.Fatalf("gates after the extender's removal: %v", p.Spec.SchedulingGates)
	}

	// The team holds 4 + 4 GPUs now: the webhook counts the ungated pod.
	last := retryCreate(ctx, t, pod(off, "now", name).GPUs(1).Obj(), func(err error) bool {
		if err == nil {
			_ = env.Client.CoreV1().Pods(off).Delete(ctx, "now", deleteNow)
		}
		return harness.IsWebhookDenial(err) && strings.Contains(err.Error(), "8 in use or queued")
	})
	mustDeny(t, "a 1-GPU pod of the team with queueing off after the ungated 4", last,
		"team queue: quota 4 GPUs, 8 in use or queued", "this pod needs 1")
	note(name, "hand removal refused; the extender's identity ungates; the ungated pod counts as use")
}

// TestQueueNeverFits: what can never run is refused at creation with the
// numbers: a pod and a gang larger than the team's quota + borrow, and a
// pod larger than every node of the GPU models it accepts.
func TestQueueNeverFits(t *testing.T) {
	const name = "queuenever"
	ctx, ns := setup(t, name, "queue", 2*time.Minute)
	queueing(ctx, t)
	queueNodes(ctx, t, name)
	// A larger GPU of another model: the cluster has room for a 30 GiB
	// share, the pod's model does not.
	nodes(ctx, t, name, name+"-big", 1, harness.GPUNodeSpec{Model: h100.Model, Count: 1, MemoryMiB: h100.MemoryMiB})

	_, err := env.CreatePod(ctx, pod(ns, "big", name).GPUs(7).Obj())
	mustDeny(t, "a 7-GPU pod of team queue", err,
		"team queue may hold at most 6 GPUs (4 quota + 2 borrow); this pod needs 7 GPUs, so it can never run")
	_, err = env.CreatePod(ctx, pod(ns, "g-0", name).GPUs(4).Gang("g", 2).Obj())
	mustDeny(t, "a gang of 2 x 4 GPUs", err,
		"team queue may hold at most 6 GPUs (4 quota + 2 borrow); this gang needs 8 GPUs (gang g: 2 pods x 4 GPUs)")
	_, err = env.CreatePod(ctx, pod(ns, "wide", name).Memory(30).Annotation(env.Names.GPUModelsAnnotation, queueModel).Obj())
	mustDeny(t, "a 30 GiB share on 24 GiB GPUs of its model", err,
		fmt.Sprintf("the pod asks for 30 GiB of GPU memory on one GPU but the largest GPU of GPU model %q has 24 GiB", queueModel))
	_, err = env.CreatePod(ctx, pod(ns, "typo", name).GPUs(1).Annotation(env.Names.GPUModelsAnnotation, "A,,B").Obj())
	mustDeny(t, "a malformed GPU models annotation", err, "has an empty model name at position 2")
	// Within reach: queued.
	if p := create(ctx, t, pod(ns, "fits", name).GPUs(6).Obj()); !gated(p) {
		t.Errorf("a 6-GPU pod was created without the gate: %v", p.Spec.SchedulingGates)
	}
	note(name, "pod, gang and model-size refusals carry the numbers")
}

// TestQueueingOffNamespace: a namespace labelled with queueing off keeps
// the deny at creation: its GPU pods are not gated and the one that would
// take the team over quota is refused.
func TestQueueingOffNamespace(t *testing.T) {
	const name = "queueoff"
	ctx, ns := setup(t, name, "queue", 2*time.Minute)
	queueing(ctx, t)
	if err := env.SetNamespaceQueueing(ctx, ns, false); err != nil {
		t.Fatal(err)
	}
	p := create(ctx, t, pod(ns, "a", name).GPUs(4).Obj())
	if gated(p) {
		t.Fatalf("pod of a namespace with queueing off created gated")
	}
	_, err := env.CreatePod(ctx, pod(ns, "b", name).GPUs(4).Obj())
	mustDeny(t, "the next 4 GPUs of team queue (4 pending, borrow 2)", err,
		"team queue: quota 4 GPUs, 4 in use or queued (0 running, 4 pending); this pod needs 4")
	note(name, "queueing-off namespace: ungated, deny at creation as before")
}

// TestQueueCap: with maxQueuedPods 3 the fourth queued pod is refused with
// the count; deleting a queued pod makes room again. The team's quota and
// borrowing are held by pods of a namespace with queueing off, so the
// queued pods stay queued.
func TestQueueCap(t *testing.T) {
	const name = "queuecap"
	ctx, ns := setup(t, name, "queue", 2*time.Minute)
	queueing(ctx, t)
	queueNodes(ctx, t, name)
	holdQuota(ctx, t, offNamespace(ctx, t, name), name, 6)
	for i := range 3 {
		create(ctx, t, pod(ns, fmt.Sprintf("q-%d", i), name).GPUs(1).Obj())
	}
	_, err := env.CreatePod(ctx, pod(ns, "q-3", name).GPUs(1).Obj())
	mustDeny(t, "the fourth queued pod", err,
		"team queue has 3 pods queued (maxQueuedPods 3); this pod would be one more")
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "q-0", deleteNow); err != nil {
		t.Fatal(err)
	}
	last := retryCreate(ctx, t, pod(ns, "q-3", name).GPUs(1).Obj(), func(err error) bool { return err == nil })
	if last != nil {
		t.Fatalf("after deleting a queued pod: %v", last)
	}
	note(name, "the 4th queued pod refused at maxQueuedPods 3; room again after a delete")
}
