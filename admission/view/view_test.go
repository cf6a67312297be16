package view

import (
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newView returns a view with team "a" (quota gpus guarantee, no borrowing)
// on namespace "ns".
func newView(t *testing.T, gpus int64) (*View, *clock) {
	t.Helper()
	c := &clock{now: time.Unix(1000, 0)}
	v := New(Options{Names: contract.Default, InFlightTTL: 30 * time.Second, Now: c.Now})
	v.SetConfig(quota.Config{Teams: map[string]quota.Team{"a": {GPUs: gpus}, "b": {GPUs: gpus}}})
	v.UpsertNamespace(at.Namespace("ns", "a"))
	v.UpsertNamespace(at.Namespace("nb", "b"))
	return v, c
}

func gpuReq(ns, name string, n int64) Request {
	return Request{Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name, Amount: quota.Amount{GPUs: n}}
}

func gangReq(name, gang string, size int, n int64) Request {
	r := gpuReq("ns", name, n)
	r.Gang = &podreq.GangRef{Key: "ns/" + gang, Name: gang, Size: size}
	return r
}

func used(t *testing.T, v *View, team string) int64 {
	t.Helper()
	u, _, _ := v.Usage()
	return u[team].Total().GPUs
}

func TestReservationLifecycle(t *testing.T) {
	v, c := newView(t, 4)
	if out := v.Admit(gpuReq("ns", "p1", 4)); !out.Allowed {
		t.Fatalf("Admit(p1) = %+v", out)
	}
	if out := v.Admit(gpuReq("ns", "p2", 1)); out.Allowed || out.Reason != QuotaExceeded {
		t.Fatalf("Admit(p2) over quota = %+v", out)
	}
	// The informer shows p1: the reservation becomes the pod, use is unchanged.
	v.UpsertPod(at.Pod("ns", "p1").GPUs(4).Obj())
	if pods, _ := v.Reservations(); pods != 0 || used(t, v, "a") != 4 {
		t.Fatalf("after the informer shows p1: reservations %d, use %d; want 0, 4", pods, used(t, v, "a"))
	}
	// The pod finishes: its GPUs are free.
	v.UpsertPod(at.Pod("ns", "p1").GPUs(4).Phase(corev1.PodSucceeded).Obj())
	if used(t, v, "a") != 0 {
		t.Fatalf("use after p1 succeeded = %d, want 0", used(t, v, "a"))
	}
	// An admitted pod that never appears is released after the TTL.
	if out := v.Admit(gpuReq("ns", "ghost", 4)); !out.Allowed {
		t.Fatalf("Admit(ghost) = %+v", out)
	}
	c.Step(29 * time.Second)
	if out := v.Admit(gpuReq("ns", "p3", 1)); out.Allowed {
		t.Fatalf("Admit(p3) while ghost is held = %+v", out)
	}
	c.Step(2 * time.Second)
	if out := v.Admit(gpuReq("ns", "p3", 1)); !out.Allowed {
		t.Fatalf("Admit(p3) after ghost expired = %+v", out)
	}
}

func TestReservationUID(t *testing.T) {
	v, _ := newView(t, 4)
	// An old pod of the same name (another UID) is still shown: the new
	// admission's reservation must survive its updates.
	v.UpsertPod(at.Pod("ns", "p").GPUs(1).UID("old").Node("n").Obj())
	if out := v.Admit(gpuReq("ns", "p", 2)); !out.Allowed {
		t.Fatalf("Admit = %+v", out)
	}
	v.UpsertPod(at.Pod("ns", "p").GPUs(1).UID("old").Node("n").Phase(corev1.PodRunning).Obj())
	if pods, _ := v.Reservations(); pods != 1 {
		t.Fatalf("reservations = %d after an update of the old pod, want 1", pods)
	}
	v.DeletePod("ns", "p")
	v.UpsertPod(at.Pod("ns", "p").GPUs(2).UID("uid-ns-p").Obj())
	if pods, _ := v.Reservations(); pods != 0 || used(t, v, "a") != 2 {
		t.Fatalf("after the new pod appears: reservations %d, use %d; want 0, 2", pods, used(t, v, "a"))
	}
}

func TestDryRunReservesNothing(t *testing.T) {
	v, _ := newView(t, 4)
	r := gpuReq("ns", "p", 4)
	r.DryRun = true
	for range 3 {
		if out := v.Admit(r); !out.Allowed {
			t.Fatalf("dry run Admit = %+v", out)
		}
	}
	if used(t, v, "a") != 0 {
		t.Fatalf("dry runs reserved %d GPUs", used(t, v, "a"))
	}
}

func TestRetriedCreateReplacesReservation(t *testing.T) {
	v, _ := newView(t, 4)
	for range 3 {
		if out := v.Admit(gpuReq("ns", "p", 3)); !out.Allowed {
			t.Fatalf("Admit(p) again = %+v", out)
		}
	}
	if got := used(t, v, "a"); got != 3 {
		t.Fatalf("use after three creates of one name = %d, want 3", got)
	}
}

func TestGangReservesWholeGang(t *testing.T) {
	v, c := newView(t, 8)
	// First member reserves 3 x 2 GPUs.
	if out := v.Admit(gangReq("g-0", "g", 3, 2)); !out.Allowed || out.Reason != WithinQuota {
		t.Fatalf("first member = %+v", out)
	}
	if got := used(t, v, "a"); got != 6 {
		t.Fatalf("use after the first member = %d, want the whole gang's 6", got)
	}
	// Another pod of the team cannot take the gang's room.
	if out := v.Admit(gpuReq("ns", "other", 3)); out.Allowed {
		t.Fatalf("a pod took the gang's reserved room: %+v", out)
	}
	// Later members are covered.
	for _, name := range []string{"g-1", "g-2"} {
		if out := v.Admit(gangReq(name, "g", 3, 2)); !out.Allowed || out.Reason != GangReserved {
			t.Fatalf("member %s = %+v, want gang_reserved", name, out)
		}
		if got := used(t, v, "a"); got != 6 {
			t.Fatalf("use after %s = %d, want 6", name, got)
		}
	}
	// The members appear; a member that dies keeps its slot while the hold
	// lasts, then the slot is released.
	for _, name := range []string{"g-0", "g-1", "g-2"} {
		v.UpsertPod(at.Pod("ns", name).GPUs(2).Gang("g", "3").Obj())
	}
	if got := used(t, v, "a"); got != 6 {
		t.Fatalf("use once the members are shown = %d, want 6", got)
	}
	v.DeletePod("ns", "g-2")
	if got := used(t, v, "a"); got != 6 {
		t.Fatalf("use right after a member died = %d, want 6 (held)", got)
	}
	c.Step(31 * time.Second)
	v.Expire()
	if got := used(t, v, "a"); got != 4 {
		t.Fatalf("use after the hold expired = %d, want 4", got)
	}
	// Its replacement is checked against quota for the one missing slot.
	if out := v.Admit(gangReq("g-2b", "g", 3, 2)); !out.Allowed || !strings.Contains(string(out.Reason), "quota") {
		t.Fatalf("replacement member = %+v", out)
	}
}

func TestGangPartialHoldExpires(t *testing.T) {
	v, c := newView(t, 8)
	if out := v.Admit(gangReq("g-0", "g", 4, 2)); !out.Allowed {
		t.Fatalf("first member = %+v", out)
	}
	v.UpsertPod(at.Pod("ns", "g-0").GPUs(2).Gang("g", "4").Obj())
	// The job controller never creates the rest: after the TTL only the
	// member that exists is charged.
	c.Step(31 * time.Second)
	v.Expire()
	if got := used(t, v, "a"); got != 2 {
		t.Fatalf("use after the gang's hold expired = %d, want 2", got)
	}
	if _, gangs := v.Reservations(); gangs != 0 {
		t.Fatalf("gang holds = %d, want 0", gangs)
	}
}

func TestNamespaceRelabelMovesUsage(t *testing.T) {
	v, _ := newView(t, 8)
	v.UpsertPod(at.Pod("ns", "p").GPUs(3).Node("n").Obj())
	v.UpsertNamespace(at.Namespace("ns", "b"))
	if a, b := used(t, v, "a"), used(t, v, "b"); a != 0 || b != 3 {
		t.Fatalf("after relabelling: a=%d b=%d, want 0, 3", a, b)
	}
}

func TestPodTeamOverride(t *testing.T) {
	v, _ := newView(t, 8)
	v.UpsertPod(at.Pod("ns", "p").GPUs(3).Label(contract.Default.TeamLabel, "b").Obj())
	if a := used(t, v, "a"); a != 3 {
		t.Fatalf("without override the pod is charged to its namespace's team: a=%d", a)
	}
	v.SetConfig(quota.Config{Teams: map[string]quota.Team{"a": {GPUs: 8}, "b": {GPUs: 8}}, AllowPodTeamOverride: true})
	if a, b := used(t, v, "a"), used(t, v, "b"); a != 0 || b != 3 {
		t.Fatalf("with override: a=%d b=%d, want 0, 3", a, b)
	}
}

func TestNodeCaps(t *testing.T) {
	v, _ := newView(t, 8)
	if err := v.UpsertNode(at.Node("n1", 8, 81920)); err != nil {
		t.Fatal(err)
	}
	if err := v.UpsertNode(at.Node("n2", 4, 144384)); err != nil {
		t.Fatal(err)
	}
	bad := at.Node("n3", 1, 1024)
	bad.Annotations[contract.Default.TopologyAnnotation] = "{"
	if err := v.UpsertNode(bad); err == nil {
		t.Errorf("a bad topology annotation gave no error")
	}
	want := Caps{Nodes: 2, MaxGPUs: 8, MaxGPUMemoryMiB: 144384, TotalGPUs: 12, TotalMemoryMiB: 8*81920 + 4*144384}
	if got := v.Caps(); got != want {
		t.Errorf("Caps() = %+v, want %+v", got, want)
	}
	v.DeleteNode("n2")
	if got := v.Caps(); got.TotalGPUs != 8 || got.MaxGPUMemoryMiB != 81920 {
		t.Errorf("Caps() after deleting n2 = %+v", got)
	}
}
