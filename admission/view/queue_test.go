package view

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	at "github.com/rota-sched/rota/admission/admissiontest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/topology"
)

const (
	h100 = "NVIDIA H100 80GB HBM3"
	a100 = "NVIDIA A100-SXM4-80GB"
)

// queueView is a view with team vision (64 GPUs + 16 borrow, pool 32, 512
// GiB + 128 borrow, maxQueuedPods 20) on namespace "vision", team models
// (per-model quota: 8 H100 + 8 borrow from the H100 pool of 4, 4 A100 and
// no borrowing) on "models", an unlabelled namespace "plain", and nodes of
// 20 x 8 H100 and one of 4 A100.
func queueView(t *testing.T) (*View, *clock) {
	t.Helper()
	c := &clock{now: time.Unix(1000, 0)}
	v := New(Options{Names: contract.Default, InFlightTTL: 30 * time.Second, Now: c.Now, ConfigSource: "test"})
	maxPrio := int32(100)
	v.SetConfig(quota.Config{
		Teams: map[string]quota.Team{
			"vision": {GPUs: 64, GPUMemoryGiB: 512, Borrow: quota.Limits{GPUs: 16, GPUMemoryGiB: 128}, MaxQueuedPods: 20, MaxPriority: &maxPrio},
			"models": {Models: map[string]quota.ModelQuota{
				h100: {GPUs: 8, Borrow: quota.Limits{GPUs: 8}},
				a100: {GPUs: 4},
			}},
		},
		SharedPool: quota.Limits{GPUs: 32, GPUMemoryGiB: 256},
		ModelPools: map[string]quota.Limits{h100: {GPUs: 4}},
	})
	v.UpsertNamespace(at.Namespace("vision", "vision"))
	v.UpsertNamespace(at.Namespace("models", "models"))
	v.UpsertNamespace(at.Namespace("plain", ""))
	for i := range 20 {
		_ = v.UpsertNode(at.ModelNode(fmt.Sprintf("h-%d", i), h100, 8, 81920))
	}
	_ = v.UpsertNode(at.ModelNode("a-0", a100, 4, 81920))
	return v, c
}

func queueReq(ns, name string, gpus int64, models ...string) Request {
	r := gpuReq(ns, name, gpus)
	r.Models = models
	return r
}

func queueGang(ns, name, gang string, size int, gpus int64) Request {
	r := gpuReq(ns, name, gpus)
	r.Gang = &podreq.GangRef{Key: ns + "/" + gang, Name: gang, Size: size}
	return r
}

