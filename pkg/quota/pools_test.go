package quota

import (
	"errors"
	"strings"
	"testing"

	"github.com/rota-sched/rota/pkg/contract"
)

// A team places on its own pool, else on the nearest group's above it,
// else on the nodes of none; a pool owned by a group is its whole
// subtree's.
func TestPoolOf(t *testing.T) {
	c := orgTree()
	c.Teams["loner"] = Team{GPUs: 1}
	c.NodePools = map[string]NodePool{
		"dept-pool": {Owner: "dept"},
		"p2-pool":   {Owner: "p2", Policy: "spread"},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for team, want := range map[string]string{
		"p1":      "dept-pool", // through t, then dept
		"q1":      "dept-pool",
		"p2":      "p2-pool", // its own wins over its department's
		"loner":   "",
		"unknown": "",
		"":        "",
	} {
		if got := c.PoolOf(team); got != want {
			t.Errorf("PoolOf(%q) = %q, want %q", team, got, want)
		}
	}
	if pol, _, ok := c.PoolPolicy("p2-pool"); !ok || pol != "spread" {
		t.Errorf("PoolPolicy(p2-pool) = %q, %v", pol, ok)
	}
	if _, _, ok := c.PoolPolicy("nope"); ok {
		t.Error("PoolPolicy of an unconfigured pool is ok")
	}
	if got := (Config{}).PoolOf("p1"); got != "" {
		t.Errorf("no pools: PoolOf = %q", got)
	}
}

// Every bad pool is refused with its field named.
func TestPoolsValidate(t *testing.T) {
	for _, tc := range []struct {
		name, doc, field string
	}{
		{"no owner", `{"teams":{"a":{}},"nodePools":{"p":{}}}`, "nodePools.p.owner"},
		{"unknown owner", `{"teams":{"a":{}},"nodePools":{"p":{"owner":"b"}}}`, "nodePools.p.owner"},
		{"two pools, one owner", `{"teams":{"a":{}},"nodePools":{"p":{"owner":"a"},"q":{"owner":"a"}}}`, "nodePools.q.owner"},
		{"unknown policy", `{"teams":{"a":{}},"nodePools":{"p":{"owner":"a","policy":"fastest"}}}`, "nodePools.p.policy"},
		{"bad workload", `{"teams":{"a":{}},"nodePools":{"p":{"owner":"a","workload":[{"gpus":1,"milli":500,"weight":1}]}}}`, "nodePools.p.workload"},
		{"bad name", `{"teams":{"a":{}},"nodePools":{"-p":{"owner":"a"}}}`, "nodePools"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			var fe *contract.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %v, want field %s", err, tc.field)
			}
		})
	}
	good := `{"groups":{"g":{}},"teams":{"a":{"group":"g"},"b":{}},"nodePools":{"p":{"owner":"g","policy":"fragmentation-aware",` +
		`"workload":[{"gpus":1,"weight":3},{"milli":500,"weight":1}]},"q":{"owner":"b"}}}`
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.PoolNames(), ","); got != "p,q" {
		t.Errorf("PoolNames = %s", got)
	}
}
