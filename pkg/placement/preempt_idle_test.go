package placement_test

import (
	"slices"
	"testing"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// idle marks a pod as the device plugin's idle tracker does.
func idle(a *ledger.Allocation) { a.Idle = true }

// TestVictimsPreferIdle: among pods of equal priority, preemption takes the
// ones marked idle first; priority still comes first.
func TestVictimsPreferIdle(t *testing.T) {
	tests := []struct {
		name  string
		build func(c *cluster)
		give  placement.Request
		want  []string
	}{
		{"whole GPUs: the idle pod of equal priority", func(c *cluster) {
			c.whole("n", []int{0}, prio(0))
			c.whole("n", []int{1}, prio(0), idle) // pod-02
			c.whole("n", []int{2}, prio(0))
			c.whole("n", []int{3}, prio(0))
		}, gpus(1), []string{"pod-02"}},
		{"whole GPUs: an idle pod that holds more still goes first", func(c *cluster) {
			c.share("n", 0, 70, prio(0))
			c.whole("n", []int{1, 2}, prio(0), idle) // pod-02
			c.whole("n", []int{3}, prio(0))
		}, gpus(1), []string{"pod-02"}},
		{"whole GPUs: lower priority beats idle", func(c *cluster) {
			c.whole("n", []int{0}, prio(1), idle)
			c.whole("n", []int{1}, prio(0)) // pod-02
			c.whole("n", []int{2}, prio(1), idle)
			c.whole("n", []int{3}, prio(1), idle)
		}, gpus(1), []string{"pod-02"}},
		{"share: the GPU whose one victim is idle", func(c *cluster) {
			c.share("n", 0, 70, prio(0))
			c.share("n", 1, 70, prio(0), idle) // pod-02
			c.whole("n", []int{2}, prio(0))
			c.whole("n", []int{3}, prio(0))
		}, shareGiB(60), []string{"pod-02"}},
		{"share: on one GPU the idle pod of two", func(c *cluster) {
			c.whole("n", []int{1}, prio(9))
			c.whole("n", []int{2}, prio(9))
			c.whole("n", []int{3}, prio(9))
			c.share("n", 0, 40, prio(0))
			c.share("n", 0, 40, prio(0), idle) // pod-05
		}, shareGiB(30), []string{"pod-05"}},
		{"share: busy lower priority beats idle", func(c *cluster) {
			c.whole("n", []int{1}, prio(9))
			c.whole("n", []int{2}, prio(9))
			c.whole("n", []int{3}, prio(9))
			c.share("n", 0, 40, prio(1), idle)
			c.share("n", 0, 40, prio(0)) // pod-05
		}, shareGiB(30), []string{"pod-05"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t).node("n", 4, 80, 2)
			tc.build(c)
			ni := c.ni("n")
			got, ok := placement.Victims(tc.give, ni, anyPod)
			if !ok {
				t.Fatalf("Victims() found no set")
			}
			if g := uids(got); !slices.Equal(g, tc.want) {
				t.Errorf("Victims() = %v, want %v", g, tc.want)
			}
			checkVictims(t, tc.give, ni, got, anyPod)
		})
	}
}
