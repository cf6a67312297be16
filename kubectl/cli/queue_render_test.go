package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestLiveQueueTextExpectedStart(t *testing.T) {
	start := time.Date(2026, 12, 2, 14, 40, 0, 0, time.UTC)
	v := contract.QueueView{Leader: true, Teams: []contract.QueueTeam{{Team: "ml", Queued: 3}},
		Pods: []contract.QueuePosition{
			{Pod: "ml/big-0", Team: "ml", Position: 1, Of: 3, Reason: "Room", Message: "room held: ...",
				Reservation: "16 GPUs held on 2 node(s) of tier 0 leaf-a", ExpectedStart: &start},
			{Pod: "ml/wide-0", Team: "ml", Position: 2, Of: 3, Reason: "Room", Reservation: "8 GPUs held on 1 node(s) of node n3"},
			{Pod: "ml/small", Team: "ml", Position: 3, Of: 3, Reason: "Room"},
		}}
	var b bytes.Buffer
	if err := (&printer{out: &b}).liveQueueText(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"EXPECTED START", "2026-12-02 14:40 UTC", "unknown"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[len(lines)-2], " - ") {
		t.Errorf("a pod without a reservation shows no dash for its start:\n%s", out)
	}
}

func TestLiveQueueTextDeadline(t *testing.T) {
	ls := time.Date(2026, 12, 6, 18, 30, 0, 0, time.UTC)
	v := contract.QueueView{Leader: true, Teams: []contract.QueueTeam{{Team: "ml", Queued: 3}},
		Pods: []contract.QueuePosition{
			{Pod: "ml/soon", Team: "ml", Position: 1, Of: 3, Reason: "Room", LatestStart: &ls, Deadline: "urgent"},
			{Pod: "ml/gone", Team: "ml", Position: 2, Of: 3, Reason: "Room", LatestStart: &ls, Deadline: "missed"},
			{Pod: "ml/calm", Team: "ml", Position: 3, Of: 3, Reason: "Room", LatestStart: &ls},
		}}
	var b bytes.Buffer
	if err := (&printer{out: &b}).liveQueueText(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"DEADLINE", "urgent: start by 2026-12-06 18:30 UTC", "MISSED (start by 2026-12-06 18:30 UTC)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// In a tree of groups the live queue shows each team's group and the tree:
// per group, its pool, what its subtree admitted and borrows and from
// where, and its subtree's queued pods.
func TestLiveQueueTextTree(t *testing.T) {
	limit := int64(0)
	v := contract.QueueView{Leader: true,
		Groups: []contract.QueueGroup{
			{Group: "dept", PoolGPUs: 2, BorrowedGPUs: 3, FromPoolGPUs: 2, FromLentGPUs: 1, BorrowLimitGPUs: &limit},
			{Group: "cv", Parent: "dept", Depth: 1, PoolGPUs: 2, BorrowedGPUs: 2, FromPoolGPUs: 2, LentGPUs: 1},
		},
		Teams: []contract.QueueTeam{{Team: "p1", Group: "cv", Queued: 2, GPUs: 3}, {Team: "q1", Group: "dept", Queued: 1, GPUs: 2},
			{Team: "flat", Queued: 4, GPUs: 1}}}
	var b bytes.Buffer
	if err := (&printer{out: &b}).liveQueueText(&b, v); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	// dept: pool 2, admitted 5 (p1 3 + q1 2), borrowed 3 (2 from its pool,
	// 1 from its children), limit 0, queued 3 (p1 2 + q1 1).
	if got := strings.Join(rows["dept"], " "); got != "dept 2 5 3 2 1 0 0 0 3" {
		t.Errorf("dept row %q\n%s", got, out)
	}
	if got := strings.Join(rows["cv"], " "); got != "cv 2 3 2 2 0 0 none 1 2" {
		t.Errorf("cv row %q\n%s", got, out)
	}
	if got := strings.Join(rows["p1"], " "); !strings.HasPrefix(got, "p1 cv 2 3") {
		t.Errorf("team p1 row %q lacks its group\n%s", got, out)
	}
	if got := strings.Join(rows["flat"], " "); !strings.HasPrefix(got, "flat - 4 1") {
		t.Errorf("team flat row %q\n%s", got, out)
	}
}
