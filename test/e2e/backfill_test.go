//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// reserveLargeGPUs is the suite's --reserve-large-gpus (main_test.go): a
// gang of at least this many GPUs is held for as soon as it waits for room.
const reserveLargeGPUs = 16

// reservationOf reads a pod's reservation record (nil: none).
func reservationOf(t *testing.T, p *corev1.Pod) *contract.Reservation {
	t.Helper()
	v, ok := p.Annotations[env.Names.ReservationAnnotation]
	if !ok {
		return nil
	}
	r, err := contract.ParseReservation([]byte(v))
	if err != nil {
		t.Fatalf("pod %s: reservation record %q: %v", p.Name, v, err)
	}
	return &r
}

func conditionSays(p *corev1.Pod, want ...string) bool {
	c := queuedCondition(p)
	if c == nil {
		return false
	}
	for _, w := range want {
		if !strings.Contains(c.Message, w) {
			return false
		}
	}
	return true
}

func deletePods(ctx context.Context, t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, n, deleteNow); err != nil {
			t.Fatal(err)
		}
	}
}

// leafOf returns the leaf label of the node a pod runs on.
func leafOf(ctx context.Context, t *testing.T, p *corev1.Pod) string {
	t.Helper()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels[env.Names.Domain+"/leaf"]
}