func TestQueueRefusesOnlyWhatCanNeverRun(t *testing.T) {
	prio := int32(500)
	withPrio := queueReq("vision", "p", 1)
	withPrio.Priority = &prio
	mem := queueReq("vision", "m", 0)
	mem.Amount = quota.Amount{MemoryMiB: 700 * 1024}
	tests := []struct {
		name       string
		give       Request
		wantReason Reason
		wantMsg    string
	}{
		// Queued whatever the current use: the controller admits later.
		{name: "a pod within the team's reach", give: queueReq("vision", "p", 8), wantReason: Queued},
		{name: "a gang at the team's reach", give: queueGang("vision", "g-0", "g", 10, 8), wantReason: Queued},
		{name: "per-model team, one accepted model", give: queueReq("models", "p", 8, a100, h100), wantReason: Queued},
		{name: "per-model team, any model", give: queueReq("models", "p", 12), wantReason: Queued},

		{name: "a gang beyond quota + borrow", give: queueGang("vision", "g-0", "train", 16, 8), wantReason: GangNeverFits,
			wantMsg: "team vision may hold at most 80 GPUs (64 quota + 16 borrow); this gang needs 128 GPUs (gang train: 16 pods x 8 GPUs), so it can never run"},
		{name: "memory beyond quota + borrow", give: mem, wantReason: NeverFits,
			wantMsg: "team vision may hold at most 640 GiB of GPU memory (512 GiB quota + 128 GiB borrow); this pod needs 700 GiB of GPU memory"},
		{name: "per-model reach, borrowing limited by the model's pool", give: queueReq("models", "p", 13, h100), wantReason: NeverFits,
			wantMsg: `team models may hold at most 12 GPUs (8 quota + 4 borrow: borrow limit 8, model pool "NVIDIA H100 80GB HBM3" 4) of GPU model "NVIDIA H100 80GB HBM3"; this pod needs 13 GPUs`},
		{name: "per-model reach, every model listed", give: queueReq("models", "p", 13), wantReason: NeverFits,
			wantMsg: `at most 4 GPUs (4 quota + 0 borrow) of GPU model "NVIDIA A100-SXM4-80GB", at most 12 GPUs`},
		{name: "per-model team, none of its models", give: queueReq("models", "p", 1, "Tesla T4"), wantReason: NoAcceptedModel,
			wantMsg: `team models has GPU quota only for GPU models "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"; this pod accepts only "Tesla T4"`},
		{name: "gang larger than the cluster's GPUs of its model", give: func() Request {
			r := queueGang("vision", "g-0", "big", 3, 2)
			r.Models = []string{a100}
			return r
		}(), wantReason: GangTooLarge,
			wantMsg: `gang big needs 6 GPUs in total (3 pods x 2 GPUs) but the cluster's nodes with the GPU models it accepts ("NVIDIA A100-SXM4-80GB") have 4`},
		{name: "gang larger than the whole cluster", give: queueGang("vision", "g-0", "huge", 50, 4), wantReason: GangTooLarge,
			wantMsg: "gang huge needs 200 GPUs in total (50 pods x 4 GPUs) but the whole cluster has 164; it can never run"},
		{name: "gang larger than the queued-pod cap", give: queueGang("vision", "g-0", "wide", 21, 1), wantReason: QueueFull,
			wantMsg: "gang wide has 21 members but team vision may have at most 20 pods queued (maxQueuedPods 20), so it can never be queued whole: make the gang smaller or ask a cluster admin to raise maxQueuedPods"},
		{name: "no team", give: queueReq("plain", "p", 1), wantReason: NoTeam, wantMsg: "namespace plain has no example.com/team label"},
		{name: "priority ceiling", give: withPrio, wantReason: PriorityCeiling, wantMsg: "may use pod priority up to 100"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, _ := queueView(t)
			// Use far beyond quota does not matter to a queued pod.
			v.UpsertPod(at.Pod("vision", "big-running").GPUs(8).Node("h-0").Obj())
			for i := range 20 {
				v.UpsertPod(at.Pod("vision", fmt.Sprintf("pend-%d", i)).GPUs(8).Obj())
			}
			out := v.Queue(tc.give)
			if out.Reason != tc.wantReason || out.Allowed != (tc.wantReason == Queued) {
				t.Fatalf("Queue = %+v, want reason %s", out, tc.wantReason)
			}
			if !strings.Contains(out.Message, tc.wantMsg) {
				t.Errorf("message %q\nwant it to contain %q", out.Message, tc.wantMsg)
			}
		})
	}
}

func TestQueuedPodsHoldNoQuota(t *testing.T) {
	v, _ := queueView(t)
	v.UpsertPod(at.Pod("vision", "q").GPUs(8).Gated().Obj())
	v.UpsertPod(at.Pod("vision", "r").GPUs(2).Node("h-0").Obj())
	v.UpsertPod(at.Pod("vision", "p").GPUs(1).Obj())
	u, _, _ := v.Usage()
	if got := u["vision"]; got.Running.GPUs != 2 || got.Pending.GPUs != 1 {
		t.Fatalf("usage = %+v, want 2 running and 1 pending; the queued pod holds nothing", got)
	}
	if q := v.Queued()["vision"]; q.Pods != 1 || q.Amount.GPUs != 8 {
		t.Fatalf("queued = %+v, want 1 pod of 8 GPUs", q)
	}
	// The queue controller removes the gate: the pod is admitted use now.
	v.UpsertPod(at.Pod("vision", "q").GPUs(8).Obj())
	u, _, _ = v.Usage()
	if got := u["vision"]; got.Pending.GPUs != 9 {
		t.Fatalf("pending after the gate is removed = %d, want 9", got.Pending.GPUs)
	}
	if q := v.Queued()["vision"]; q.Pods != 0 {
		t.Fatalf("queued after the gate is removed = %+v", q)
	}
	v.DeletePod("vision", "q")
	if u, _, _ = v.Usage(); u["vision"].Pending.GPUs != 1 {
		t.Fatalf("pending after deleting = %+v", u["vision"])
	}
}

