package placement_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

func mustPolicy(t *testing.T, name string) placement.Policy {
	t.Helper()
	p, err := placement.NewPolicy(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func score(t *testing.T, p placement.Policy, r placement.Request, ni *ledger.NodeInfo) int64 {
	t.Helper()
	ch, reason := placement.Fit(r, ni)
	if reason != nil {
		t.Fatalf("Fit(%s) = %s", ni.Name(), reason)
	}
	s := p.Score(r, ni, ch)
	if s < 0 || s > placement.MaxScore {
		t.Fatalf("%s score %d outside 0..%d", p.Name(), s, placement.MaxScore)
	}
	return s
}

// fullerAndEmptier builds node "fuller" (half its GPUs owned) and "emptier"
// (one GPU owned).
func fullerAndEmptier(t *testing.T) *cluster {
	c := newCluster(t).node("fuller", 8, 80, 8).node("emptier", 8, 80, 8)
	c.whole("fuller", []int{0, 1, 2, 3})
	c.whole("emptier", []int{0})
	return c
}

func TestPolicyPrefersNode(t *testing.T) {
	tests := []struct {
		policy string
		give   placement.Request
		want   string // node that scores higher
	}{
		{placement.Binpack, gpus(1), "fuller"},
		{placement.Binpack, shareGiB(10), "fuller"},
		{placement.Spread, gpus(1), "emptier"},
		{placement.Spread, shareGiB(10), "emptier"},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			c := fullerAndEmptier(t)
			p := mustPolicy(t, tc.policy)
			f, e := score(t, p, tc.give, c.ni("fuller")), score(t, p, tc.give, c.ni("emptier"))
			if got := map[bool]string{true: "fuller", false: "emptier"}[f > e]; got != tc.want || f == e {
				t.Errorf("%s: fuller %d, emptier %d; want %s higher", tc.policy, f, e, tc.want)
			}
		})
	}
}

func TestBinpackPrefersFullerGPU(t *testing.T) {
	c := newCluster(t).node("n", 2, 80, 1)
	c.share("n", 0, 40)
	ni := c.ni("n")
	p := mustPolicy(t, placement.Binpack)
	r := shareGiB(20)
	onUsed := p.Score(r, ni, placement.Choice{Node: "n", Slots: []int{0}, MemoryMiB: 20 * gib})
	onIdle := p.Score(r, ni, placement.Choice{Node: "n", Slots: []int{1}, MemoryMiB: 20 * gib})
	if onUsed <= onIdle {
		t.Errorf("binpack: used GPU %d, idle GPU %d; want the used GPU higher", onUsed, onIdle)
	}
}

// TestFragmentationAwarePrefersLessFragmenting builds a case where binpack
// and fragmentation-aware disagree: "full" has one idle GPU left; "holes"
// has GPUs with exactly 20 GiB free. A 20 GiB share on "full" would break
// its last whole GPU; on "holes" it fills a hole.
func TestFragmentationAwarePrefersLessFragmenting(t *testing.T) {
	c := newCluster(t).node("full", 8, 80, 8).node("holes", 8, 80, 8)
	c.whole("full", []int{0, 1, 2, 3, 4, 5, 6})
	for i := range 4 {
		c.share("holes", i, 60)
	}
	r := shareGiB(20)
	frag, bin := mustPolicy(t, placement.FragmentationAware), mustPolicy(t, placement.Binpack)
	if f, h := score(t, bin, r, c.ni("full")), score(t, bin, r, c.ni("holes")); f <= h {
		t.Fatalf("setup: binpack should prefer full (full %d, holes %d)", f, h)
	}
	if f, h := score(t, frag, r, c.ni("full")), score(t, frag, r, c.ni("holes")); h <= f {
		t.Errorf("fragmentation-aware: full %d, holes %d; want holes higher", f, h)
	}
	// On one node: filling a hole beats opening an idle GPU.
	ni := c.ni("holes")
	hole := frag.Score(r, ni, placement.Choice{Node: "holes", Slots: []int{0}, MemoryMiB: 20 * gib})
	idle := frag.Score(r, ni, placement.Choice{Node: "holes", Slots: []int{5}, MemoryMiB: 20 * gib})
	if hole <= idle {
		t.Errorf("fragmentation-aware: hole %d, idle GPU %d; want the hole higher", hole, idle)
	}
	// For whole GPUs: taking a GPU from a node that is already broken up
	// beats breaking up an untouched 8-GPU node.
	c2 := newCluster(t).node("broken", 8, 80, 8).node("pristine", 8, 80, 8)
	c2.share("broken", 0, 40)
	if b, p := score(t, frag, gpus(1), c2.ni("broken")), score(t, frag, gpus(1), c2.ni("pristine")); b <= p {
		t.Errorf("fragmentation-aware: broken %d, pristine %d; want broken higher", b, p)
	}
}

