package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

var (
	names = contract.Default
	t0    = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
)

// fakeRoom is a Holder over a number of free GPUs on one node "n1".
type fakeRoom struct {
	free     int
	held     []string
	released []string
}

func (r *fakeRoom) HoldRoom(pods []*corev1.Pod, scope room.Scope, expires time.Time) (room.Hold, string) {
	need := 0
	for _, p := range pods {
		req, _ := podreq.FromPod(p, podreq.Options{Names: names})
		need += req.GPUs
	}
	if need > r.free {
		return room.Hold{}, "not enough free GPUs"
	}
	r.free -= need
	h := room.Hold{Level: placement.TierNode, Where: "n1"}
	if len(pods) > 1 {
		h.Level, h.Where = 0, "leaf-a"
	}
	for _, p := range pods {
		r.held = append(r.held, p.Name)
		h.Allocations = append(h.Allocations, ledger.Allocation{PodUID: string(p.UID), Pod: p.Name, Node: "n1", Whole: true,
			GPUs: []ledger.Share{{Index: 0, UUID: "GPU-0", MemoryMiB: 1024}}, State: ledger.Reserved, Expires: expires})
	}
	return h, ""
}

func (r *fakeRoom) ReleaseHold(h room.Hold) {
	for _, a := range h.Allocations {
		r.released = append(r.released, a.Pod)
	}
}

func gpuPod(name string, gpus int64, age time.Duration, gated bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(-age))},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceName(names.GPU): *resource.NewQuantity(gpus, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if gated {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: names.QueueGate}}
	}
	return p
}

func start(t testing.TB, cfg *quota.Config, h Holder, objs ...runtime.Object) (*Controller, *fake.Clientset) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{names.TeamLabel: "vision"}}}
	client := fake.NewClientset(append(objs, ns)...)
	f := informers.NewSharedInformerFactory(client, 0)
	pods, nss, jobs := f.Core().V1().Pods().Informer(), f.Core().V1().Namespaces().Informer(), f.Batch().V1().Jobs().Informer()
	classes := f.Scheduling().V1().PriorityClasses().Informer()
	// The extender's pod informer trims pods (state.PodTransform): the
	// controller reads only what that keeps.
	if err := pods.SetTransform(state.PodTransform(names)); err != nil {
		t.Fatal(err)
	}
	if err := jobs.SetTransform(JobTransform(names)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nss.HasSynced, jobs.HasSynced, classes.HasSynced)
	c, err := New(Options{Names: names, Client: client, Pods: pods, Namespaces: nss, Jobs: jobs, PriorityClasses: classes, Holder: h,
		Snapshot: func() *ledger.Snapshot { return ledger.New().Snapshot() }, TierLabels: []string{names.Domain + "/leaf"},
		Quota: func() (*quota.Config, bool) { return cfg, true }, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return c, client
}

func get(t *testing.T, client *fake.Clientset, name string) *corev1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods("ml").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPassAdmitsInOrderWithinQuota(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	running := gpuPod("running", 1, 5*time.Hour, false)
	running.Spec.NodeName = "n1"
	deadline := gpuPod("short", 1, 3*time.Hour, true)
	deadline.Annotations = map[string]string{names.MaxRuntimeAnnotation: "90m"}
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, running, deadline, gpuPod("old", 2, 2*time.Hour, true), gpuPod("new", 2, time.Hour, true))
	c.Pass(t.Context())

	// vision: 1 running + short 1 + old 2 = 4 of 4; new (2) waits for quota.
	if diff := cmp.Diff([]string{"short", "old"}, r.held); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
	short := get(t, client, "short")
	if podreq.Queued(short, names) {
		t.Errorf("short still gated: %v", short.Spec.SchedulingGates)
	}
	if short.Spec.ActiveDeadlineSeconds == nil || *short.Spec.ActiveDeadlineSeconds != 5400 {
		t.Errorf("short activeDeadlineSeconds = %v, want 5400 (max-runtime 90m)", short.Spec.ActiveDeadlineSeconds)
	}
	adm, err := podreq.AdmissionOf(short, names)
	if err != nil || adm == nil || adm.Team != "vision" || adm.Hold == nil || adm.Hold.Node != "n1" || adm.QueuedFor != "3h0m0s" {
		t.Errorf("short admission record = %+v, %v; want team vision, hold on n1, queued 3h", adm, err)
	}
	newPod := get(t, client, "new")
	if !podreq.Queued(newPod, names) {
		t.Fatalf("new was admitted past quota")
	}
	var cond *corev1.PodCondition
	for i := range newPod.Status.Conditions {
		if string(newPod.Status.Conditions[i].Type) == names.QueuedCondition {
			cond = &newPod.Status.Conditions[i]
		}
	}
	if cond == nil || cond.Reason != "Quota" || !strings.Contains(cond.Message, "position 1 of 1 in team vision") ||
		!strings.Contains(cond.Message, "quota 4 GPUs, 4 in use") {
		t.Errorf("new's Queued condition = %+v, want position and the quota numbers", cond)
	}
	ps, teams := c.Positions()
	if len(ps) != 1 || ps[0].Pod != "ml/new" || len(teams) != 1 || teams[0].Queued != 1 || teams[0].GPUs != 1 {
		t.Errorf("Positions() = %+v, %+v; want ml/new queued and vision's admitted use", ps, teams)
	}
}

