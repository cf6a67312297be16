package report

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"

	"github.com/rota-sched/rota/kubectl/clustertest"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

// fixture reads clustertest's objects into an Input.
func fixture(t *testing.T) Input {
	t.Helper()
	in := Input{Now: clustertest.Now}
	for _, o := range clustertest.Objects() {
		switch x := o.(type) {
		case *corev1.Node:
			in.Nodes = append(in.Nodes, *x)
		case *corev1.Pod:
			in.Pods = append(in.Pods, *x)
		case *corev1.Namespace:
			in.Namespaces = append(in.Namespaces, *x)
		case *corev1.Event:
			in.Events = append(in.Events, *x)
		case *schedulingv1.PriorityClass:
		case *corev1.ConfigMap:
			in.Quota = x
		default:
			t.Fatalf("fixture object %T not handled", o)
		}
	}
	return in
}

func TestParseNodeReasons(t *testing.T) {
	tests := []struct {
		name        string
		giveMsg     string
		wantTotal   int
		wantR       []NodeReason
		wantPreempt string
	}{
		{
			name:      "kube-scheduler with commas inside reasons",
			giveMsg:   "0/20 nodes are available: 12 GPU 3 has 18 GiB free, pod needs 40 GiB, 3 node(s) had untolerated taint {gpu: broken}, 5 1 free GPU, pod needs 4. preemption: 0/20 nodes are available: 20 Preemption is not helpful for scheduling.",
			wantTotal: 20,
			wantR: []NodeReason{{Nodes: 12, Reason: "GPU 3 has 18 GiB free, pod needs 40 GiB"}, {Nodes: 5, Reason: "1 free GPU, pod needs 4"},
				{Nodes: 3, Reason: "node(s) had untolerated taint {gpu: broken}"}},
			wantPreempt: "0/20 nodes are available: 20 Preemption is not helpful for scheduling",
		},
		{
			name:      "rota-extender summary",
			giveMsg:   "0/5000 nodes fit the GPU request: 4000 like node-12: GPU 3 has 18 GiB free, pod needs 40 GiB; 1000 like node-7: GPU 5 unhealthy: XID 79; and more",
			wantTotal: 5000,
			wantR: []NodeReason{{Nodes: 4000, Reason: "GPU 3 has 18 GiB free, pod needs 40 GiB", Example: "node-12"},
				{Nodes: 1000, Reason: "GPU 5 unhealthy: XID 79", Example: "node-7"}},
		},
		{name: "other message", giveMsg: "pod has unbound immediate PersistentVolumeClaims"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			total, rs, pre := ParseNodeReasons(tc.giveMsg)
			if total != tc.wantTotal || !reflect.DeepEqual(rs, tc.wantR) || pre != tc.wantPreempt {
				t.Errorf("ParseNodeReasons() = %d, %+v, %q; want %d, %+v, %q", total, rs, pre, tc.wantTotal, tc.wantR, tc.wantPreempt)
			}
		})
	}
}

// TestHeadroomMatchesCheck: the room a report shows is exactly what the
// webhook's quota.Config.Check admits: headroom fits, one more does not.
func TestHeadroomMatchesCheck(t *testing.T) {
	c := Build(fixture(t), DefaultOptions())
	for _, team := range []string{"llm", "vision", "research", "speech"} {
		h := c.headroom(team)
		for _, need := range []quota.Amount{{GPUs: h.GPUs}, {MemoryMiB: h.MemoryMiB}} {
			if need.IsZero() {
				continue
			}
			if d := c.quota.Check(team, c.usage, need); !d.Allowed {
				t.Errorf("team %s: headroom %v is refused by Check: %+v", team, need, d.Shortfalls)
			}
		}
		for _, more := range []quota.Amount{{GPUs: h.GPUs + 1}, {MemoryMiB: h.MemoryMiB + 1}} {
			if d := c.quota.Check(team, c.usage, more); d.Allowed {
				t.Errorf("team %s: Check admits %v, more than the headroom %v", team, more, h)
			}
		}
	}
}

