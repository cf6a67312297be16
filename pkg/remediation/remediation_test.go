package remediation

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		give    string
		want    Mode
		wantErr bool
	}{
		{give: "off", want: Off}, {give: "dry-run", want: DryRun}, {give: "on", want: On},
		{give: "", wantErr: true}, {give: "ON", wantErr: true}, {give: "dryrun", wantErr: true},
	} {
		got, err := ParseMode(tc.give)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, error %v", tc.give, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestBucket(t *testing.T) {
	b := NewBucket(6, 3) // one token every 10s, burst 3
	type step struct {
		at   time.Duration
		n    int
		want bool
	}
	for i, s := range []step{
		{0, 1, true}, {0, 2, true}, {0, 1, false}, // burst spent
		{5 * time.Second, 1, false}, {10 * time.Second, 1, true}, {10 * time.Second, 1, false},
		{time.Hour, 4, false}, {time.Hour, 3, true}, // refills only up to the burst
	} {
		if got := b.AllowN(t0.Add(s.at), s.n); got != s.want {
			t.Errorf("step %d: AllowN(+%s, %d) = %v, want %v", i, s.at, s.n, got, s.want)
		}
	}
}

func TestLimiter(t *testing.T) {
	tests := []struct {
		name  string
		calls []struct {
			node string
			n    int
		}
		want []bool
	}{
		{
			name: "per-node bucket stops a flapping node, others go on",
			calls: []struct {
				node string
				n    int
			}{{"a", 2}, {"a", 1}, {"b", 2}, {"c", 1}},
			want: []bool{true, false, true, true},
		},
		{
			name: "cluster bucket caps all nodes together",
			calls: []struct {
				node string
				n    int
			}{{"a", 2}, {"b", 2}, {"c", 2}, {"d", 1}, {"e", 1}},
			want: []bool{true, true, true, false, false},
		},
		{
			name: "a gang larger than the node burst never takes part of it",
			calls: []struct {
				node string
				n    int
			}{{"a", 3}, {"a", 2}},
			want: []bool{false, true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLimiter(6, 6, 2, 2)
			var got []bool
			for _, c := range tc.calls {
				got = append(got, l.AllowN(c.node, t0, c.n))
			}
			if diff := diff(tc.want, got); diff != "" {
				t.Errorf("AllowN mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLimiterForget(t *testing.T) {
	l := NewLimiter(60, 10, 1, 1)
	l.AllowN("a", t0, 1)
	l.Forget(t0)
	if len(l.nodes) != 1 {
		t.Fatalf("Forget dropped a bucket that is not full")
	}
	l.Forget(t0.Add(time.Minute))
	if len(l.nodes) != 0 {
		t.Errorf("Forget kept %d full buckets", len(l.nodes))
	}
}

func TestWindows(t *testing.T) {
	w := NewWindows(10 * time.Minute)
	for i, s := range []struct {
		at   time.Duration
		want int
	}{{0, 1}, {time.Minute, 2}, {9 * time.Minute, 3}, {10 * time.Minute, 3}, {11*time.Minute + time.Second, 3}, {30 * time.Minute, 1}} {
		if got := w.Add("n1", t0.Add(s.at)); got != s.want {
			t.Errorf("step %d: Add(+%s) = %d, want %d", i, s.at, got, s.want)
		}
	}
	if got := w.Count("n1", t0.Add(41*time.Minute)); got != 0 {
		t.Errorf("Count after the window = %d, want 0", got)
	}
	if got := w.Count("n2", t0); got != 0 {
		t.Errorf("Count of an unknown key = %d", got)
	}
}

func TestQuarantine(t *testing.T) {
	q := NewQuarantine(3, 10*time.Minute)
	gpu := GPUTarget("n1", "GPU-1")
	node := NodeTarget("n1")
	var got []bool
	for _, at := range []time.Duration{0, time.Minute, 15 * time.Minute, 16 * time.Minute, 17 * time.Minute, 18 * time.Minute} {
		_, in := q.Failure(gpu, t0.Add(at), "xid")
		got = append(got, in)
	}
	// the first two leave the window before the third, so the threshold is
	// reached at +17m, once.
	if diff := diff([]bool{false, false, false, false, true, false}, got); diff != "" {
		t.Errorf("Failure quarantined mismatch (-want +got):\n%s", diff)
	}
	if !q.Covers("n1", "GPU-1") || q.Covers("n1", "GPU-2") {
		t.Errorf("Covers after a GPU quarantine: GPU-1 %v (want true), GPU-2 %v (want false)", q.Covers("n1", "GPU-1"), q.Covers("n1", "GPU-2"))
	}
	q.Add(node, t0, "restored")
	if !q.Covers("n1", "GPU-2") || q.Covers("n2", "GPU-9") {
		t.Errorf("a node quarantine must cover all its GPUs and nothing else")
	}
	q.Add(NodeTarget("n2"), t0, "other")
	if diff := diff([]Target{gpu, node}, q.ReleaseNode("n1")); diff != "" {
		t.Errorf("ReleaseNode mismatch (-want +got):\n%s", diff)
	}
	if q.Covers("n1", "GPU-1") {
		t.Errorf("n1 still covered after release")
	}
	if diff := diff([]Target{NodeTarget("n2")}, q.List()); diff != "" {
		t.Errorf("List after release (-want +got):\n%s", diff)
	}
	// release forgets the failures: two more do not re-quarantine.
	for _, at := range []time.Duration{19 * time.Minute, 20 * time.Minute} {
		if n, in := q.Failure(gpu, t0.Add(at), "xid"); in {
			t.Errorf("re-quarantined after release at %d failures", n)
		}
	}
}

func TestRecovery(t *testing.T) {
	r := NewRecovery(time.Minute)
	g := GPUTarget("n1", "GPU-1")
	if !r.Usable(g, t0) {
		t.Fatal("a target never seen failing must be usable")
	}
	type step struct {
		at          time.Duration
		healthy     bool
		wantChanged bool
		wantUsable  bool
	}
	for i, s := range []step{
		{0, false, true, false},
		{30 * time.Second, true, false, false},  // healthy, waiting
		{60 * time.Second, true, false, false},  // still waiting (30s of 60s)
		{70 * time.Second, false, false, false}, // new fault restarts the wait
		{80 * time.Second, true, false, false},
		{140 * time.Second, true, false, true}, // quiet passed: usable (Settle reports the change)
	} {
		changed := r.Observe(g, s.healthy, t0.Add(s.at))
		if changed != s.wantChanged || r.Usable(g, t0.Add(s.at)) != s.wantUsable {
			t.Errorf("step %d (+%s healthy=%v): changed %v usable %v, want %v %v", i, s.at, s.healthy,
				changed, r.Usable(g, t0.Add(s.at)), s.wantChanged, s.wantUsable)
		}
	}
	if diff := diff([]Target{g}, r.Settle(t0.Add(140*time.Second))); diff != "" {
		t.Errorf("Settle (-want +got):\n%s", diff)
	}
	if len(r.since) != 0 {
		t.Errorf("Settle left %v", r.since)
	}
}

func TestRecoverySettleWaits(t *testing.T) {
	r := NewRecovery(time.Minute)
	g := NodeTarget("n1")
	r.Observe(g, false, t0)
	r.Observe(g, true, t0.Add(time.Second))
	if got := r.Settle(t0.Add(30 * time.Second)); len(got) != 0 {
		t.Errorf("Settle before the quiet period = %v", got)
	}
	if diff := diff([]Target{g}, r.Recovering(t0.Add(30*time.Second))); diff != "" {
		t.Errorf("Recovering (-want +got):\n%s", diff)
	}
	r.Forget("n1")
	if !r.Usable(g, t0.Add(31*time.Second)) {
		t.Errorf("Forget must drop the node's targets")
	}
}

func TestPlan(t *testing.T) {
	fault := Fault{Target: GPUTarget("n1", "GPU-1"), Cause: GPUUnhealthy, Detail: "XID 79"}
	solo := Pod{Namespace: "ns", Name: "solo", UID: "u-solo", Node: "n1"}
	keep := Pod{Namespace: "ns", Name: "keep", UID: "u-keep", Node: "n1", MarkOnly: true}
	g := func(i int, node string) Pod {
		return Pod{Namespace: "ns", Name: "g-" + string(rune('0'+i)), UID: "u-g" + string(rune('0'+i)), Node: node, Gang: "ns/g"}
	}
	gang := []Pod{g(0, "n1"), g(1, "n1"), g(2, "n2"), g(3, "n3")}
	members := func(key string) []Pod {
		if key == "ns/g" {
			return gang
		}
		return nil
	}
	msg := "GPU GPU-1 on node n1 is unhealthy (XID 79)"
	via := msg + "; gang member ns/g-0 was running on it"
	tests := []struct {
		name     string
		mode     Mode
		limiter  *Limiter
		affected []Pod
		members  []Pod // overrides the gang when set
		want     []Decision
	}{
		{
			name: "on: a single pod is deleted", mode: On, limiter: NewLimiter(10, 10, 10, 10),
			affected: []Pod{solo},
			want:     []Decision{{Pod: solo, Action: Delete, Reason: msg}},
		},
		{
			name: "mark-only is only marked", mode: On, limiter: NewLimiter(10, 10, 10, 10),
			affected: []Pod{keep, solo},
			want:     []Decision{{Pod: keep, Action: Mark, Reason: msg}, {Pod: solo, Action: Delete, Reason: msg}},
		},
		{
			name: "one gang member's fault deletes the whole gang, once", mode: On, limiter: NewLimiter(10, 10, 10, 10),
			affected: []Pod{gang[0], gang[1]},
			want: []Decision{
				{Pod: gang[0], Action: Delete, Reason: msg},
				{Pod: gang[1], Action: Delete, Reason: via},
				{Pod: gang[2], Action: Delete, Reason: via},
				{Pod: gang[3], Action: Delete, Reason: via},
			},
		},
		{
			name: "a gang with a mark-only member is only marked", mode: On, limiter: NewLimiter(10, 10, 10, 10),
			affected: []Pod{gang[0]},
			members:  []Pod{gang[0], gang[1], {Namespace: "ns", Name: "g-2", UID: "u-g2", Node: "n2", Gang: "ns/g", MarkOnly: true}},
			want: []Decision{
				{Pod: gang[0], Action: Mark, Reason: msg},
				{Pod: gang[1], Action: Mark, Reason: via},
				{Pod: Pod{Namespace: "ns", Name: "g-2", UID: "u-g2", Node: "n2", Gang: "ns/g", MarkOnly: true}, Action: Mark, Reason: via},
			},
		},
		{
			name: "a gang takes one token and is deferred whole when none is left", mode: On, limiter: NewLimiter(10, 10, 1, 1),
			affected: []Pod{solo, gang[0]},
			want: []Decision{
				{Pod: solo, Action: Delete, Reason: msg},
				{Pod: gang[0], Action: Deferred, Reason: msg},
				{Pod: gang[1], Action: Deferred, Reason: via},
				{Pod: gang[2], Action: Deferred, Reason: via},
				{Pod: gang[3], Action: Deferred, Reason: via},
			},
		},
		{
			name: "dry-run decides the same and flags every decision", mode: DryRun, limiter: NewLimiter(10, 10, 1, 1),
			affected: []Pod{solo, keep, {Namespace: "ns", Name: "late", UID: "u-late", Node: "n1"}},
			want: []Decision{
				{Pod: solo, Action: Delete, DryRun: true, Reason: msg},
				{Pod: keep, Action: Mark, DryRun: true, Reason: msg},
				{Pod: Pod{Namespace: "ns", Name: "late", UID: "u-late", Node: "n1"}, Action: Deferred, DryRun: true, Reason: msg},
			},
		},
		{
			name: "a gang whose informer lost the affected member still includes it", mode: On,
			affected: []Pod{gang[0]}, members: []Pod{gang[1]},
			want: []Decision{{Pod: gang[1], Action: Delete, Reason: via}, {Pod: gang[0], Action: Delete, Reason: msg}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &Planner{Mode: tc.mode, Limiter: tc.limiter}
			m := members
			if tc.members != nil {
				m = func(string) []Pod { return tc.members }
			}
			got := p.Plan(fault, tc.affected, m, t0)
			if diff := diff(tc.want, got); diff != "" {
				t.Errorf("Plan mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFaultMessage(t *testing.T) {
	for _, tc := range []struct {
		give Fault
		want string
	}{
		{Fault{Target: GPUTarget("n1", "GPU-1"), Cause: GPUUnhealthy, Detail: "XID 79"}, "GPU GPU-1 on node n1 is unhealthy (XID 79)"},
		{Fault{Target: NodeTarget("n1"), Cause: NodeNotReady, Detail: "Ready=Unknown"}, "node n1 is not Ready (Ready=Unknown)"},
		{Fault{Target: NodeTarget("n1"), Cause: NodeHeartbeatLost}, "node n1 stopped reporting"},
	} {
		if got := tc.give.Message(); got != tc.want {
			t.Errorf("Message() = %q, want %q", got, tc.want)
		}
	}
}

// diff is "" when want and got are deeply equal, else both printed (go-cmp
// is not a module dependency).
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return fmt.Sprintf("-want %+v\n+got  %+v", want, got)
}
