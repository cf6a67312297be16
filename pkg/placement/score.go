package placement

import (
	"fmt"
	"math"
	"sort"

	"github.com/rota-sched/rota/pkg/ledger"
)

// MaxScore is the top of the engine's fine-grained node score. The extender
// maps it onto kube-scheduler's 0..10 range (see ToExtenderScore).
const MaxScore int64 = 1_000_000

// Policy scores a feasible choice on a node: higher is better.
type Policy interface {
	Name() string
	Score(r Request, ni *ledger.NodeInfo, c Choice) int64
}

// Policy names accepted by NewPolicy.
const (
	Binpack            = "binpack"
	Spread             = "spread"
	FragmentationAware = "fragmentation-aware"
	// FGD is the published Fragmentation Gradient Descent policy (ATC'23),
	// kept as the reference the fragmentation-aware policy is measured against.
	FGD               = "fgd"
	DefaultPolicyName = Binpack
)

// PolicyNames lists the policies NewPolicy builds.
var PolicyNames = []string{Binpack, Spread, FragmentationAware, FGD}

// NewPolicy builds a policy by name. The workload is used by the
// fragmentation-aware policy (nil: DefaultWorkload).
func NewPolicy(name string, w Workload) (Policy, error) {
	switch name {
	case Binpack, "":
		return binpack{}, nil
	case Spread:
		return spread{}, nil
	case FragmentationAware:
		if len(w) == 0 {
			w = DefaultWorkload()
		}
		if err := w.Validate(); err != nil {
			return nil, err
		}
		return newFragAware(w.normalized()), nil
	case FGD:
		if len(w) == 0 {
			w = DefaultWorkload()
		}
		if err := w.Validate(); err != nil {
			return nil, err
		}
		return &fgd{w: w.normalized()}, nil
	}
	return nil, fmt.Errorf("policy %q is unknown; use one of %v", name, PolicyNames)
}

// usedFraction is the share of the node's GPU capacity in use after c.
func usedFraction(ni *ledger.NodeInfo, c Choice) float64 {
	total := float64(ni.Node.TotalMemoryMiB())
	if total == 0 {
		return 0
	}
	used := float64(ni.UsedMiB())
	for _, s := range c.Slots {
		if c.Whole {
			used += float64(ni.Node.GPUs[s].MemoryMiB)
		} else {
			used += float64(c.MemoryMiB)
		}
	}
	return math.Min(used/total, 1)
}

// gpuTightness is how full the chosen GPUs are after c (1: exactly full).
func gpuTightness(ni *ledger.NodeInfo, c Choice) float64 {
	if c.Whole || len(c.Slots) == 0 {
		return 1
	}
	s := c.Slots[0]
	g := ni.Node.GPUs[s]
	return float64(ni.Use[s].UsedMiB+c.MemoryMiB) / float64(g.MemoryMiB)
}

// binpack fills nodes, then GPUs, before opening new ones:
// score = MaxScore * (0.7 * node use after + 0.3 * chosen GPU use after).
type binpack struct{}

func (binpack) Name() string { return Binpack }
func (binpack) Score(_ Request, ni *ledger.NodeInfo, c Choice) int64 {
	return int64(float64(MaxScore) * (0.7*usedFraction(ni, c) + 0.3*gpuTightness(ni, c)))
}

// spread prefers the emptiest node; on the node, Fit's best-fit GPU choice
// still keeps shares together.
type spread struct{}

func (spread) Name() string { return Spread }
func (spread) Score(_ Request, ni *ledger.NodeInfo, c Choice) int64 {
	return int64(float64(MaxScore) * (1 - usedFraction(ni, c)))
}

// ToExtenderScore maps a fine-grained score onto kube-scheduler's extender
// range 0..maxPriority, keeping order (equal inputs map to equal outputs,
// better never maps below worse).
func ToExtenderScore(s int64, maxPriority int64) int64 {
	if s <= 0 {
		return 0
	}
	if s >= MaxScore {
		return maxPriority
	}
	return s * maxPriority / MaxScore
}

// Rank orders scored nodes best first: higher score, then the node name
// (deterministic ties, so the simulator and the extender agree).
func Rank(names []string, scores []int64) []int {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		ia, ib := idx[a], idx[b]
		if scores[ia] != scores[ib] {
			return scores[ia] > scores[ib]
		}
		return names[ia] < names[ib]
	})
	return idx
}