// TestUsageLikeAdmission: pods are charged as the webhook charges them.
func TestUsageLikeAdmission(t *testing.T) {
	c := Build(fixture(t), DefaultOptions())
	gib := contract.MiB(1024)
	want := map[string]quota.Usage{
		"llm":    {Running: quota.Amount{GPUs: 24}, Pending: quota.Amount{GPUs: 8}},
		"vision": {Running: quota.Amount{GPUs: 2, MemoryMiB: 100 * gib}, Pending: quota.Amount{MemoryMiB: 60 * gib}},
		// default/jupyter carries a research team label; overrides are allowed.
		"research": {Running: quota.Amount{GPUs: 4, MemoryMiB: 44 * gib}, Pending: quota.Amount{GPUs: 8}},
		"speech":   {Running: quota.Amount{GPUs: 2}},
	}
	if !reflect.DeepEqual(c.usage, want) {
		t.Errorf("usage = %+v\nwant %+v", c.usage, want)
	}
	// Without overrides, jupyter is charged to its namespace's (absent) team.
	in := fixture(t)
	in.Quota.Data["quota.yaml"] = strings.Replace(clustertest.QuotaYAML, "allowPodTeamOverride: true", "allowPodTeamOverride: false", 1)
	c = Build(in, DefaultOptions())
	if got := c.usage[""].Running.MemoryMiB; got != 4*gib {
		t.Errorf("unlabelled namespace use = %s, want 4 GiB", got)
	}
}

func TestQuotaErrors(t *testing.T) {
	tests := []struct {
		name      string
		give      func(in *Input)
		wantState string
		wantNote  string
	}{
		{"missing", func(in *Input) { in.Quota = nil }, StateNoConfig, "not found"},
		{"bad yaml", func(in *Input) { in.Quota.Data["quota.yaml"] = "teams: [" }, StateNoConfig, "not valid YAML"},
		{"unknown field", func(in *Input) { in.Quota.Data["quota.yaml"] = "teams: {}\npools: {}" }, StateNoConfig, "unknown field"},
		{"no key", func(in *Input) { in.Quota.Data = nil }, StateNoConfig, `no key "quota.yaml"`},
		{"forbidden", func(in *Input) { in.QuotaError = "cannot read: forbidden" }, StateNoConfig, "forbidden"},
		{"team without entry", func(in *Input) {
			in.Quota.Data["quota.yaml"] = "teams: {vision: {gpus: 1}}\n"
		}, StateNoQuota, "no entry"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t)
			tc.give(&in)
			tq := Build(in, DefaultOptions()).teamQuota("llm")
			if tq.State != tc.wantState || !strings.Contains(tq.Note, tc.wantNote) {
				t.Errorf("teamQuota(llm) = %q, %q; want %q containing %q", tq.State, tq.Note, tc.wantState, tc.wantNote)
			}
		})
	}
}

// TestLedgerMatchesExtenderRules: only bound, non-terminal pods with an
// assignment for their node are accounted; the rest are problems.
func TestLedgerMatchesExtenderRules(t *testing.T) {
	in := fixture(t)
	for i := range in.Pods {
		p := &in.Pods[i]
		switch p.Namespace + "/" + p.Name {
		case "vision/resnet-ddp-0":
			p.Status.Phase = corev1.PodSucceeded // finished: frees GPUs 0,1 of h100-b1
		case "research/notebook-kim":
			p.Spec.NodeName = "h100-b1" // assignment says h100-b2
		case "vision/notebook-ana":
			p.Annotations[contract.Default.AssignmentAnnotation] = `{"version":"v9"}`
		}
	}
	c := Build(in, DefaultOptions())
	l, err := c.Ledger("h100-b1")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 0 {
		t.Errorf("h100-b1 entries = %+v, want none", l.Entries)
	}
	if all := strings.Join(l.Violations, "\n"); len(l.Violations) != 2 ||
		!strings.Contains(all, "pod research/notebook-kim: "+podreq.KindWrongNode.Message()+" (assigned node h100-b2, bound to h100-b1)") ||
		!strings.Contains(all, "pod vision/notebook-ana: "+podreq.KindInvalid.Message()) {
		t.Errorf("h100-b1 violations = %q, want a misdirected and an invalid assignment", l.Violations)
	}
}

