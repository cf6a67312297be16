package sim

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/placement"
)

// smallCluster is a mixed cluster: 8-GPU nodes that are CPU-tight, 2-GPU
// CPU-rich nodes of another model, and a CPU-light 4-GPU node.
func smallCluster() []Node {
	var nodes []Node
	for i := range 3 {
		nodes = append(nodes, Node{Name: fmt.Sprintf("n-a%d", i), CPUMilli: 96000, HostMemoryMiB: 393216, GPUs: 8, Model: "A"})
	}
	for i := range 4 {
		nodes = append(nodes, Node{Name: fmt.Sprintf("n-b%d", i), CPUMilli: 104000, HostMemoryMiB: 524288, GPUs: 2, Model: "B"})
	}
	nodes = append(nodes, Node{Name: "n-c0", CPUMilli: 32000, HostMemoryMiB: 131072, GPUs: 4, Model: "C"})
	return nodes
}

func smallPods() []Pod {
	return []Pod{
		{Name: "share-810", CPUMilli: 3152, HostMemoryMiB: 4096, GPUs: 1, GPUMilli: 810},
		{Name: "share-470", CPUMilli: 8000, HostMemoryMiB: 8192, GPUs: 1, GPUMilli: 470},
		{Name: "share-250", CPUMilli: 4000, HostMemoryMiB: 4096, GPUs: 1, GPUMilli: 250},
		{Name: "one", CPUMilli: 11300, HostMemoryMiB: 16384, GPUs: 1, GPUMilli: 1000},
		{Name: "one-b", CPUMilli: 12000, HostMemoryMiB: 16384, GPUs: 1, GPUMilli: 1000, Models: []string{"B"}},
		{Name: "two", CPUMilli: 16000, HostMemoryMiB: 32768, GPUs: 2, GPUMilli: 1000},
		{Name: "eight", CPUMilli: 64000, HostMemoryMiB: 131072, GPUs: 8, GPUMilli: 1000},
		{Name: "cpu", CPUMilli: 12500, HostMemoryMiB: 57344},
		{Name: "cpu-big", CPUMilli: 32000, HostMemoryMiB: 49152},
	}
}

func runSmall(t *testing.T, policy string, seed uint64, check bool) Result {
	t.Helper()
	nodes, pods := smallCluster(), smallPods()
	p, err := NewPolicy(policy, WorkloadOf(pods, WorkloadOptions{}), seed, nodes)
	if err != nil {
		t.Fatalf("NewPolicy(%s): %v", policy, err)
	}
	r, err := Run(Config{Nodes: nodes, Pods: pods, Policy: p, Seed: seed, Check: check})
	if err != nil {
		t.Fatalf("Run(%s, seed %d): %v", policy, seed, err)
	}
	return r
}

// TestRunInvariants replays every policy with ledger.Check after each
// placement (no GPU, CPU or memory over capacity, no whole GPU shared) and
// checks the protocol's bookkeeping.
func TestRunInvariants(t *testing.T) {
	for _, policy := range PolicyNames {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed=%d", policy, seed), func(t *testing.T) {
				r := runSmall(t, policy, seed, true)
				if r.Placed+r.Failed != r.Arrived {
					t.Errorf("placed %d + failed %d != arrived %d", r.Placed, r.Failed, r.Arrived)
				}
				if r.Failed == 0 {
					t.Errorf("no pod failed at %.1fx capacity; the protocol must overfill", DefaultTune)
				}
				if got, want := len(r.Curve), 131; got != want {
					t.Errorf("curve has %d points, want %d", got, want)
				}
				prev := -1.0
				for _, p := range r.Curve {
					if p.N == 0 {
						continue
					}
					if p.Alloc < prev-1e-9 {
						t.Errorf("allocation fell from %.3f to %.3f at x=%d: pods never leave", prev, p.Alloc, p.X)
					}
					prev = p.Alloc
					if p.Alloc > float64(p.X)+0.5+1e-9 || p.Alloc > 100 {
						t.Errorf("x=%d: allocated %.3f%% exceeds arrived demand", p.X, p.Alloc)
					}
					if p.Frag < 0 || p.Frag > 100-p.Alloc+1e-9 || p.FragRatio < 0 || p.FragRatio > 100+1e-9 {
						t.Errorf("x=%d: fragmentation %.3f%% (ratio %.3f%%) outside 0..idle", p.X, p.Frag, p.FragRatio)
					}
				}
			})
		}
	}
}

// TestRunDeterministic: the same seed gives the same result, for every
// policy (the random baseline draws from its own seeded source).
func TestRunDeterministic(t *testing.T) {
	for _, policy := range PolicyNames {
		t.Run(policy, func(t *testing.T) {
			a, b := runSmall(t, policy, 7, false), runSmall(t, policy, 7, false)
			if diff := cmp.Diff(a, b); diff != "" {
				t.Errorf("Run() not deterministic (-first +second):\n%s", diff)
			}
		})
	}
}

