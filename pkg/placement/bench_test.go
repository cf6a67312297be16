package placement_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/topology"
)

const (
	benchNodes        = 5000
	benchNodesInLeaf  = 32
	benchLeavesInZone = 16
)

var (
	benchOnce sync.Once
	benchSnap *ledger.Snapshot
)

// benchCluster is 5,000 nodes x 8 H100 (two NVLink islands of 4), 32 nodes
// per leaf switch and 16 leaves per zone, holding 40,000 assigned pods: on
// average 8 per node, a mix of whole GPUs and memory shares, so that most
// nodes still have some room and every node must be looked at.
func benchCluster(b *testing.B) *ledger.Snapshot {
	b.Helper()
	benchOnce.Do(func() {
		r := rand.New(rand.NewPCG(2026, 5000))
		nodes := make([]*topology.Node, 0, benchNodes)
		var allocs []ledger.Allocation
		for i := range benchNodes {
			leaf := i / benchNodesInLeaf
			n := topology.FromSpec(topology.Spec{Name: fmt.Sprintf("node-%04d", i), Model: "H100", Count: 8,
				MemoryMiB: 80 * gib, IslandSize: 4, NUMANodes: 2,
				Tiers: []string{fmt.Sprintf("leaf-%03d", leaf), fmt.Sprintf("zone-%d", leaf/benchLeavesInZone)}})
			nodes = append(nodes, n)
			// 8 pods: k whole-GPU pods on the first GPUs, then memory shares
			// two to a GPU; the GPUs after them stay idle (2..4 per node).
			k := r.IntN(5)
			for p := range 8 {
				a := ledger.Allocation{PodUID: fmt.Sprintf("pod-%04d-%d", i, p), Node: n.Name, Priority: int32(r.IntN(3))}
				if p < k {
					a.Whole = true
					a.GPUs = []ledger.Share{{Index: p, UUID: n.GPUs[p].UUID, MemoryMiB: 80 * gib}}
				} else {
					g := k + (p-k)/2
					a.GPUs = []ledger.Share{{Index: g, UUID: n.GPUs[g].UUID, MemoryMiB: placement.MiB((5 + r.IntN(30)) * gib)}}
				}
				allocs = append(allocs, a)
			}
		}
		l := ledger.New()
		if errs := l.Rebuild(nodes, allocs); len(errs) > 0 {
			panic(fmt.Sprintf("bench cluster: %d allocations do not fit: %v", len(errs), errs[0]))
		}
		benchSnap = l.Snapshot()
	})
	if n := len(benchSnap.Node("node-0000").Allocs); n != 8 {
		b.Fatalf("node-0000 holds %d pods", n)
	}
	return benchSnap
}

var benchPods = []struct {
	name string
	req  placement.Request
}{
	{"pod=share20GiB", placement.Request{UID: "bench", Pod: "ns/bench", MemoryUnits: 20}},
	{"pod=gpus2", placement.Request{UID: "bench", Pod: "ns/bench", GPUs: 2}},
}

// filter is the extender's filter call: Fit against every node.
func filter(r placement.Request, snap *ledger.Snapshot, feasible []string) []string {
	feasible = feasible[:0]
	for _, name := range snap.Names() {
		if _, reason := placement.Fit(r, snap.Node(name)); reason == nil {
			feasible = append(feasible, name)
		}
	}
	return feasible
}

// prioritize is the extender's prioritize call: Fit and Score on every
// node it is given, mapped onto kube-scheduler's 0..10.
func prioritize(r placement.Request, snap *ledger.Snapshot, p placement.Policy, names []string, scores []int64) []int64 {
	scores = scores[:0]
	for _, name := range names {
		ni := snap.Node(name)
		var s int64
		if c, reason := placement.Fit(r, ni); reason == nil {
			s = placement.ToExtenderScore(p.Score(r, ni, c), 10)
		}
		scores = append(scores, s)
	}
	return scores
}

// BenchmarkFilter5kNodes: one pod against 5,000 nodes.
func BenchmarkFilter5kNodes(b *testing.B) {
	snap := benchCluster(b)
	for _, pod := range benchPods {
		b.Run(pod.name, func(b *testing.B) {
			feasible := make([]string, 0, benchNodes)
			b.ReportAllocs()
			for b.Loop() {
				feasible = filter(pod.req, snap, feasible)
			}
			b.ReportMetric(float64(len(feasible)), "feasible")
		})
	}
}