func TestWhyGangFitsOnceRoomIsFreed(t *testing.T) {
	in := fixture(t)
	// research/sweep-0 finishes: h100-b2 frees 4 GPUs, room for 2 more members.
	for i := range in.Pods {
		if in.Pods[i].Name == "sweep-0" {
			in.Pods[i].Status.Phase = corev1.PodSucceeded
		}
	}
	w, err := Build(in, DefaultOptions()).WhyGang("llm", "train-7")
	if err != nil {
		t.Fatal(err)
	}
	if !w.Fit.FitsNow || !strings.Contains(w.Fit.Where, "4 members in leaf leaf-b: h100-b1, h100-b2") {
		t.Errorf("fit = %+v, want the 4 members to fit in leaf-b", w.Fit)
	}
	if !strings.HasPrefix(w.Summary, "waiting for the scheduler") {
		t.Errorf("summary = %q", w.Summary)
	}
}

func TestNaturalCompare(t *testing.T) {
	got := []string{"w-10", "w-2", "w-1", "v", "w-02x", "w-"}
	slices.SortFunc(got, naturalCompare)
	want := []string{"v", "w-", "w-1", "w-2", "w-02x", "w-10"}
	if !slices.Equal(got, want) {
		t.Errorf("sorted = %q, want %q", got, want)
	}
}

// The analysis considers only the nodes the scheduler could give the pod:
// with the same freed room, members whose nodeSelector names another leaf,
// or whose nodes are cordoned, do not fit.
func TestWhyRespectsNodeSelectorAndCordons(t *testing.T) {
	in := fixture(t)
	for i := range in.Pods {
		p := &in.Pods[i]
		switch {
		case p.Name == "sweep-0":
			p.Status.Phase = corev1.PodSucceeded
		case p.Namespace == "llm" && strings.HasPrefix(p.Name, "train-7"):
			p.Spec.NodeSelector = map[string]string{"example.com/leaf": "leaf-a"}
		}
	}
	w, err := Build(in, DefaultOptions()).WhyGang("llm", "train-7")
	if err != nil {
		t.Fatal(err)
	}
	if w.Fit.FitsNow || strings.Contains(w.Fit.Where, "leaf-b") {
		t.Errorf("fit = %+v; members pinned to leaf-a cannot use the room in leaf-b", w.Fit)
	}
	in = fixture(t)
	for i := range in.Pods {
		if in.Pods[i].Name == "sweep-0" {
			in.Pods[i].Status.Phase = corev1.PodSucceeded
		}
	}
	for i := range in.Nodes {
		if strings.HasPrefix(in.Nodes[i].Name, "h100-b") {
			in.Nodes[i].Spec.Unschedulable = true
		}
	}
	if w, err = Build(in, DefaultOptions()).WhyGang("llm", "train-7"); err != nil {
		t.Fatal(err)
	}
	if w.Fit.FitsNow {
		t.Errorf("fit = %+v; the room is on cordoned nodes", w.Fit)
	}
}