func TestNewPolicy(t *testing.T) {
	tests := []struct {
		give     string
		giveW    placement.Workload
		wantName string
		wantErr  string
	}{
		{"", nil, placement.Binpack, ""},
		{"binpack", nil, placement.Binpack, ""},
		{"spread", nil, placement.Spread, ""},
		{"fragmentation-aware", nil, placement.FragmentationAware, ""},
		{"fragmentation-aware", placement.Workload{{GPUs: 1, Weight: 1}}, placement.FragmentationAware, ""},
		{"fragmentation-aware", placement.Workload{{GPUs: 1, Milli: 5, Weight: 1}}, "", "set exactly one of gpus"},
		{"most-allocated", nil, "", `policy "most-allocated" is unknown; use one of [binpack spread fragmentation-aware`},
	}
	for _, tc := range tests {
		p, err := placement.NewPolicy(tc.give, tc.giveW)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewPolicy(%q) error = %v, want %q", tc.give, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p.Name() != tc.wantName {
			t.Errorf("NewPolicy(%q) = %v, %v", tc.give, p, err)
		}
	}
	for _, name := range placement.PolicyNames {
		if p, err := placement.NewPolicy(name, nil); err != nil || p.Name() != name {
			t.Errorf("NewPolicy(%q) = %v, %v", name, p, err)
		}
	}
	for _, name := range []string{placement.Binpack, placement.Spread, placement.FragmentationAware} {
		if !slices.Contains(placement.PolicyNames, name) {
			t.Errorf("PolicyNames %v lacks %q", placement.PolicyNames, name)
		}
	}
}