func TestPassGangWholeAndNarrowed(t *testing.T) {
	member := func(name string) *corev1.Pod {
		p := gpuPod(name, 2, time.Hour, true)
		p.Labels = map[string]string{names.GangLabel: "train"}
		p.Annotations = map[string]string{names.GangSizeAnnotation: "3"}
		return p
	}
	r := &fakeRoom{free: 8}
	c, client := start(t, nil, r, member("m0"), member("m1"))
	c.Pass(t.Context())
	if len(r.held) != 0 {
		t.Fatalf("an incomplete gang (2 of 3) got room: %v", r.held)
	}
	if _, err := client.CoreV1().Pods("ml").Create(t.Context(), member("m2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(c.o.Pods.GetStore().List()) == 3 })
	c.Pass(t.Context())
	if diff := cmp.Diff([]string{"m0", "m1", "m2"}, r.held); diff != "" {
		t.Fatalf("gang held (-want +got):\n%s", diff)
	}
	for _, n := range []string{"m0", "m1", "m2"} {
		p := get(t, client, n)
		if podreq.Queued(p, names) || p.Spec.NodeSelector[names.Domain+"/leaf"] != "leaf-a" {
			t.Errorf("%s: gates %v, nodeSelector %v; want ungated and narrowed to leaf-a", n, p.Spec.SchedulingGates, p.Spec.NodeSelector)
		}
	}
}

// A gang cut short (one member admitted, its others gated) is completed
// without asking quota again, but only up to its size: a gated pod its
// owner adds under the admitted gang's name is not admitted with it (that
// would run it past quota); it waits as a gang of its own.
func TestPassCompletesGangOnlyToItsSize(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 2}}}
	member := func(name string, gated bool) *corev1.Pod {
		p := gpuPod(name, 1, time.Hour, gated)
		p.Labels = map[string]string{names.GangLabel: "train"}
		p.Annotations = map[string]string{names.GangSizeAnnotation: "2"}
		if !gated {
			p.Annotations[names.AdmissionAnnotation] = `{"version":"v1","admittedAt":"2026-12-01T08:00:00Z","team":"vision"}`
		}
		return p
	}
	extra := member("m2", true)
	extra.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute)) // made after m1
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, member("m0", false), member("m1", true), extra)
	c.Pass(t.Context())
	if p := get(t, client, "m1"); podreq.Queued(p, names) {
		t.Fatalf("m1, the gang's second member, was not completed: %v", r.held)
	}
	if !podreq.Queued(get(t, client, "m2"), names) {
		t.Fatal("m2, a third pod under a gang of 2, was admitted with it past team vision's quota of 2")
	}
	c.Pass(t.Context())
	if !podreq.Queued(get(t, client, "m2"), names) {
		t.Fatal("m2 was admitted by a later pass")
	}
}

func TestPassInvalidQuotaAdmitsNothing(t *testing.T) {
	r := &fakeRoom{free: 8}
	c, client := start(t, nil, r, gpuPod("p", 1, time.Hour, true))
	c.o.Quota = func() (*quota.Config, bool) { return nil, false }
	c.Pass(t.Context())
	if len(r.held) != 0 || !podreq.Queued(get(t, client, "p"), names) {
		t.Errorf("admitted with an unparsable quota configuration: held %v", r.held)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatal(err)
	}
}

// TestRunDrainsABacklogWithoutWaiting: a pass that admits as many as
// MaxAdmissionsPerPass is followed at once by the next, so a backlog is not
// paced by the interval; and a pass that runs before the informer heard of
// the last one's updates counts those pods as admitted (each is held once).
func TestRunDrainsABacklogWithoutWaiting(t *testing.T) {
	r := &fakeRoom{free: 8}
	c, client := start(t, nil, r, gpuPod("a", 1, 3*time.Hour, true), gpuPod("b", 1, 2*time.Hour, true), gpuPod("c", 1, time.Hour, true))
	c.o.MaxAdmissionsPerPass, c.o.Interval = 1, time.Hour
	go c.Run(t.Context())
	waitFor(t, func() bool {
		for _, n := range []string{"a", "b", "c"} {
			if podreq.Queued(get(t, client, n), names) {
				return false
			}
		}
		return true
	})
	if diff := cmp.Diff([]string{"a", "b", "c"}, r.held); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
}

// Pods Kueue admitted in a namespace Kueue queues are charged to no account
// of Rota's, even when the namespace carries a team label: there Kueue's
// ClusterQueue is the quota. A pod Rota admitted before the namespace was
// handed to Kueue (it carries Rota's admission record) still counts.
func TestPassKueueNamespaceNotCharged(t *testing.T) {
	cfg := &quota.Config{Teams: map[string]quota.Team{"vision": {GPUs: 4}}}
	kq := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kq",
		Labels: map[string]string{names.TeamLabel: "vision", names.QueueingLabel: contract.QueueingKueue}}}
	byKueue := gpuPod("by-kueue", 3, time.Hour, false)
	byKueue.Namespace, byKueue.Spec.NodeName = "kq", "n1"
	r := &fakeRoom{free: 8}
	c, client := start(t, cfg, r, kq, byKueue, gpuPod("queued", 2, time.Hour, true))
	c.Pass(t.Context())
	if podreq.Queued(get(t, client, "queued"), names) {
		t.Fatalf("queued stayed gated: the pod Kueue admitted in namespace kq was charged to team vision")
	}
}
