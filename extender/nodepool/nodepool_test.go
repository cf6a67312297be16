package nodepool

import (
	"testing"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/quota"
)

func parse(t *testing.T, doc string) *quota.Config {
	t.Helper()
	c, err := quota.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// A pool's policy is its own, or the extender's; an edit of the
// configuration takes effect at the next question, without a restart.
func TestPoliciesFollowTheConfiguration(t *testing.T) {
	def, err := placement.NewPolicy(placement.Binpack, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, `{"teams":{"a":{},"b":{}},"nodePools":{"canary":{"owner":"a","policy":"spread"},"plain":{"owner":"b"}}}`)
	p := New(klog.Background(), func() (*quota.Config, bool) { return cfg, true }, def, nil)
	check := func(pool, want string) {
		t.Helper()
		if got := p.For(pool).Name(); got != want {
			t.Errorf("For(%q) = %s, want %s", pool, got, want)
		}
	}
	check("canary", placement.Spread)
	check("plain", placement.Binpack)
	check("", placement.Binpack)
	check("unconfigured", placement.Binpack)
	if got := p.PoolOf("a"); got != "canary" {
		t.Errorf("PoolOf(a) = %q", got)
	}

	// Roll the canary forward to another policy, then back.
	cfg = parse(t, `{"teams":{"a":{},"b":{}},"nodePools":{"canary":{"owner":"a","policy":"fragmentation-aware"},"plain":{"owner":"b"}}}`)
	check("canary", placement.FragmentationAware)
	if got := p.Pools(); len(got) != 2 || got[0] != (Pool{Name: "canary", Owner: "a", Policy: placement.FragmentationAware}) {
		t.Errorf("Pools = %+v", got)
	}
	cfg = parse(t, `{"teams":{"a":{},"b":{}}}`)
	check("canary", placement.Binpack)
	if got := p.PoolOf("a"); got != "" {
		t.Errorf("PoolOf(a) with the pool gone = %q", got)
	}
	cfg = nil
	check("canary", placement.Binpack)
	if got := p.Pools(); len(got) != 0 {
		t.Errorf("Pools without a configuration = %+v", got)
	}

	// No quota source: no pools at all.
	none := New(klog.Background(), nil, def, nil)
	if none.PoolOf("a") != "" || none.For("canary") != def {
		t.Error("pools without a quota source")
	}
}
