package queue

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/quota"
)

// fakeDefragger asks Mover about every running pod it knows and plans to
// move the first movable one.
type fakeDefragger struct {
	uids    []string
	movable []string
	calls   int
	max     int
}

func (d *fakeDefragger) Defrag(pod *corev1.Pod, _ room.Scope, m room.Moves) (placement.DefragPlan, ledger.Claim, bool) {
	d.calls++
	d.max = m.Max
	d.movable = nil
	var plan placement.DefragPlan
	for _, uid := range d.uids {
		a := &ledger.Allocation{PodUID: uid, Node: "n1"}
		if m.Mover(a) != nil {
			d.movable = append(d.movable, uid)
			if len(plan.Moves) == 0 {
				plan = placement.DefragPlan{Node: "n1", Moves: []placement.Move{{Alloc: a, To: "n2"}}}
			}
		}
	}
	if len(plan.Moves) == 0 {
		return plan, ledger.Claim{}, false
	}
	return plan, ledger.Claim{Job: "ml/" + pod.Name, Node: "n1", GPUs: 2}, true
}

// runningPod is a running pod of a Job, started long ago, that says it may
// be moved.
func runningPod(name string) *corev1.Pod {
	p := gpuPod(name, 1, 3*time.Hour, false)
	p.Spec.NodeName = "n1"
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &metav1.Time{Time: t0.Add(-2 * time.Hour)}
	p.Annotations = map[string]string{names.MovableAnnotation: "true", names.CheckpointGraceAnnotation: "2m"}
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: "job-" + p.UID, Controller: &yes}}
	return p
}

// Only pods that say they may move, run, have a controller, are past their
// team's minimum runtime and have no higher priority than the waiting pod
// are offered to the planner. The chosen one is evicted with its
// checkpoint grace, the freed room is held for the waiting pod, and the
// hourly budget then stops a second plan.
func TestDefragMovesOnlyWhatMayMove(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 16, Defrag: true, MinRuntime: "1h"}}}
	mv := runningPod("mv")
	bare := runningPod("bare")
	bare.OwnerReferences = nil
	plain := runningPod("plain")
	delete(plain.Annotations, names.MovableAnnotation)
	high := runningPod("high")
	prio := int32(100)
	high.Spec.Priority = &prio
	young := runningPod("young")
	young.Status.StartTime = &metav1.Time{Time: t0.Add(-10 * time.Minute)}
	pending := runningPod("pending")
	pending.Status.Phase = corev1.PodPending
	big := gpuPod("big", 2, time.Hour, true)
	other := gpuPod("other", 2, 30*time.Minute, true)
	c, client := start(t, cfg, &fakeRoom{free: 0}, mv, bare, plain, high, young, pending, big, other)
	d := &fakeDefragger{}
	for _, p := range []*corev1.Pod{bare, plain, high, young, pending, mv} {
		d.uids = append(d.uids, string(p.UID))
	}
	c.o.Defrag, c.o.Defragger, c.o.MaxCheckpointGrace = Defrag{MaxMovedShare: 0.02, MaxMoves: 2}, d, 10*time.Minute
	var evictions []*policyv1.Eviction
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			evictions = append(evictions, a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction))
			return true, nil, nil
		}
		return false, nil, nil
	})
	c.Pass(t.Context())
	if d.calls != 1 || !slices.Equal(d.movable, []string{string(mv.UID)}) {
		t.Fatalf("planner called %d times, offered %v; want once, only %s", d.calls, d.movable, mv.UID)
	}
	if d.max != 1 {
		t.Errorf("plan bound %d moves, want 1 (2%% of 6 running pods an hour rounds to the minimum, 1)", d.max)
	}
	if len(evictions) != 1 || evictions[0].Name != "mv" {
		t.Fatalf("evictions %+v, want mv", evictions)
	}
	if g := evictions[0].DeleteOptions.GracePeriodSeconds; g == nil || *g != 120 {
		t.Errorf("eviction grace %v, want 120 s (the pod's checkpoint-grace)", g)
	}
	if cl := c.heldClaims(); len(cl) != 1 || cl[0].Job != "ml/big" || cl[0].Node != "n1" {
		t.Errorf("held room %+v, want a claim on n1 for ml/big", cl)
	}
	// The budget is spent: the other waiting pod gets no plan this hour.
	c.Pass(t.Context())
	if d.calls != 1 || len(evictions) != 1 {
		t.Errorf("after the budget was spent: %d plans, %d evictions", d.calls, len(evictions))
	}
	// An hour on, it may.
	c.now = func() time.Time { return t0.Add(time.Hour) }
	c.Pass(t.Context())
	if d.calls != 2 {
		t.Errorf("an hour later, %d plans; want a second", d.calls)
	}
}

// A team whose quota does not set defrag gets no moves.
func TestDefragOnlyForTeamsThatAsk(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 16}}}
	mv := runningPod("mv")
	c, _ := start(t, cfg, &fakeRoom{free: 0}, mv, gpuPod("big", 2, time.Hour, true))
	d := &fakeDefragger{uids: []string{string(mv.UID)}}
	c.o.Defrag, c.o.Defragger = Defrag{MaxMovedShare: 0.02}, d
	c.Pass(t.Context())
	if d.calls != 0 {
		t.Errorf("planned %d times for a team without defrag", d.calls)
	}
}

// roomCheck is a Holder that also answers RoomWithout.
type roomCheck struct {
	fakeRoom
	fits  bool
	asked [][]string
}

func (r *roomCheck) RoomWithout(pods []*corev1.Pod, scope room.Scope, without []string) ([]ledger.Claim, string) {
	r.asked = append(r.asked, without)
	if r.fits {
		return []ledger.Claim{{Job: "ml/" + pods[0].Name, Node: "n1", GPUs: 1}}, ""
	}
	return nil, "the freed GPUs are on nodes the pod may not use"
}

// Reclaim evicts only when the eviction makes room where the waiting pod
// may go; quota alone is not enough.
func TestReclaimOnlyWhereItMakesRoom(t *testing.T) {
	for _, fits := range []bool{false, true} {
		cfg := &quota.Config{Teams: map[string]quota.Team{
			"vision": {GPUs: 4}, "night": {Borrow: quota.Limits{GPUs: 4}}}, SharedPool: quota.Limits{GPUs: 4}}
		night := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml2", Labels: map[string]string{names.TeamLabel: "night"}}}
		b0, b1 := runningPod("b0"), runningPod("b1")
		b0.Namespace, b1.Namespace = "ml2", "ml2"
		h := &roomCheck{fits: fits}
		c, client := start(t, cfg, h, night, b0, b1, gpuPod("want", 1, time.Hour, true))
		c.o.Reclaim = true
		evicted := 0
		client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() == "eviction" {
				evicted++
				return true, nil, nil
			}
			return false, nil, nil
		})
		c.Pass(t.Context())
		if len(h.asked) == 0 || len(h.asked[0]) != 1 {
			t.Fatalf("fits %v: RoomWithout asked %v, want once with one victim's pod", fits, h.asked)
		}
		if want := map[bool]int{false: 0, true: 1}[fits]; evicted != want {
			t.Errorf("room with the victims gone %v: %d evictions, want %d", fits, evicted, want)
		}
		// The freed room is held for the pod it was reclaimed for.
		if cl := c.heldClaims(); fits != (len(cl) == 1 && cl[0].Job == "ml/want") {
			t.Errorf("room with the victims gone %v: held %+v", fits, cl)
		}
	}
}
