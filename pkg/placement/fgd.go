package placement

import (
	"math"

	"github.com/rota-sched/rota/pkg/ledger"
)

// fgd is Fragmentation Gradient Descent as published (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23): place the pod where the node's expected
// fragmentation (Workload.FragmentationChange) grows least. Like the
// published scheduler it scores on kube-scheduler's integer 0..100 scale,
//
//	score = floor(100 * sigmoid(before - after))   (before, after in GPUs)
//
// and reports that step on the engine's scale (score * MaxScore/100), so
// nodes whose reductions fall into the same step tie and Rank's node-name
// order decides, as the published simulator's lowest-name tie rule did.
// It is the baseline Rota's fragmentation-aware policy is measured against.
type fgd struct{ w Workload }

func (*fgd) Name() string { return FGD }

func (p *fgd) Score(r Request, ni *ledger.NodeInfo, c Choice) int64 {
	before, after := p.w.FragmentationChange(r, ni, c)
	s := int64(100 / (1 + math.Exp(after-before)))
	return s * (MaxScore / 100)
}