// TestBackfillReservation: a 2-node gang that does not fit waits while
// small pods run; the GPUs that free in the leaf where it fits soonest are
// held for it and refused to a pod that would run past its expected start,
// with the reason; the hold survives kill -9 of the extender; a pod that
// declares a shorter runtime backfills the held GPUs; the gang starts in
// that leaf when the last pod blocking it ends.
func TestBackfillReservation(t *testing.T) {
	const name = "backfill"
	ctx, ns := setup(t, name, "", 4*time.Minute) // unknown team: unlimited quota
	queueing(ctx, t)
	leaf := env.Names.Domain + "/leaf"
	spec := harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8}
	a, b := spec, spec
	a.Labels = map[string]string{leaf: "bf-a"}
	b.Labels = map[string]string{leaf: "bf-b"}
	nodes(ctx, t, name, "bf-a", 2, a)
	nodes(ctx, t, name, "bf-b", 2, b)
	runtime := env.Names.MaxRuntimeAnnotation

	// Leaf a's pods declare 30 minutes, leaf b's 2 hours: leaf a frees first.
	var fillA, fillB []string
	for i := range 4 {
		fa, fb := fmt.Sprintf("fill-a%d", i), fmt.Sprintf("fill-b%d", i)
		create(ctx, t, pod(ns, fa, name).GPUs(4).NodeSelector(leaf, "bf-a").Annotation(runtime, "30m").Obj())
		create(ctx, t, pod(ns, fb, name).GPUs(4).NodeSelector(leaf, "bf-b").Annotation(runtime, "2h").Obj())
		fillA, fillB = append(fillA, fa), append(fillB, fb)
	}
	waitPods(ctx, t, ns, "the 8 small pods running", func(p []corev1.Pod) bool { return running(p, append(fillA, fillB...)...) })

	members := []string{"pretrain-0", "pretrain-1"}
	for _, m := range members {
		create(ctx, t, pod(ns, m, name).GPUs(8).Gang("pretrain", 2).Obj())
	}
	gang := ns + "/pretrain"
	pods := waitPods(ctx, t, ns, "room held for the gang", func(p []corev1.Pod) bool {
		m := byName(p, members[0])
		return m != nil && gated(m) && m.Annotations[env.Names.ReservationAnnotation] != "" &&
			conditionSays(m, "room held:", "tier 0 bf-a", "expected start")
	})
	rec := reservationOf(t, byName(pods, members[0]))
	if rec.Domain != "tier 0 bf-a" || rec.Since.IsZero() {
		t.Fatalf("reservation record %+v, want leaf bf-a held", rec)
	}
	t.Logf("gang: %s", queuedCondition(byName(pods, members[0])).Message)
	evs, err := env.PodEvents(ctx, ns, members[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e corev1.Event) bool { return e.Reason == "Reserved" }) {
		t.Errorf("no Reserved event on %s", members[0])
	}

	// Three of leaf a's four pods end: their GPUs are held, the fourth blocks.
	deletePods(ctx, t, ns, fillA[:3]...)
	// The queue is FIFO by creation, whose timestamps have a resolution of
	// one second (a tie goes by name, where long sorts first): long must be
	// younger than the gang, whose head it would otherwise become.
	gangCreated := byName(pods, members[0]).CreationTimestamp
	time.Sleep(time.Until(gangCreated.Add(1100 * time.Millisecond)))
	create(ctx, t, pod(ns, "long", name).GPUs(4).Annotation(runtime, "10h").Obj())
	pods = waitPods(ctx, t, ns, "the long pod refused the held GPUs", func(p []corev1.Pod) bool {
		l := byName(p, "long")
		return l != nil && gated(l) && conditionSays(l, "GPU held for gang "+gang, "past it")
	})
	t.Logf("long: %s", queuedCondition(byName(pods, "long")).Message)

	// kill -9 of the extender: the new run holds the same room from the API.
	if err := env.KillExtender(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := env.StartExtender(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few passes of the new leader
	pods, err = env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if l := byName(pods, "long"); !gated(l) {
		t.Fatalf("after the restart the long pod was admitted onto %s", l.Spec.NodeName)
	}
	if again := reservationOf(t, byName(pods, members[0])); again == nil || !again.Since.Equal(rec.Since) || again.Domain != rec.Domain {
		t.Fatalf("after the restart the reservation record is %+v, want %+v", again, rec)
	}

	// A pod that declares 5 minutes ends before the expected start: it
	// backfills the held GPUs of leaf a.
	create(ctx, t, pod(ns, "short", name).GPUs(4).Annotation(runtime, "5m").Obj())
	pods = waitPods(ctx, t, ns, "the short pod backfilled", func(p []corev1.Pod) bool { return running(p, "short") })
	short := byName(pods, "short")
	if l := leafOf(ctx, t, short); l != "bf-a" {
		t.Fatalf("the short pod runs in leaf %q, want the held leaf bf-a", l)
	}
	if d := short.Spec.ActiveDeadlineSeconds; d == nil || *d != 300 {
		t.Errorf("the short pod's activeDeadlineSeconds = %v, want 300 (its declared runtime, enforced by the kubelet)", d)
	}
	if l := byName(pods, "long"); !gated(l) {
		t.Fatalf("the long pod was admitted onto %s", l.Spec.NodeName)
	}

	// The last blocking pod and the backfill end: the gang starts in leaf a.
	deletePods(ctx, t, ns, fillA[3], "short")
	freed := time.Now()
	pods = waitPods(ctx, t, ns, "the gang running", func(p []corev1.Pod) bool { return running(p, members...) })
	for _, m := range members {
		p := byName(pods, m)
		if l := leafOf(ctx, t, p); l != "bf-a" {
			t.Errorf("member %s runs in leaf %q, want bf-a", m, l)
		}
		if _, ok := p.Annotations[env.Names.ReservationAnnotation]; ok {
			t.Errorf("member %s still carries the reservation record after its admission", m)
		}
	}
	if l := byName(pods, "long"); !gated(l) {
		t.Errorf("the long pod was admitted onto %s while leaf b is full", l.Spec.NodeName)
	}
	checkInvariants(ctx, t, nil)
	note(name, "the gang held leaf bf-a, refused a 10h pod, survived kill -9 (%s ago), let a 5m pod backfill, started %s after its last blocker ended",
		time.Since(killed).Round(time.Second), time.Since(freed).Round(100*time.Millisecond))
}

// TestBackfillMaxHold: a reservation whose job has not started within the
// maximum hold is released, with an event and a metric, and the held GPUs
// go to the pods that wait for them; the job cools off.
func TestBackfillMaxHold(t *testing.T) {
	const name = "bfhold"
	ctx, ns := setup(t, name, "", 3*time.Minute)
	queueing(ctx, t)
	nodes(ctx, t, name, "bfhold", 2, harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 8})
	runtime := env.Names.MaxRuntimeAnnotation
	var fill []string
	for i := range 4 {
		f := fmt.Sprintf("fill%d", i)
		create(ctx, t, pod(ns, f, name).GPUs(4).Annotation(runtime, "1h").Obj())
		fill = append(fill, f)
	}
	waitPods(ctx, t, ns, "the small pods running", func(p []corev1.Pod) bool { return running(p, fill...) })
	members := []string{"big-0", "big-1"}
	for _, m := range members {
		create(ctx, t, pod(ns, m, name).GPUs(8).Gang("big", 2).Obj())
	}
	waitPods(ctx, t, ns, "room held for the gang", func(p []corev1.Pod) bool {
		m := byName(p, members[0])
		return m != nil && m.Annotations[env.Names.ReservationAnnotation] != ""
	})
	before, err := env.ExtenderMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Free one node: its 8 GPUs are held, a pod with no runtime waits.
	pods, err := env.Pods(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	node := byName(pods, fill[0]).Spec.NodeName
	for _, f := range fill {
		if byName(pods, f).Spec.NodeName == node {
			deletePods(ctx, t, ns, f)
		}
	}
	create(ctx, t, pod(ns, "waiter", name).GPUs(4).Obj())
	waitPods(ctx, t, ns, "the waiter refused the held GPUs", func(p []corev1.Pod) bool {
		w := byName(p, "waiter")
		return w != nil && gated(w) && conditionSays(w, "GPU held for gang "+ns+"/big", "declares no maximum runtime")
	})

	// The hold reached its maximum: the record says it began 3 hours ago
	// (the default maximum is 2 hours), as a restarted extender would read it.
	old, err := json.Marshal(contract.Reservation{Version: contract.Version, Since: time.Now().Add(-3 * time.Hour).UTC(),
		Domain: reservationOf(t, byName(pods, members[0])).Domain})
	if err != nil {
		t.Fatal(err)
	}
	// Only Rota writes its records (the records policy): the test writes
	// this one as rota-extender.
	asExtender, err := env.ClientAs("rota-extender")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			env.Names.ReservationAnnotation: string(old)}}})
		if _, err := asExtender.CoreV1().Pods(ns).Patch(ctx, m, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods = waitPods(ctx, t, ns, "the hold released and the waiter running", func(p []corev1.Pod) bool {
		m := byName(p, members[0])
		if m == nil || !running(p, "waiter") {
			return false
		}
		r := m.Annotations[env.Names.ReservationAnnotation]
		return strings.Contains(r, "cooledUntil") && !strings.Contains(r, "since")
	})
	rec := reservationOf(t, byName(pods, members[0]))
	if until := time.Until(rec.CooledUntil); until < 20*time.Minute || until > 31*time.Minute {
		t.Errorf("the gang cools off for %s, want about 30 minutes", until.Round(time.Minute))
	}
	evs, err := env.PodEvents(ctx, ns, members[0])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e corev1.Event) bool { return e.Reason == "ReservationReleased" }) {
		t.Errorf("no ReservationReleased event on %s", members[0])
	}
	after, err := env.ExtenderMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sum("rota_queue_reservations_released_total") - before.Sum("rota_queue_reservations_released_total"); d != 1 {
		t.Errorf("rota_queue_reservations_released_total grew by %v, want 1", d)
	}
	checkInvariants(ctx, t, nil)
	note(name, "a hold past its maximum was released (event, metric), the waiter took its GPUs, the gang cools off until %s",
		rec.CooledUntil.Format(time.Kitchen))
}