func TestArrivals(t *testing.T) {
	pods := smallPods()
	const capMilli = 10_000
	for seed := range uint64(5) {
		order := Arrivals(pods, seed, 1.3, capMilli)
		var sum, beforeLast int64
		for i, p := range order {
			if p < 0 || p >= len(pods) {
				t.Fatalf("seed %d: index %d out of range", seed, p)
			}
			if i == len(order)-1 {
				beforeLast = sum
			}
			sum += pods[p].GPUMilliTotal()
		}
		if sum < 13_000 || beforeLast >= 13_000 {
			t.Errorf("seed %d: arrivals stop at %d milli (before the last %d), want the first to reach 13000", seed, sum, beforeLast)
		}
		// The first len(pods) arrivals are a permutation of the list.
		seen := map[int]bool{}
		for _, p := range order[:len(pods)] {
			seen[p] = true
		}
		if len(seen) != len(pods) {
			t.Errorf("seed %d: first %d arrivals are not a permutation: %v", seed, len(pods), order[:len(pods)])
		}
	}
	if diff := cmp.Diff(Arrivals(pods, 3, 1.3, capMilli), Arrivals(pods, 3, 1.3, capMilli)); diff != "" {
		t.Errorf("Arrivals not deterministic (-first +second):\n%s", diff)
	}
}

// TestSelectorMatchesRank: the memoised selection loop picks what Fit plus
// Policy.Score plus placement.Rank pick, pod after pod.
func TestSelectorMatchesRank(t *testing.T) {
	nodes, pods := smallCluster(), smallPods()
	w := WorkloadOf(pods, WorkloadOptions{})
	for _, name := range []string{placement.FGD, placement.FragmentationAware, BestFit, GPUPacking} {
		t.Run(name, func(t *testing.T) {
			p, err := NewPolicy(name, w, 1, nodes)
			if err != nil {
				t.Fatal(err)
			}
			cl := Cluster(nodes)
			l := newLedger(cl)
			s := newSelector(p, len(cl))
			for k, pi := range Arrivals(pods, 1, 1.3, 30_000) {
				r := pods[pi].Request(fmt.Sprint("u", k))
				snap := l.Snapshot()
				got, choice := s.pick(r, snap, snap.Names())
				var names []string
				var scores []int64
				for _, n := range snap.Names() {
					if c, reason := placement.Fit(r, snap.Node(n)); reason == nil {
						names = append(names, n)
						scores = append(scores, p.Score(r, snap.Node(n), c))
					}
				}
				if len(names) == 0 {
					if got >= 0 {
						t.Fatalf("pod %d: picked %s, but nothing fits", k, snap.Names()[got])
					}
					continue
				}
				want := names[placement.Rank(names, scores)[0]]
				if got < 0 || snap.Names()[got] != want {
					t.Fatalf("pod %d (%s): selector picked %d, Rank picks %s", k, pods[pi].Name, got, want)
				}
				if err := commit(l, r, snap.Node(want), choice); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	nodes, pods := smallCluster(), smallPods()
	p, _ := NewPolicy(BestFit, nil, 0, nodes)
	tests := []struct {
		name    string
		give    Config
		wantErr error
	}{
		{name: "no pods", give: Config{Nodes: nodes, Policy: p}, wantErr: ErrNoPods},
		{name: "no GPUs", give: Config{Nodes: []Node{{Name: "cpu", CPUMilli: 1000}}, Pods: pods, Policy: p}, wantErr: ErrNoCapacity},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Run(tc.give); !errors.Is(err, tc.wantErr) {
				t.Errorf("Run() error = %v, want %v", err, tc.wantErr)
			}
		})
	}
	if _, err := NewPolicy("nope", nil, 0, nodes); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("NewPolicy(nope) error = %v, want unknown policy", err)
	}
}

func TestWorkloadOf(t *testing.T) {
	pods := []Pod{
		{CPUMilli: 1000, GPUs: 1, GPUMilli: 500}, {CPUMilli: 1000, GPUs: 1, GPUMilli: 500},
		{CPUMilli: 2000, GPUs: 2, GPUMilli: 1000}, {CPUMilli: 3000},
	}
	got := WorkloadOf(pods, WorkloadOptions{})
	want := placement.Workload{
		{Milli: 500, CPUMilli: 1000, Weight: 0.5},
		{GPUs: 2, CPUMilli: 2000, Weight: 0.25},
		{CPUMilli: 3000, Weight: 0.25},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WorkloadOf() (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	top := WorkloadOf(pods, WorkloadOptions{Popularity: 0.5})
	if diff := cmp.Diff(placement.Workload{{Milli: 500, CPUMilli: 1000, Weight: 1}}, top); diff != "" {
		t.Errorf("WorkloadOf(popularity 0.5) (-want +got):\n%s", diff)
	}
}