// setCap sets team vision's maxQueuedPods.
func setCap(v *View, n int) {
	cfg, _ := v.Config()
	vision := cfg.Teams["vision"]
	vision.MaxQueuedPods = n
	cfg.Teams["vision"] = vision
	v.SetConfig(cfg)
}

func TestQueueCap(t *testing.T) {
	v, c := queueView(t)
	setCap(v, 5)
	for i := range 3 {
		v.UpsertPod(at.Pod("vision", fmt.Sprintf("q-%d", i)).GPUs(1).Gated().Obj())
	}
	// Admitted pods are not queued: they do not count.
	v.UpsertPod(at.Pod("vision", "admitted").GPUs(1).Obj())
	for _, name := range []string{"n-0", "n-1"} {
		if out := v.Queue(queueReq("vision", name, 1)); !out.Allowed {
			t.Fatalf("Queue(%s) with %d queued = %+v", name, len(v.Queued()), out)
		}
	}
	// Two just accepted (not yet shown) hold their places: the sixth is refused.
	out := v.Queue(queueReq("vision", "n-2", 1))
	if out.Allowed || out.Reason != QueueFull ||
		!strings.Contains(out.Message, "team vision has 5 pods queued (maxQueuedPods 5); this pod would be one more") {
		t.Fatalf("Queue beyond the cap = %+v", out)
	}
	// A retried create of an accepted name replaces its own place.
	if out := v.Queue(queueReq("vision", "n-1", 1)); !out.Allowed {
		t.Fatalf("retried create of n-1 = %+v", out)
	}
	// A dry run reserves nothing; a gang needs room for all its members.
	v.DeletePod("vision", "q-0")
	v.DeletePod("vision", "q-1")
	dry := queueReq("vision", "d", 1)
	dry.DryRun = true
	for range 3 {
		if out := v.Queue(dry); !out.Allowed {
			t.Fatalf("dry run = %+v", out)
		}
	}
	if out := v.Queue(queueGang("vision", "g-0", "g", 4, 1)); out.Allowed || out.Reason != QueueFull ||
		!strings.Contains(out.Message, "team vision has 3 pods queued (maxQueuedPods 5); gang g needs room for 4 more members") {
		t.Fatalf("a gang of 4 with room for 2 = %+v", out)
	}
	if out := v.Queue(queueGang("vision", "g-0", "g", 2, 1)); !out.Allowed {
		t.Fatalf("a gang of 2 with room for 2 = %+v", out)
	}
	if out := v.Queue(queueGang("vision", "g-1", "g", 2, 1)); !out.Allowed {
		t.Fatalf("the gang's second member = %+v", out)
	}
	// Accepted pods that never appear give their places back after the TTL.
	c.Step(31 * time.Second)
	if q := v.Queued()["vision"]; q.Pods != 1 {
		t.Fatalf("queued after the TTL = %+v, want only q-2", q)
	}
	// Other teams have their own cap (the default for unknown ones).
	v.UpsertNamespace(at.Namespace("other", "ghost"))
	cfg, _ := v.Config()
	cfg.UnknownTeams = quota.UnlimitedUnknown
	v.SetConfig(cfg)
	if out := v.Queue(queueReq("other", "p", 1)); !out.Allowed {
		t.Fatalf("unknown team under unlimited = %+v", out)
	}
}

