//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// borrowers starts four 1-GPU pods of team b (model's pool, no guarantee)
// in nsB, in the order of pods, each over a second after the one before
// (so that their admissions differ in age), and waits until they run; it
// removes them at the end.
func borrowers(ctx context.Context, t *testing.T, name, team, nsB, model string, pods ...string) {
	t.Helper()
	teamNamespace(ctx, t, nsB, team)
	queueing(ctx, t)
	nodes(ctx, t, name, name, 1, harness.GPUNodeSpec{Model: model, MemoryMiB: h100.MemoryMiB, Count: 4})
	for _, p := range pods {
		create(ctx, t, pod(nsB, p, name).GPUs(1).Obj())
		time.Sleep(1100 * time.Millisecond)
	}
	waitPods(ctx, t, nsB, "the borrower running", func(p []corev1.Pod) bool { return harness.Running(p) == 4 })
}

// TestQueueReclaimLeastLostWork: reclaim stops the borrowed work that
// loses least. The two oldest borrowers (ckpt0, ckpt1) report a checkpoint
// just now; the two newest (plain0, plain1) declare nothing (checkpointing
// every 30 min by default, so a stop loses their whole run so far). Before
// lost work counted, the newest went; now the two that just checkpointed
// go, and their events say so.
func TestQueueReclaimLeastLostWork(t *testing.T) {
	const name = "qlost"
	ctx, nsG := setup(t, name, "qlost-g", 3*time.Minute)
	nsB := "e2e-qlost-b"
	borrowers(ctx, t, name, "qlost-b", nsB, "Rota Lost GPU", "ckpt0", "ckpt1", "plain0", "plain1")
	time.Sleep(3 * time.Second) // the newest has run a while too
	now := time.Now().UTC().Format(time.RFC3339)
	for _, p := range []string{"ckpt0", "ckpt1"} {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, env.Names.LastCheckpointAnnotation, now)
		if _, err := env.Client.CoreV1().Pods(nsB).Patch(ctx, p, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(ctx, t, pod(nsG, "mine", name).GPUs(2).Obj())
	waitPods(ctx, t, nsG, "the guaranteed pod running", func(p []corev1.Pod) bool { return running(p, "mine") })
	evs, err := env.NamespaceEvents(ctx, nsB, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for pod, es := range evs {
		got = append(got, pod)
		if !strings.Contains(es[0].Message, "loses the least since its last checkpoint") || !strings.Contains(es[0].Message, nsG+"/mine") {
			t.Errorf("%s's event does not say who took its GPUs and why: %q", pod, es[0].Message)
		}
	}
	if len(got) != 2 || evs["ckpt0"] == nil || evs["ckpt1"] == nil {
		t.Errorf("reclaimed %v, want ckpt0 and ckpt1 (they checkpointed just now)", got)
	}
	note(name, "reclaimed the two that checkpointed just now, kept the two newest that declared nothing")
	checkInvariants(ctx, t, nil)
}

// TestQueueReclaimSparesMinRuntime: team qyoung-b's minimum runtime is an
// hour (quota minRuntime), so its borrowed pods are not reclaimed for a
// team below its guarantee; the guaranteed pod waits, saying why.
func TestQueueReclaimSparesMinRuntime(t *testing.T) {
	const name = "qyoung"
	ctx, nsG := setup(t, name, "qyoung-g", 3*time.Minute)
	nsB := "e2e-qyoung-b"
	borrowers(ctx, t, name, "qyoung-b", nsB, "Rota Young GPU", "borrow0", "borrow1", "borrow2", "borrow3")
	create(ctx, t, pod(nsG, "mine", name).GPUs(2).Obj())
	// Three queue passes and more; a reclaim would have evicted by now.
	time.Sleep(8 * time.Second)
	evs, err := env.NamespaceEvents(ctx, nsB, "Reclaimed")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 0 {
		t.Errorf("reclaimed %v inside the team's minimum runtime", evs)
	}
	pods, err := env.Pods(ctx, nsB)
	if err != nil {
		t.Fatal(err)
	}
	if r := harness.Running(pods); r != 4 {
		t.Errorf("the borrower runs %d pods, want all 4", r)
	}
	mine, err := env.Pods(ctx, nsG)
	if err != nil {
		t.Fatal(err)
	}
	if running(mine, "mine") {
		t.Error("the guaranteed pod runs: something made room inside the minimum runtime")
	}
	// Its Queued condition says when reclaim can serve it: an hour after
	// the borrowers started.
	msg := qcond(byName(mine, "mine"), env.Names)
	i := strings.Index(msg, "can be reclaimed for it from ")
	if i < 0 {
		t.Fatalf("mine's Queued condition does not say when reclaim can serve it: %q", msg)
	}
	at, err := time.Parse("2006-01-02 15:04:05 MST", msg[i+len("can be reclaimed for it from "):][:len("2006-01-02 15:04:05 UTC")])
	if err != nil {
		t.Fatalf("the time in %q: %v", msg, err)
	}
	if d := time.Until(at); d < 55*time.Minute || d > time.Hour {
		t.Errorf("reclaim expected in %v, want about an hour (team qyoung-b's minimum runtime)", d.Round(time.Second))
	}
	t.Logf("mine: %s", msg)
	note(name, "no reclaim inside the team's 1h minimum runtime; the waiting pod is told when")
	checkInvariants(ctx, t, nil)
}

// TestQueueReclaimRespectsPDB: the borrower's pods are covered by a
// PodDisruptionBudget that allows no disruption, so reclaim's evictions
// are refused (429): the pods keep running, each refusal is reported on
// the pod (ReclaimBlocked), and the guaranteed pod waits.
func TestQueueReclaimRespectsPDB(t *testing.T) {
	const name = "qpdb"
	ctx, nsG := setup(t, name, "qpdb-g", 3*time.Minute)
	nsB := "e2e-qpdb-b"
	borrowers(ctx, t, name, "qpdb-b", nsB, "Rota PDB GPU", "borrow0", "borrow1", "borrow2", "borrow3")
	all := intstr.FromInt32(4)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "keep-all", Namespace: nsB},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &all, Selector: &metav1.LabelSelector{}}}
	if _, err := env.Client.PolicyV1().PodDisruptionBudgets(nsB).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create(ctx, t, pod(nsG, "mine", name).GPUs(2).Obj())
	var blocked map[string][]corev1.Event
	deadline := time.Now().Add(30 * time.Second)
	for len(blocked) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		var err error
		if blocked, err = env.NamespaceEvents(ctx, nsB, "ReclaimBlocked"); err != nil {
			t.Fatal(err)
		}
	}
	if len(blocked) == 0 {
		mine, _ := env.Pods(ctx, nsG)
		for _, p := range mine {
			t.Logf("%s: gates %v, conditions %+v", p.Name, p.Spec.SchedulingGates, p.Status.Conditions)
		}
		t.Fatal("no ReclaimBlocked event: the budget's refusal was not reported")
	}
	for p, es := range blocked {
		if !strings.Contains(es[0].Message, "disruption budget") && !strings.Contains(es[0].Message, "PodDisruptionBudget") ||
			!strings.Contains(es[0].Message, nsG+"/mine") {
			t.Errorf("%s's event does not say what blocked it and for whom: %q", p, es[0].Message)
		}
	}
	pods, err := env.Pods(ctx, nsB)
	if err != nil {
		t.Fatal(err)
	}
	if r := harness.Running(pods); r != 4 {
		t.Errorf("the borrower runs %d pods, want all 4 (its budget allows no disruption)", r)
	}
	note(name, "reclaim refused by a PodDisruptionBudget: %d pods reported ReclaimBlocked, all 4 still run", len(blocked))
	checkInvariants(ctx, t, nil)
}
