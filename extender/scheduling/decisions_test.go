package scheduling

import (
	"slices"
	"testing"
	"time"

	"github.com/rota-sched/rota/pkg/placement"
)

func TestRefusedFor(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newDecisionLog(10, time.Minute)
	closed := []placement.ReasonCount{{Code: placement.Closed, Nodes: 1}}
	full := []placement.ReasonCount{{Code: placement.Code("NoGPUs"), Nodes: 1}}
	l.add("ns/closed-old", Decision{Time: now.Add(-2 * time.Minute), Verb: "filter", Outcome: "nofit", Reasons: closed})
	l.add("ns/closed", Decision{Time: now.Add(-time.Second), Verb: "filter", Outcome: "nofit", Reasons: closed})
	l.add("ns/full", Decision{Time: now, Verb: "filter", Outcome: "nofit", Reasons: full})
	// Refused while closed, then bound: its latest decision is the bind.
	l.add("ns/bound", Decision{Time: now, Verb: "filter", Outcome: "nofit", Reasons: closed})
	l.add("ns/bound", Decision{Time: now, Verb: "bind", Outcome: "bound"})
	l.add("ns/closed-2", Decision{Time: now, Verb: "filter", Outcome: "nofit", Reasons: append(slices.Clone(full), closed...)})
	got := l.refusedFor(placement.Closed, now, 10)
	if want := []string{"ns/closed-2", "ns/closed"}; !slices.Equal(got, want) {
		t.Fatalf("refusedFor = %v, want %v (latest first; expired, other reasons and bound pods left out)", got, want)
	}
	if got := l.refusedFor(placement.Closed, now, 1); len(got) != 1 {
		t.Fatalf("refusedFor with max 1 = %v", got)
	}
}