// TestQueueCapConcurrent: 40 pods queued at once under a cap of 5 — exactly 5 accepted.
func TestQueueCapConcurrent(t *testing.T) {
	v, _ := queueView(t)
	setCap(v, 5)
	var mu sync.Mutex
	accepted := 0
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if out := v.Queue(queueReq("vision", fmt.Sprintf("p-%d", i), 1)); out.Allowed {
				mu.Lock()
				accepted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if accepted != 5 {
		t.Fatalf("%d of 40 concurrent pods accepted under maxQueuedPods 5", accepted)
	}
}

func TestQueueingOff(t *testing.T) {
	v, _ := queueView(t)
	if off, _ := v.QueueingOff("vision"); off {
		t.Fatal("queueing is off by default")
	}
	v.UpsertNamespace(at.QueueingOff(at.Namespace("vision", "vision")))
	off, why := v.QueueingOff("vision")
	if !off || why != "namespace vision is labelled example.com/queueing=off" {
		t.Fatalf("QueueingOff after labelling = %v %q", off, why)
	}
	// A pod that brings the gate itself where queueing is off would wait forever.
	if out := v.Queue(queueReq("vision", "p", 1)); out.Allowed || out.Reason != QueueingIsOff ||
		!strings.Contains(out.Message, "remove the gate") {
		t.Fatalf("gated pod in a queueing-off namespace = %+v", out)
	}
	v.UpsertNamespace(at.Namespace("vision", "vision"))
	if off, _ := v.QueueingOff("vision"); off {
		t.Fatal("queueing still off after the label is removed")
	}
	cfg, _ := v.Config()
	cfg.Queueing = quota.QueueingOff
	v.SetConfig(cfg)
	if off, why := v.QueueingOff("models"); !off || !strings.Contains(why, "queueing: off") {
		t.Fatalf("QueueingOff with queueing: off = %v %q", off, why)
	}
}

func TestAdmitPerModelTeamNeedsQueue(t *testing.T) {
	v, _ := queueView(t)
	v.UpsertNamespace(at.QueueingOff(at.Namespace("models", "models")))
	out := v.Admit(gpuReq("models", "p", 1))
	if out.Allowed || out.Reason != PerModelNeedsQueue || !strings.Contains(out.Message, "namespace models is labelled example.com/queueing=off") {
		t.Fatalf("Admit of a per-model team's pod without the queue = %+v", out)
	}
}

func TestAdmitSaysWhatIsQueued(t *testing.T) {
	v, _ := newView(t, 2)
	v.UpsertPod(at.Pod("ns", "q").GPUs(4).Gated().Obj())
	v.UpsertPod(at.Pod("ns", "run").GPUs(2).Node("n").Obj())
	out := v.Admit(gpuReq("ns", "p", 1))
	if out.Allowed || !strings.Contains(out.Message, "2 in use or queued (2 running, 0 pending)") ||
		!strings.Contains(out.Message, "team a also has 1 pods in Rota's queue, not counted here") {
		t.Fatalf("Admit over quota with a queued pod = %+v", out)
	}
}

func TestCapsFor(t *testing.T) {
	v, _ := queueView(t)
	_ = v.UpsertNode(at.ModelNode("t-0", "Tesla T4", 2, 15360))
	tests := []struct {
		models       []string
		wantPerModel bool
		want         Caps
	}{
		{nil, false, Caps{Nodes: 22, MaxGPUs: 8, MaxGPUMemoryMiB: 81920, TotalGPUs: 166, TotalMemoryMiB: 164*81920 + 2*15360}},
		{[]string{"Tesla T4"}, true, Caps{Nodes: 1, MaxGPUs: 2, MaxGPUMemoryMiB: 15360, TotalGPUs: 2, TotalMemoryMiB: 2 * 15360}},
		{[]string{"Tesla T4", a100, "unknown"}, true, Caps{Nodes: 2, MaxGPUs: 4, MaxGPUMemoryMiB: 81920, TotalGPUs: 6, TotalMemoryMiB: 4*81920 + 2*15360}},
		{[]string{"unknown"}, false, Caps{Nodes: 22, MaxGPUs: 8, MaxGPUMemoryMiB: 81920, TotalGPUs: 166, TotalMemoryMiB: 164*81920 + 2*15360}},
	}
	for _, tc := range tests {
		got, perModel := v.CapsFor(tc.models)
		if got != tc.want || perModel != tc.wantPerModel {
			t.Errorf("CapsFor(%q) = %+v, %v; want %+v, %v", tc.models, got, perModel, tc.want, tc.wantPerModel)
		}
	}
	v.DeleteNode("t-0")
	if _, perModel := v.CapsFor([]string{"Tesla T4"}); perModel {
		t.Error("CapsFor still finds the deleted node's model")
	}
}

func TestGated(t *testing.T) {
	names := contract.Default
	for _, tc := range []struct {
		give *corev1.Pod
		want bool
	}{
		{at.Pod("ns", "p").GPUs(1).Obj(), false},
		{at.Pod("ns", "p").GPUs(1).Gated().Obj(), true},
		{at.Pod("ns", "p").GPUs(1).SchedulingGate("other.io/wait").Obj(), false},
		{at.Pod("ns", "p").GPUs(1).SchedulingGate("other.io/wait").Gated().Obj(), true},
	} {
		if got := Gated(tc.give, names); got != tc.want {
			t.Errorf("Gated(%v) = %v, want %v", tc.give.Spec.SchedulingGates, got, tc.want)
		}
	}
}

// In a nested configuration a gang beyond what its team can reach through
// the tree is refused with the groups on the way; within it, it queues.
func TestQueueNeverFitsInATree(t *testing.T) {
	v, _ := queueView(t)
	borrow := quota.Limits{GPUs: 8}
	v.SetConfig(quota.Config{
		Groups: map[string]quota.Group{"org": {GPUs: 16, Borrow: &borrow}, "lab": {Parent: "org", GPUs: 4}},
		Teams: map[string]quota.Team{"vision": {GPUs: 8, Borrow: quota.Limits{GPUs: 64}, Group: "lab"},
			"models": {GPUs: 4, Borrow: quota.Limits{GPUs: 2}}},
		SharedPool: quota.Limits{GPUs: 32},
	})
	// 8 + lab's 4 + org's 16 + 8 from the shared pool = 36.
	if out := v.Queue(queueGang("vision", "g-0", "fits", 9, 4)); out.Reason != Queued {
		t.Errorf("a 36-GPU gang: %+v, want queued", out)
	}
	out := v.Queue(queueGang("vision", "g-0", "train", 37, 1))
	want := `team vision may hold at most 36 GPUs (8 quota + 28 borrowed from the pools of groups "lab", "org" and the shared pool, within their borrow limits); this gang needs 37 GPUs`
	if out.Reason != GangNeverFits || !strings.Contains(out.Message, want) {
		t.Errorf("a 37-GPU gang: %+v\nwant %q", out, want)
	}
	// A team under the shared pool beside the tree is told as in a flat
	// configuration.
	out = v.Queue(queueReq("models", "p", 7))
	if want := "team models may hold at most 6 GPUs (4 quota + 2 borrow); this pod needs 7 GPUs"; out.Reason != NeverFits || !strings.Contains(out.Message, want) {
		t.Errorf("a 7-GPU pod of a team under the shared pool: %+v\nwant %q", out, want)
	}
}

// With node pools, a queued pod or gang larger than its team's pool (or,
// for a team without one, than the nodes without a pool) can never run and
// is refused; a pool without nodes yet refuses nothing, and a relabelled
// node moves its GPUs to its new pool.
func TestQueueRefusesWhatItsNodePoolCannotHold(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	v := New(Options{Names: contract.Default, InFlightTTL: 30 * time.Second, Now: c.Now, ConfigSource: "test"})
	v.SetConfig(quota.Config{
		Teams:     map[string]quota.Team{"vision": {GPUs: 64}, "speech": {GPUs: 64}, "nlp": {GPUs: 64}},
		NodePools: map[string]quota.NodePool{"cv": {Owner: "vision"}, "empty": {Owner: "nlp"}},
	})
	for _, ns := range []string{"vision", "speech", "nlp"} {
		v.UpsertNamespace(at.Namespace(ns, ns))
	}
	label := topology.PoolLabel(contract.Default)
	pooled := func(name string, gpus int, pool string) *corev1.Node {
		n := at.ModelNode(name, h100, gpus, 81920)
		if pool != "" {
			if n.Labels == nil {
				n.Labels = map[string]string{}
			}
			n.Labels[label] = pool
		}
		return n
	}
	_ = v.UpsertNode(pooled("cv-0", 4, "cv"))
	_ = v.UpsertNode(pooled("cv-1", 4, "cv"))
	_ = v.UpsertNode(pooled("big-0", 8, ""))
	for _, tc := range []struct {
		name       string
		give       Request
		wantReason Reason
		wantMsg    string
	}{
		{"a pod its pool's nodes hold", queueReq("vision", "p", 4), Queued, ""},
		{"a pod larger than its pool's largest node", queueReq("vision", "p", 8), NeverFits,
			"the pod asks for 8 GPUs but the largest node of node pool cv (where team vision's GPU pods go) has 4, so it can never run"},
		{"a gang larger than its pool", queueGang("vision", "g-0", "g", 3, 4), GangTooLarge,
			"gang g needs 12 GPUs in total (3 pods x 4 GPUs) but node pool cv (where team vision's GPU pods go) has 8"},
		{"a team without a pool, on the nodes of none", queueReq("speech", "p", 8), Queued, ""},
		{"a team without a pool, larger than the nodes of none", queueGang("speech", "g-0", "g", 2, 8), GangTooLarge,
			"but the nodes without a node pool (where team speech's GPU pods go) have 8"},
		{"a pool without nodes yet", queueReq("nlp", "p", 64), Queued, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := v.Queue(tc.give)
			if out.Reason != tc.wantReason || !strings.Contains(out.Message, tc.wantMsg) {
				t.Fatalf("Queue = %s %q, want %s %q", out.Reason, out.Message, tc.wantReason, tc.wantMsg)
			}
			v.DeletePod(tc.give.Namespace, tc.give.Name)
		})
	}
	// big-0 joins pool cv: vision's 8-GPU pod now fits a node of its pool.
	_ = v.UpsertNode(pooled("big-0", 8, "cv"))
	if out := v.Queue(queueReq("vision", "p8", 8)); out.Reason != Queued {
		t.Errorf("after relabelling big-0 into cv: %s %q", out.Reason, out.Message)
	}
}

