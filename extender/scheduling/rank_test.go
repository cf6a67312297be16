package scheduling

import (
	"github.com/google/go-cmp/cmp"

	"testing"
)

func TestRankScores(t *testing.T) {
	tests := []struct {
		name       string
		giveScores []int64
		want       []int64
	}{
		{"empty", nil, []int64{}},
		{"near scores stay apart", []int64{700000, 699990, 700000, 100, NoFit}, []int64{10, 9, 10, 8, 0}},
		{"one point apart", []int64{500001, 500000}, []int64{10, 9}},
		{"all equal", []int64{3, 3, 3}, []int64{10, 10, 10}},
		{"zero is a score", []int64{0, NoFit, 5}, []int64{9, 0, 10}},
		{"classes past ten get 0", []int64{12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, []int64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RankScores(tc.giveScores, 10)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RankScores(%v) (-want +got):\n%s", tc.giveScores, diff)
			}
		})
	}
}

// TestRankScoresKeepsOrder: a better fine score never maps below a worse
// one, and distinct scores among the best ten classes never tie.
func TestRankScoresKeepsOrder(t *testing.T) {
	scores := []int64{5, 900, 901, 17, 17, 1_000_000, 0, 42, 999_999, 3, 4, 6}
	got := RankScores(scores, 10)
	for i := range scores {
		for j := range scores {
			if scores[i] > scores[j] && got[i] < got[j] {
				t.Errorf("score %d -> %d below score %d -> %d", scores[i], got[i], scores[j], got[j])
			}
			if scores[i] != scores[j] && got[i] == got[j] && got[i] > 0 {
				t.Errorf("distinct scores %d and %d tie at %d", scores[i], scores[j], got[i])
			}
		}
	}
}
