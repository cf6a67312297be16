//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// TestQueueNodePoolCanary: a policy tried on one team's node pool first, on
// the real control plane. Team qpool-canary owns node pool qpool (two
// nodes labelled <domain>/node-pool=qpool) placed by spread; team
// qpool-rest places on the two nodes of no pool by the extender's binpack.
// The canary's pods spread over its two nodes, the rest's pack onto one,
// and neither team's pods go to the other's nodes. Then the pool's policy
// is changed to binpack in the quota ConfigMap: without a restart, the
// canary's next two pods pack onto one node (spread would put them on two).
func TestQueueNodePoolCanary(t *testing.T) {
	const name = "qpool"
	ctx, nsC := setup(t, name, "qpool-canary", 4*time.Minute)
	nsR := teamNamespace(ctx, t, "e2e-qpool-rest", "qpool-rest")
	queueing(ctx, t)
	spec := harness.GPUNodeSpec{Model: h100.Model, MemoryMiB: h100.MemoryMiB, Count: 4}
	pooled := spec
	pooled.Labels = map[string]string{topology.PoolLabel(env.Names): name}
	nodes(ctx, t, name, "qpool-c", 2, pooled)
	nodes(ctx, t, name, "qpool-r", 2, spec)

	// one creates a 1-GPU pod and returns the node it runs on.
	one := func(ns, pod string) string {
		t.Helper()
		create(ctx, t, harness.Pod(ns, pod).NodeSelector(ScenarioLabel, name).GPUs(1).Obj())
		pods := waitPods(ctx, t, ns, pod+" running", func(p []corev1.Pod) bool { return running(p, pod) })
		return byName(pods, pod).Spec.NodeName
	}
	infoSeries := func(policy string) string {
		return fmt.Sprintf(`rota_extender_node_pool_info{owner="qpool-canary",policy="%s",pool="%s"}`, policy, name)
	}
	waitMetric(ctx, t, "the pool's policy spread in the metrics", func(s harness.Samples) bool { return s[infoSeries("spread")] == 1 })

	c0, c1 := one(nsC, "c0"), one(nsC, "c1")
	r0, r1 := one(nsR, "r0"), one(nsR, "r1")
	for pod, node := range map[string]string{"c0": c0, "c1": c1} {
		if !strings.HasPrefix(node, "qpool-c-") {
			t.Errorf("canary pod %s on %s, outside its pool", pod, node)
		}
	}
	for pod, node := range map[string]string{"r0": r0, "r1": r1} {
		if !strings.HasPrefix(node, "qpool-r-") {
			t.Errorf("pod %s of a team without a pool on %s, a node of pool %s", pod, node, name)
		}
	}
	if c0 == c1 {
		t.Errorf("canary pods both on %s: the pool's spread policy did not place them", c0)
	}
	if r0 != r1 {
		t.Errorf("the rest's pods on %s and %s: the extender's binpack did not place them", r0, r1)
	}

	// Roll the canary forward: its pool's policy becomes binpack.
	was, err := env.SetQuota(ctx, strings.Replace(quotaDoc, "policy: spread", "policy: binpack", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := env.SetQuota(cctx, was); err != nil {
			t.Errorf("restoring the quota: %v", err)
		}
	})
	waitMetric(ctx, t, "the pool's policy binpack in the metrics", func(s harness.Samples) bool { return s[infoSeries("binpack")] == 1 })
	c2, c3 := one(nsC, "c2"), one(nsC, "c3")
	if c2 != c3 || !strings.HasPrefix(c2, "qpool-c-") {
		t.Errorf("after the change the canary's pods went to %s and %s; binpack packs them on one node of the pool", c2, c3)
	}
	st, err := ledgerState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, p := range st.Pools {
		if p.Pool == name {
			row = fmt.Sprintf("%s %s %d/%d", p.Owner, p.Policy, p.Busy, p.GPUs)
		}
	}
	if row != "qpool-canary binpack 3/8" && row != "qpool-canary binpack 4/8" {
		t.Errorf("the status page's row for pool %s: %q, want its owner, binpack and 3 or 4 of 8 GPUs busy", name, row)
	}
	note(name, "spread: canary on %s and %s, rest packed on %s; after the edit binpack packed c2, c3 on %s", c0, c1, r0, c2)
	q := quotaConfig(t) // with its node pools: every GPU pod in its team's pool, checked apart from Rota
	checkInvariants(ctx, t, &q)
}