// SuspendsJobs: by default only namespaces labelled queueing=suspend queue
// Jobs suspended; with SuspendJobsEverywhere every namespace does but
// those labelled gate, off or kueue. Queueing off in the configuration
// turns it off everywhere.
func TestSuspendsJobs(t *testing.T) {
	labels := []string{"", contract.QueueingSuspend, contract.QueueingGate, contract.QueueingOff, contract.QueueingKueue, "other"}
	for _, tc := range []struct {
		everywhere bool
		off        bool
		want       map[string]bool // by label; the rest false
	}{
		{false, false, map[string]bool{contract.QueueingSuspend: true}},
		{true, false, map[string]bool{"": true, contract.QueueingSuspend: true, "other": true}},
		{true, true, nil},
	} {
		v := New(Options{Names: contract.Default, InFlightTTL: 30 * time.Second, ConfigSource: "test", SuspendJobsEverywhere: tc.everywhere})
		cfg := quota.Config{}
		if tc.off {
			cfg.Queueing = quota.QueueingOff
		}
		v.SetConfig(cfg)
		for i, l := range labels {
			ns := at.Namespace(fmt.Sprintf("ns%d", i), "t")
			if l != "" {
				ns.Labels[contract.Default.QueueingLabel] = l
			}
			v.UpsertNamespace(ns)
			if got := v.SuspendsJobs(ns.Name); got != tc.want[l] {
				t.Errorf("everywhere %v, queueing off %v, label %q: SuspendsJobs = %v, want %v", tc.everywhere, tc.off, l, got, tc.want[l])
			}
		}
	}
}
