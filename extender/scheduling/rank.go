package scheduling

import (
	"slices"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// NoFit marks a node that does not fit in the scores RankScores reads.
const NoFit int64 = -1

// RankScores maps the engine's fine-grained scores (0..placement.MaxScore)
// onto kube-scheduler's extender range 0..maxPriority by rank of distinct
// score, so that different scores never collapse into a tie:
//
//   - the distinct scores of the fitting nodes are sorted, best first, into
//     classes; nodes with equal fine scores share a class (a genuine tie
//     under the policy);
//   - class i (0 = best) gets maxPriority - i, so the best class gets
//     maxPriority, the next maxPriority-1, ...; classes past the
//     maxPriority-th all get 0 (only the best few matter: the scheduler
//     picks the highest total);
//   - nodes that do not fit (NoFit) get 0.
//
// Example (maxPriority 10): fine scores 700000, 699990, 700000, 100, NoFit
// give 10, 9, 10, 8, 0. placement.ToExtenderScore (linear) would give
// 7, 6, 7, 0, 0 and, for 700000 vs 700001, a tie.
//
// Rank is not proportional: the gap between two classes is always one
// point, whatever their fine scores. The configuration's weight decides
// how much one rank is worth against kube-scheduler's own plugins.
func RankScores(scores []int64, maxPriority int64) []int64 {
	distinct := make([]int64, 0, len(scores))
	for _, s := range scores {
		if s >= 0 {
			distinct = append(distinct, s)
		}
	}
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	slices.Reverse(distinct)
	out := make([]int64, len(scores))
	for i, s := range scores {
		if s < 0 {
			continue
		}
		class, _ := slices.BinarySearchFunc(distinct, s, func(a, b int64) int {
			// distinct is descending
			switch {
			case a > b:
				return -1
			case a < b:
				return 1
			}
			return 0
		})
		out[i] = max(maxPriority-int64(class), extenderv1.MinExtenderPriority)
	}
	return out
}