// BenchmarkScore5kNodes: Fit and Score of one pod on all 5,000 nodes.
func BenchmarkScore5kNodes(b *testing.B) {
	snap := benchCluster(b)
	for _, policy := range []string{placement.Binpack, placement.FragmentationAware} {
		p, err := placement.NewPolicy(policy, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, pod := range benchPods {
			b.Run("policy="+policy+"/"+pod.name, func(b *testing.B) {
				scores := make([]int64, 0, benchNodes)
				b.ReportAllocs()
				for b.Loop() {
					scores = prioritize(pod.req, snap, p, snap.Names(), scores)
				}
			})
		}
	}
}

// perPod runs call for each bench pod with the default policy and reusable
// result slices; call returns the nodes it keeps.
func perPod(b *testing.B, call func(r placement.Request, snap *ledger.Snapshot, p placement.Policy,
	feasible []string, scores []int64) ([]string, []int64)) {
	snap := benchCluster(b)
	p, err := placement.NewPolicy(placement.DefaultPolicyName, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, pod := range benchPods {
		b.Run(pod.name, func(b *testing.B) {
			feasible := make([]string, 0, benchNodes)
			scores := make([]int64, 0, benchNodes)
			b.ReportAllocs()
			for b.Loop() {
				feasible, scores = call(pod.req, snap, p, feasible, scores)
			}
			b.ReportMetric(float64(len(feasible)), "kept")
		})
	}
}

// BenchmarkFilterScore5kNodes is the whole per-pod cost in the extender
// with a separate prioritize call: filter over 5,000 nodes, then prioritize
// the feasible ones.
func BenchmarkFilterScore5kNodes(b *testing.B) {
	perPod(b, func(r placement.Request, snap *ledger.Snapshot, p placement.Policy, feasible []string, scores []int64) ([]string, []int64) {
		feasible = filter(r, snap, feasible)
		return feasible, prioritize(r, snap, p, feasible, scores)
	})
}

// filterBestOnly is the extender's filter call with --filter-best-only (the
// chart's default, which leaves prioritize out): Fit and Score once per
// node, keeping the nodes of the best score.
func filterBestOnly(r placement.Request, snap *ledger.Snapshot, p placement.Policy, feasible []string, scores []int64) ([]string, []int64) {
	feasible, scores = feasible[:0], scores[:0]
	best := int64(-1)
	for _, name := range snap.Names() {
		ni := snap.Node(name)
		c, reason := placement.Fit(r, ni)
		if reason != nil {
			continue
		}
		s := p.Score(r, ni, c)
		best = max(best, s)
		feasible, scores = append(feasible, name), append(scores, s)
	}
	kept := feasible[:0]
	for i, name := range feasible {
		if scores[i] == best {
			kept = append(kept, name)
		}
	}
	return kept, scores
}

// BenchmarkFilterBestOnly5kNodes is the whole per-pod engine cost in the
// chart's default configuration: one filter call that fits and scores every
// node and keeps the best class.
func BenchmarkFilterBestOnly5kNodes(b *testing.B) { perPod(b, filterBestOnly) }

// BenchmarkGangPlan512: a 64-pod x 8-GPU gang (512 GPUs) on 5,000 nodes, 32
// nodes per leaf, planned as a whole.
func BenchmarkGangPlan512(b *testing.B) {
	snap := benchCluster(b)
	// The cluster holds pods on every node; give the gang room: a zone of
	// empty nodes is what a 512-GPU job waits for. Build it on top.
	l := ledger.New()
	var nodes []*topology.Node
	for _, name := range snap.Names() {
		nodes = append(nodes, snap.Node(name).Node)
	}
	var allocs []ledger.Allocation
	for _, name := range snap.Names() {
		ni := snap.Node(name)
		if ni.Node.Tier(1) == "zone-3" && ni.Node.Tier(0) >= "leaf-050" && ni.Node.Tier(0) <= "leaf-052" {
			continue // 3 leaves of 32 empty nodes: 96 nodes
		}
		for _, a := range ni.Allocs {
			allocs = append(allocs, *a)
		}
	}
	if errs := l.Rebuild(nodes, allocs); len(errs) > 0 {
		b.Fatal(errs[0])
	}
	gsnap := l.Snapshot()
	g := placement.Gang{Name: "ns/train-512", Member: placement.Request{GPUs: 8}}
	for i := range 64 {
		g.UIDs = append(g.UIDs, fmt.Sprintf("train-%02d", i))
		g.Pods = append(g.Pods, fmt.Sprintf("ns/train-%02d", i))
	}
	plan, reason := placement.PlanGang(g, gsnap, nil, 2)
	if reason != nil {
		b.Fatal(reason)
	}
	if plan.Level != 1 || len(plan.Nodes()) != 64 {
		b.Fatalf("plan level %d %q on %d nodes", plan.Level, plan.Where, len(plan.Nodes()))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, reason := placement.PlanGang(g, gsnap, nil, 2); reason != nil {
			b.Fatal(reason)
		}
	}
}
