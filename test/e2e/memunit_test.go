//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// unitQuota gives team units 10 GiB of GPU memory and nothing to borrow.
const unitQuota = `teams:
  units:
    gpus: 0
    gpuMemoryGiB: 10
sharedPool: {gpus: 0, gpuMemoryGiB: 0}
unknownTeams: unlimited
`

// TestMemoryUnit512: the whole queue path with gpu-memory counted in
// 512 MiB units, on a control plane of its own where every part (the
// webhook, the extender's queue and placement, the device plugins' nodes)
// is given the unit. A 12-unit share gets 6 GiB on its GPU and is charged
// 6 GiB by both the webhook and the queue (charged in 1 GiB units, it
// would be over the team's 10 GiB and never admitted); the webhook refuses
// a further 5 GiB at creation in a queueing-off namespace of the team and
// admits 4 GiB; the queue then holds a 1-unit pod until 4 GiB come free.
// A node whose device plugin counts in 1 GiB units takes no share, says
// why, and gets a MemoryUnitMismatch event.
func TestMemoryUnit512(t *testing.T) {
	const name = "memunit"
	scenario(t, name)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	e, err := harness.Start(ctx, harness.Options{Quota: unitQuota, MemoryUnitMiB: 512, Queueing: true,
		Logf: func(f string, a ...any) { t.Logf("units: "+f, a...) }})
	if err != nil {
		t.Fatalf("starting a control plane with 512 MiB units: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.LogTails(40))
		}
		if err := e.Stop(); err != nil {
			t.Logf("stopping: %v", err)
		}
		if !t.Failed() && os.Getenv("ROTA_KEEP_CLUSTER") != "1" {
			os.RemoveAll(e.Dir)
		}
	})
	spec := h100
	spec.Count, spec.Name, spec.Plugin = 2, "unit-512", true
	other := h100
	other.Count, other.Name = 2, "unit-1024"
	if _, err := e.AddGPUNodes(ctx, spec, other); err != nil {
		t.Fatal(err)
	}
	// unit-1024's device plugin counts in 1 GiB units.
	n, err := e.Client.CoreV1().Nodes().Get(ctx, "unit-1024", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := contract.ParseTopology([]byte(n.Annotations[e.Names.TopologyAnnotation]))
	if err != nil {
		t.Fatal(err)
	}
	topo.MemoryUnitMiB = 1024
	data, err := topo.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{e.Names.TopologyAnnotation: string(data)}}})
	if _, err := e.Client.CoreV1().Nodes().Patch(ctx, "unit-1024", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	ns, off := "units", "units-off"
	for _, x := range []string{ns, off} {
		if err := e.CreateNamespace(ctx, x, "units"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.SetNamespaceQueueing(ctx, off, false); err != nil {
		t.Fatal(err)
	}
	onNode := func(x, p, node string, units int64) *corev1.Pod {
		return harness.Pod(x, p).Memory(units).NodeSelector("kubernetes.io/hostname", node).Obj()
	}
	wait := func(x, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
		t.Helper()
		pods, err := e.WaitPods(ctx, x, cond)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return pods
	}
	if _, err := e.CreatePod(ctx, onNode(ns, "a", "unit-512", 12)); err != nil {
		t.Fatal(err)
	}
	pods := wait(ns, "a running", func(p []corev1.Pod) bool { return running(p, "a") })
	as, err := e.Assignment(byName(pods, "a"))
	if err != nil || as == nil || len(as.GPUs) != 1 || as.GPUs[0].MemoryMiB != 6*1024 {
		t.Fatalf("a's assignment %+v (%v); want one GPU with 6 GiB (12 units of 512 MiB)", as, err)
	}

	// The webhook counts a as 6 GiB: 5 more is over 10 GiB, 4 is not.
	_, err = e.CreatePod(ctx, onNode(off, "d", "unit-512", 10))
	if err == nil || !harness.IsWebhookDenial(err) || !strings.Contains(err.Error(), "5 GiB") {
		t.Fatalf("5 GiB more for team units at 6 of 10 GiB, queueing off: got %v; want a refusal that names 5 GiB", err)
	}
	t.Logf("webhook: %v", err)
	if _, err := e.CreatePod(ctx, onNode(off, "e", "unit-512", 8)); err != nil {
		t.Fatalf("4 GiB more for team units at 6 of 10 GiB: %v", err)
	}
	wait(off, "e running", func(p []corev1.Pod) bool { return running(p, "e") })

	// The queue counts a and e as 10 GiB: b waits, and runs when e ends.
	if _, err := e.CreatePod(ctx, onNode(ns, "b", "unit-512", 1)); err != nil {
		t.Fatal(err)
	}
	pods = wait(ns, "b queued for quota", func(p []corev1.Pod) bool {
		b := byName(p, "b")
		return b != nil && harness.HasQueueGate(b, e.Names.QueueGate) && qcond(b, e.Names) != ""
	})
	if msg := qcond(byName(pods, "b"), e.Names); !strings.Contains(msg, "waiting for quota") || !strings.Contains(msg, "10 GiB") {
		t.Errorf("b's Queued condition %q; want it waiting for quota with 10 GiB in use", msg)
	}
	if err := e.Client.CoreV1().Pods(off).Delete(ctx, "e", deleteNow); err != nil {
		t.Fatal(err)
	}
	wait(ns, "b running", func(p []corev1.Pod) bool { return running(p, "a", "b") })

	// A share on the node that counts in 1 GiB units is refused, with why.
	if _, err := e.CreatePod(ctx, onNode(ns, "elsewhere", "unit-1024", 1)); err != nil {
		t.Fatal(err)
	}
	// The queue finds no room for it (its Queued condition says why), or,
	// admitted, kube-scheduler does (FailedScheduling).
	var msg string
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(msg, "takes no memory shares") {
		if time.Now().After(deadline) {
			t.Fatalf("the share on unit-1024 was never refused for its unit; last word: %q", msg)
		}
		time.Sleep(500 * time.Millisecond)
		p, err := e.Client.CoreV1().Pods(ns).Get(ctx, "elsewhere", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if msg = qcond(p, e.Names); !harness.HasQueueGate(p, e.Names.QueueGate) {
			msg, _ = e.LastFailedScheduling(ctx, ns, "elsewhere")
		}
	}
	t.Logf("unit-1024: %s", msg)
	evs, err := e.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=unit-1024,reason=MemoryUnitMismatch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) == 0 {
		t.Error("node unit-1024 has no MemoryUnitMismatch event")
	}
}

// qcond is a pod's Queued condition message ("" when it has none).
func qcond(p *corev1.Pod, names contract.Names) string {
	for _, c := range p.Status.Conditions {
		if string(c.Type) == names.QueuedCondition {
			return c.Message
		}
	}
	return ""
}