// TestTopTeamsTree: with the fixture's teams in quota groups, top teams
// shows each team's group, the tree with what each group's subtree borrows
// and from where, and headroom that CheckAccount agrees with.
func TestTopTeamsTree(t *testing.T) {
	in := fixture(t)
	in.Quota.Data["quota.yaml"] = `groups:
  ml: {gpus: 4, borrow: {gpus: 8, gpuMemoryGiB: 256}}
  cv: {parent: ml, gpus: 2}
teams:
  llm: {gpus: 32, borrow: {gpus: 8}, group: ml}
  vision: {gpus: 4, gpuMemoryGiB: 160, group: cv}
  research: {gpus: 8, gpuMemoryGiB: 32, borrow: {gpus: 8, gpuMemoryGiB: 64}, group: cv}
  speech: {gpus: 2}
sharedPool: {gpus: 16, gpuMemoryGiB: 256}
allowPodTeamOverride: true
unknownTeams: deny
`
	c := Build(in, DefaultOptions())
	r := c.TopTeams()
	if r.QuotaError != "" {
		t.Fatal(r.QuotaError)
	}
	groups := map[string]GroupQuota{}
	var order []string
	for _, g := range r.Groups {
		groups[g.Group] = g
		order = append(order, g.Group)
	}
	if !slices.Equal(order, []string{"ml", "cv"}) || groups["cv"].Depth != 1 || groups["cv"].Parent != "ml" {
		t.Fatalf("groups %+v, want ml then cv under it", r.Groups)
	}
	// research runs 4 GPUs and has 8 pending: 12, 4 past its guarantee of
	// 8; cv's pool lends 2 and ml's pool the other 2. llm uses 32, its
	// guarantee. The shared pool lends nothing to the tree.
	if cv := groups["cv"]; cv.Borrowed.GPUs != 4 || cv.FromPool.GPUs != 2 || cv.Above.GPUs != 2 {
		t.Errorf("cv: %+v, want 4 borrowed, 2 from its pool, 2 from above", cv)
	}
	if ml := groups["ml"]; ml.Borrowed.GPUs != 2 || ml.FromPool.GPUs != 2 || ml.Above.GPUs != 0 || ml.BorrowLimit == nil || ml.BorrowLimit.GPUs != 8 {
		t.Errorf("ml: %+v, want cv's 2 from its own pool", ml)
	}
	usage := c.accountUsage()
	for _, q := range r.Teams {
		if q.Team == "research" && (q.Group != "cv" || !strings.Contains(q.Note, "through group cv")) {
			t.Errorf("research: %+v", q)
		}
		a := quota.Account{Team: q.Team}
		if h := q.Headroom.GPUs; !c.quota.CheckAccount(a, usage, quota.Amount{GPUs: h}).Allowed && h > 0 ||
			c.quota.CheckAccount(a, usage, quota.Amount{GPUs: h + 1}).Allowed {
			t.Errorf("team %s: headroom %d GPUs is not the most CheckAccount allows", q.Team, h)
		}
	}
}

// Node pools show in top nodes (a POOL per node and the pools side by
// side) and top teams (each team's pool), from the node label and the
// quota configuration.
func TestTopNodePools(t *testing.T) {
	in := fixture(t)
	label := contract.Default.Domain + "/node-pool"
	pooled := 0
	for i := range in.Nodes {
		if in.Nodes[i].Name == "h100-a1" || in.Nodes[i].Name == "h100-a2" {
			if in.Nodes[i].Labels == nil {
				in.Nodes[i].Labels = map[string]string{}
			}
			in.Nodes[i].Labels[label] = "llm-pool"
			pooled++
		}
	}
	if pooled != 2 {
		t.Fatalf("fixture: %d nodes labelled, want 2", pooled)
	}
	in.Quota.Data["quota.yaml"] = clustertest.QuotaYAML + "nodePools:\n  llm-pool: {owner: llm, policy: spread}\n"
	c := Build(in, DefaultOptions())
	nodes := c.TopNodes()
	var byPool = map[string]PoolUse{}
	for _, u := range nodes.Pools {
		byPool[u.Pool] = u
	}
	if len(nodes.Pools) != 2 || byPool["llm-pool"].Nodes != 2 || byPool[""].Nodes == 0 {
		t.Fatalf("pools %+v, want llm-pool with 2 nodes and the rest", nodes.Pools)
	}
	for _, n := range nodes.Nodes {
		if want := map[bool]string{true: "llm-pool"}[n.Node == "h100-a1" || n.Node == "h100-a2"]; n.Pool != want {
			t.Errorf("node %s: pool %q, want %q", n.Node, n.Pool, want)
		}
	}
	teams := c.TopTeams()
	for _, q := range teams.Teams {
		if want := map[bool]string{true: "llm-pool"}[q.Team == "llm"]; q.Pool != want {
			t.Errorf("team %s: pool %q, want %q", q.Team, q.Pool, want)
		}
	}
}
