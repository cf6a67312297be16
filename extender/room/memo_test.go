package room_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/test/fixture"
)

// TestHoldRoomReusesFitsExactly holds and releases room for random pods
// (shares and whole GPUs, node selectors, tolerations) while other holds
// come and go, and wants one long-lived planner, which reuses the fits of
// nodes that did not change since its last hold, to answer as a fresh one
// does, and both to pick the node a plain pass over every node picks: the
// pod may go there, it fits, and no node it may go to scores higher (the
// first by name among equals).
func TestHoldRoomReusesFitsExactly(t *testing.T) {
	var objs []runtime.Object
	for i := range 16 {
		b := fixture.GPUNode(fmt.Sprintf("n%02d", i)).GPUs([]int{2, 4, 8}[i%3], contract.MiB([]int{40, 80}[i%2]*1024)).
			Label("zone", []string{"a", "b"}[i%2])
		if i%5 == 0 {
			b = b.Taint("dedicated", corev1.TaintEffectNoSchedule)
		}
		objs = append(objs, b.Obj())
	}
	w := newWorld(t, objs...)
	led, c, request := w.led, w.cache, w.request
	policy, _ := placement.NewPolicy(placement.Binpack, nil)
	newExt := func() *room.Planner {
		e, err := room.New(room.Options{Ledger: led, Node: c.Node, Request: request, Policy: policy,
			Tiers: w.tiers, Candidates: 3})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	warm := newExt()
	expires := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(1, 2))
	randomPod := func(name string) *corev1.Pod {
		b := fixture.Pod("default", name).UID("uid-" + name)
		if r.IntN(3) == 0 {
			b = b.GPUs(1 + r.IntN(8))
		} else {
			b = b.MemoryMiB(contract.MiB(10*(1+r.IntN(8))) * 1024)
		}
		if r.IntN(4) == 0 {
			b = b.NodeSelector("zone", []string{"a", "b", "c"}[r.IntN(3)])
		}
		if r.IntN(3) == 0 {
			b = b.Tolerate("dedicated")
		}
		return b.Obj()
	}
	var kept []room.Hold
	for step := range 400 {
		switch r.IntN(3) {
		case 0: // another admission keeps its room
			if h, reason := warm.HoldRoom([]*corev1.Pod{randomPod(fmt.Sprintf("keep-%d", step))}, room.Scope{}, expires); reason == "" {
				kept = append(kept, h)
			}
		case 1: // one ends
			if len(kept) > 0 {
				i := r.IntN(len(kept))
				warm.ReleaseHold(kept[i])
				kept = append(kept[:i], kept[i+1:]...)
			}
		}
		p := randomPod(fmt.Sprintf("probe-%d", step))
		ranked := plainRanked(t, c, led.Snapshot(), policy, p)
		wantNode := ""
		if len(ranked) > 0 {
			wantNode = ranked[0]
		}
		want, wantReason := newExt().HoldRoom([]*corev1.Pod{p}, room.Scope{}, expires)
		newExt().ReleaseHold(want)
		got, gotReason := warm.HoldRoom([]*corev1.Pod{p}, room.Scope{}, expires)
		warm.ReleaseHold(got)
		if diff := gocmp.Diff(want, got); diff != "" || gotReason != wantReason {
			t.Fatalf("step %d: warm extender holds (-fresh +warm):\n%s\nreason %q, fresh %q", step, diff, gotReason, wantReason)
		}
		if got.Where != wantNode {
			t.Fatalf("step %d: held on %q (%s), a pass over every node picks %q", step, got.Where, gotReason, wantNode)
		}
		if wantCandidates := ranked[:min(3, len(ranked))]; gotReason == "" && !slices.Equal(got.Candidates, wantCandidates) {
			t.Fatalf("step %d: candidates %v, a pass over every node ranks %v", step, got.Candidates, wantCandidates)
		}
	}
}

// plainRanked is what a plain pass ranks for p: the nodes p may go to that
// it fits, by score, the first by name among equals (the node to hold
// first); nil when none.
func plainRanked(t *testing.T, c *state.Cache, snap *ledger.Snapshot, policy placement.Policy, p *corev1.Pod) []string {
	t.Helper()
	req, err := podreq.FromPod(p, podreq.Options{Names: contract.Default})
	if err != nil {
		t.Fatal(err)
	}
	type scored struct {
		node  string
		score int64
	}
	var fit []scored
	for _, n := range snap.Names() {
		node, ok := c.Node(n)
		if !ok {
			continue
		}
		if match, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(node); err != nil || !match {
			continue
		}
		tolerated := true
		for _, taint := range node.Spec.Taints {
			if !tolerates(p, taint) {
				tolerated = false
			}
		}
		if !tolerated {
			continue
		}
		ni := snap.Node(n)
		ch, reason := placement.Fit(req, ni)
		if reason != nil {
			continue
		}
		fit = append(fit, scored{n, policy.Score(req, ni, ch)})
	}
	slices.SortStableFunc(fit, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	var out []string
	for _, f := range fit {
		out = append(out, f.node)
	}
	return out
}

func tolerates(p *corev1.Pod, taint corev1.Taint) bool {
	for _, tol := range p.Spec.Tolerations {
		if tol.ToleratesTaint(klog.Logger{}, &taint, true) {
			return true
		}
	}
	return false
}
