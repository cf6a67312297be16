package queue

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
)

// roomHold is room the queue freed for a waiting workload, by moves or by
// reclaim: its claims hold it in the ledger until the workload is
// admitted, or until passes, so that what frees as the evicted pods stop
// goes to the workload it was freed for and not to the next in line.
type roomHold struct {
	claims []ledger.Claim
	until  time.Time
	// what says how the room was freed, for the workload's condition.
	what string
}

// keepHolds drops the holds of workloads no longer queued (admitted or
// gone) and of those past their time.
func (c *Controller) keepHolds(byKey map[string]*workload, now time.Time) {
	for k, h := range c.holds {
		if _, queued := byKey[k]; !queued || !now.Before(h.until) {
			delete(c.holds, k)
		}
	}
}

// tellHolds adds the held room to the waiting workloads' Queued condition.
func (c *Controller) tellHolds(res pkgqueue.Result) {
	for k, h := range c.holds {
		if st, ok := res.Waiting[k]; ok {
			nodes := make([]string, len(h.claims))
			for i, cl := range h.claims {
				nodes[i] = cl.Node
			}
			st.Message += fmt.Sprintf("; %s, and the room is held for it on %s until %s",
				h.what, strings.Join(nodes, ", "), h.until.UTC().Format(time.RFC3339))
			res.Waiting[k] = st
		}
	}
}

// heldClaims are the ledger claims of the holds, by node.
func (c *Controller) heldClaims() []ledger.Claim {
	var out []ledger.Claim
	for _, h := range c.holds {
		out = append(out, h.claims...)
	}
	slices.SortFunc(out, func(a, b ledger.Claim) int { return strings.Compare(a.Node, b.Node) })
	return out
}
