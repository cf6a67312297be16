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