func TestWorkloadValidate(t *testing.T) {
	tests := []struct {
		name    string
		give    placement.Workload
		wantErr string
	}{
		{"default", placement.DefaultWorkload(), ""},
		{"empty", nil, ""},
		{"zero weight", placement.Workload{{Milli: 500}}, ""},
		{"negative weight", placement.Workload{{GPUs: 1, Weight: -1}}, "workload[0].weight: -1 is not a non-negative number"},
		{"NaN weight", placement.Workload{{GPUs: 1, Weight: math.NaN()}}, "workload[0].weight"},
		{"Inf weight", placement.Workload{{GPUs: 1, Weight: math.Inf(1)}}, "workload[0].weight"},
		{"negative GPUs", placement.Workload{{GPUs: 1, Weight: 1}, {GPUs: -1, Weight: 1}}, "must not be negative"},
		{"neither", placement.Workload{{Weight: 1}}, "set exactly one of gpus"},
		{"both", placement.Workload{{GPUs: 1, Milli: 1, Weight: 1}}, "set exactly one of gpus"},
		{"milli of a whole GPU", placement.Workload{{Milli: 1000, Weight: 1}}, "workload[0].milli: 1000 is a whole GPU or more; write gpus instead"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.give.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestFragmentation(t *testing.T) {
	tests := []struct {
		name string
		w    placement.Workload
		free []float64
		want float64
	}{
		{"1-GPU pods use idle GPUs, not partial ones", placement.Workload{{GPUs: 1, Weight: 1}}, []float64{1, 0.5, 0}, 0.5},
		{"2-GPU pods find no 2 idle GPUs", placement.Workload{{GPUs: 2, Weight: 1}}, []float64{1, 0.5}, 1.5},
		{"share larger than any free part", placement.Workload{{Milli: 600, Weight: 1}}, []float64{0.5, 0.3}, 0.8},
		{"share uses the big part only", placement.Workload{{Milli: 400, Weight: 1}}, []float64{0.5, 0.3}, 0.3},
		{"weighted", placement.Workload{{GPUs: 1, Weight: 0.5}, {Milli: 400, Weight: 0.5}}, []float64{1, 0.3}, 0.3},
		{"nothing free", placement.DefaultWorkload(), []float64{0, 0}, 0},
		{"all idle", placement.DefaultWorkload(), []float64{1, 1, 1, 1, 1, 1, 1, 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.Fragmentation(tc.free); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Fragmentation(%v) = %v, want %v", tc.free, got, tc.want)
			}
		})
	}
}

func TestToExtenderScore(t *testing.T) {
	tests := []struct {
		give, max, want int64
	}{
		{-5, 10, 0}, {0, 10, 0}, {1, 10, 0}, {placement.MaxScore / 10, 10, 1},
		{placement.MaxScore - 1, 10, 9}, {placement.MaxScore, 10, 10}, {placement.MaxScore * 3, 10, 10},
		{placement.MaxScore / 2, 100, 50},
	}
	for _, tc := range tests {
		if got := placement.ToExtenderScore(tc.give, tc.max); got != tc.want {
			t.Errorf("ToExtenderScore(%d, %d) = %d, want %d", tc.give, tc.max, got, tc.want)
		}
	}
	// Monotone: better never maps below worse, everything lands in 0..max.
	r := rand.New(rand.NewPCG(1, 2))
	for _, maxP := range []int64{1, 10, 100} {
		scores := []int64{-1, 0, placement.MaxScore, placement.MaxScore + 1}
		for range 2000 {
			scores = append(scores, r.Int64N(placement.MaxScore+1))
		}
		slices.Sort(scores)
		prev := int64(-1)
		for _, s := range scores {
			got := placement.ToExtenderScore(s, maxP)
			if got < prev || got < 0 || got > maxP {
				t.Fatalf("ToExtenderScore(%d, %d) = %d after %d", s, maxP, got, prev)
			}
			prev = got
		}
	}
}

func TestRank(t *testing.T) {
	names := []string{"b", "a", "c", "d"}
	got := placement.Rank(names, []int64{5, 5, 9, 0})
	if diff := cmp.Diff([]int{2, 1, 0, 3}, got); diff != "" {
		t.Errorf("Rank() (-want +got):\n%s", diff)
	}
	if got := placement.Rank(nil, nil); len(got) != 0 {
		t.Errorf("Rank(nil) = %v", got)
	}
}

// FuzzWorkloadValidate: Validate never panics; a valid workload builds a
// policy whose scores stay in 0..MaxScore and whose fragmentation is finite
// and never more than the free capacity; an invalid one names its entry.
func FuzzWorkloadValidate(f *testing.F) {
	f.Add(1, 0, 1.0, 0, 500, 0.5)
	f.Add(0, 250, 0.1, 8, 0, 0.06)
	f.Add(-1, 0, 1.0, 0, 0, 0.0)
	f.Add(1, 1, 1.0, 0, 1000, math.Inf(1))
	f.Add(0, 999, 0.0, 0, 1, 0.0)
	c := newCluster(&testing.T{}).node("n", 8, 80, 4)
	c.share("n", 0, 30)
	c.whole("n", []int{4, 5})
	ni := c.ni("n")
	f.Fuzz(func(t *testing.T, g1, m1 int, w1 float64, g2, m2 int, w2 float64) {
		w := placement.Workload{{GPUs: g1, Milli: m1, Weight: w1}, {GPUs: g2, Milli: m2, Weight: w2}}
		err := w.Validate()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "workload[") {
				t.Fatalf("error %q does not name the entry", err)
			}
			if _, perr := placement.NewPolicy(placement.FragmentationAware, w); perr == nil {
				t.Fatalf("NewPolicy accepted an invalid workload")
			}
			return
		}
		free := []float64{1, 0.625, 1, 1, 0, 0, 1, 1}
		fr := w.Fragmentation(free)
		if math.IsNaN(fr) || fr < 0 {
			t.Fatalf("Fragmentation = %v", fr)
		}
		p, err := placement.NewPolicy(placement.FragmentationAware, w)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []placement.Request{gpus(1), gpus(2), shareGiB(10)} {
			ch, reason := placement.Fit(r, ni)
			if reason != nil {
				t.Fatal(reason)
			}
			if s := p.Score(r, ni, ch); s < 0 || s > placement.MaxScore {
				t.Fatalf("score %d outside 0..%d for %+v", s, placement.MaxScore, w)
			}
		}
	})
}
