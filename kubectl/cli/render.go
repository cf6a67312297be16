package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/kubectl/report"
	"github.com/rota-sched/rota/pkg/contract"
)

// w collects writes and keeps the first error.
type lineWriter struct {
	w   io.Writer
	err error
}

func (l *lineWriter) printf(format string, args ...any) {
	if l.err == nil {
		_, l.err = fmt.Fprintf(l.w, format, args...)
	}
}

func (l *lineWriter) table(t *table, p *printer, indent string) {
	if l.err == nil {
		l.err = t.write(l.w, p, indent)
	}
}

func (p *printer) stateColor(state string) color {
	switch state {
	case report.StateOverQuota, report.StateNoQuota, report.StateNoConfig, report.GPUUnhealthy:
		return red
	case report.StateAtQuota:
		return yellow
	}
	return plain
}

func (p *printer) whyText(out io.Writer, w report.Why) error {
	lw := &lineWriter{w: out}
	kv := &table{noHeader: true}
	label := "Pod:"
	if w.Kind != "" {
		label = w.Kind + ":"
	}
	kv.row(plain, label, w.Pod+" ("+w.Phase+")")
	sc := yellow
	switch {
	case w.Placed != nil:
		sc = green
	case w.Fit != nil && w.Fit.FitsNow:
		sc = green
	case w.Fit != nil:
		sc = red
	}
	kv.row(sc, "Summary:", w.Summary)
	kv.row(plain, "Submitted:", fmt.Sprintf("%s (%s ago)", w.SubmittedAt.Format(time.RFC3339), w.Age))
	req := w.Request
	if w.RequestError != "" {
		req += ": " + w.RequestError
	}
	kv.row(plain, "Request:", req)
	kv.row(plain, "Team:", orDash(w.Team)+" ("+w.TeamSource+")")
	kv.row(p.stateColor(w.Quota.State), "Quota:", quotaLine(w.Quota))
	if q := w.Queued; q != nil {
		kv.row(yellow, "Queue:", orDash(q.Reason)+": "+orDash(q.Message))
	}
	switch {
	case w.Admitted != nil:
		kv.row(plain, "Admitted:", admittedLine(w.Admitted))
	case w.AdmissionError != "":
		kv.row(red, "Admitted:", "the admission record does not parse: "+w.AdmissionError)
	}
	if w.Placed != nil {
		kv.row(plain, "Placed:", placedLine(w.Placed))
	}
	if g := w.Gang; g != nil {
		line := fmt.Sprintf("%s: %d/%d members placed (%d created, %d pending", g.Name, g.Placed, g.Size, g.Created, g.Pending)
		if g.Missing > 0 {
			line += fmt.Sprintf(", %d not created", g.Missing)
		}
		line += ")"
		if len(g.Nodes) > 0 {
			line += " on " + strings.Join(g.Nodes, ", ")
		}
		kv.row(plain, "Gang:", line)
	}
	lw.table(kv, p, "")

	if g := w.Gang; g != nil && len(g.Members) > 0 {
		lw.printf("\nMembers:\n")
		t := &table{}
		t.row(plain, "POD", "PHASE", "NODE", "GPUS")
		for _, m := range g.Members {
			c := plain
			if m.Node == "" {
				c = yellow
			}
			t.row(c, m.Pod, m.Phase, m.Node, m.GPUs)
		}
		lw.table(t, p, "  ")
	}

	lw.printf("\nLatest refusals (events):\n")
	if len(w.Decisions) == 0 {
		lw.printf("  none\n")
	}
	for _, d := range w.Decisions {
		lw.printf("  %s by %s on %s, %s ago (x%d):\n", d.Reason, d.Source, d.Pod, d.Age, d.Count)
		if len(d.Reasons) == 0 {
			lw.printf("    %s\n", d.Message)
			continue
		}
		t := &table{}
		t.row(plain, "NODES", "REASON")
		for _, r := range d.Reasons {
			reason := r.Reason
			if r.Example != "" {
				reason += " (e.g. " + r.Example + ")"
			}
			t.row(plain, fmt.Sprint(r.Nodes), reason)
		}
		if d.Reason == report.ReasonGPUUnschedulable {
			lw.printf("    0/%d nodes fit the GPU request:\n", d.Nodes)
		} else {
			lw.printf("    0/%d nodes are available:\n", d.Nodes)
		}
		lw.table(t, p, "    ")
		if d.Preemption != "" {
			lw.printf("    preemption: %s\n", d.Preemption)
		}
	}

	if e := w.Extender; e != nil {
		lw.printf("\nExtender decisions (%s):\n", e.URL)
		if e.Error != "" {
			lw.printf("  %s\n", p.paint(yellow, e.Error))
		}
		for _, d := range e.Decisions {
			line := fmt.Sprintf("%s %s %s", d.Time.UTC().Format(time.RFC3339), d.Verb, d.Outcome)
			if d.Nodes > 0 {
				line += fmt.Sprintf(" (%d of %d nodes fit)", d.Fits, d.Nodes)
			}
			if d.Node != "" {
				line += " node " + d.Node
			}
			if d.Gang != "" {
				line += " gang " + d.Gang
			}
			lw.printf("  %s\n", line)
			if d.Message != "" {
				lw.printf("    %s\n", d.Message)
			}
		}
	}

	if f := w.Fit; f != nil {
		lw.printf("\nPlacement now (%d nodes with a GPU topology, %d fit):\n", f.Nodes, f.Fitting)
		if f.Where != "" {
			lw.printf("  %s\n", p.paint(green, f.Where))
		}
		if len(f.Reasons) > 0 {
			t := &table{}
			t.row(plain, "NODES", "REASON", "EXAMPLE")
			for _, r := range f.Reasons {
				t.row(plain, fmt.Sprint(r.Nodes), r.Reason, r.Example)
			}
			lw.table(t, p, "  ")
		}
		if len(f.Hints) > 0 {
			lw.printf("\nWhat would make it fit:\n")
			for _, h := range f.Hints {
				lw.printf("  - %s\n", h)
			}
		}
	}
	if len(w.Notes) > 0 {
		lw.printf("\nNotes:\n")
		for _, n := range w.Notes {
			lw.printf("  - %s\n", n)
		}
	}
	return lw.err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func quotaLine(q report.TeamQuota) string {
	if !q.Configured {
		if q.Note != "" {
			return q.State + ": " + q.Note
		}
		return q.State
	}
	s := fmt.Sprintf("%s: guarantee %s, may borrow %s; running %s, pending %s; room for %s more",
		q.State, q.Guarantee, q.BorrowLimit, q.Running, q.Pending, q.Headroom)
	if q.Note != "" {
		s += " (" + q.Note + ")"
	}
	return s
}

// admittedLine says when and to which team the queue admitted a pod, how
// long it waited, where its GPUs were held and which nodes it was narrowed
// to.
func admittedLine(a *contract.Admission) string {
	team := orDash(a.Team)
	if a.Model != "" {
		team += " (" + a.Model + ")"
	}
	line := fmt.Sprintf("to team %s at %s", team, a.AdmittedAt.Format(time.RFC3339))
	if a.QueuedFor != "" {
		line += " after " + a.QueuedFor + " in the queue"
	}
	if h := a.Hold; h != nil {
		idx := make([]string, len(h.GPUs))
		for i, g := range h.GPUs {
			idx[i] = fmt.Sprint(g.Index)
		}
		line += fmt.Sprintf("; GPUs held on %s (GPU %s) until %s", h.Node, strings.Join(idx, ","), a.HoldUntil.Format(time.RFC3339))
	}
	if len(a.NarrowedTo) > 0 {
		line += "; narrowed to " + strings.Join(a.NarrowedTo, ", ")
	}
	return line
}

func placedLine(pl *report.Placed) string {
	idx := make([]string, len(pl.GPUs))
	for i, g := range pl.GPUs {
		idx[i] = fmt.Sprint(g)
	}
	if pl.Whole {
		return fmt.Sprintf("%s GPUs %s (whole)", pl.Node, strings.Join(idx, ","))
	}
	return fmt.Sprintf("%s GPU %s (%s share)", pl.Node, strings.Join(idx, ","), pl.MemoryMiB)
}

func (p *printer) nodesText(out io.Writer, r report.Nodes) error {
	lw := &lineWriter{w: out}
	t := &table{}
	pooled := len(r.Pools) > 0
	head := []string{"NODE", "LEAF", "MODEL", "GPUS", "HEALTHY", "WHOLE", "SHARED", "IDLE", "ISLANDS", "MEM USED", "MEM FREE", "FRAG", "HEALTH"}
	if pooled {
		head = slices.Insert(head, 1, "POOL")
	}
	t.row(plain, head...)
	for _, n := range r.Nodes {
		health, c := "ok", plain
		if len(n.Unhealthy) > 0 {
			health, c = strings.Join(n.Unhealthy, "; "), red
		}
		if len(n.Problems) > 0 {
			health += fmt.Sprintf("; %d ledger problem(s): kubectl rota ledger --node %s", len(n.Problems), n.Node)
			c = red
		}
		cells := []string{n.Node, n.Leaf, strings.Join(n.Models, ","), fmt.Sprint(n.GPUs), fmt.Sprint(n.Healthy), fmt.Sprint(n.Whole),
			fmt.Sprint(n.Shared), fmt.Sprint(n.Idle), fmt.Sprint(n.Islands), n.UsedMiB.String(), n.FreeMiB.String(),
			fmt.Sprintf("%.2f", n.FragmentGPUs), health}
		if n.GPUs == 0 {
			cells, c = []string{n.Node, "", "", "", "", "", "", "", "", "", "", "", strings.Join(n.Problems, "; ")}, red
		}
		if pooled {
			cells = slices.Insert(cells, 1, orDash(n.Pool))
		}
		t.row(c, cells...)
	}
	lw.table(t, p, "")
	if pooled {
		pt := &table{}
		pt.row(plain, "NODE POOL", "NODES", "GPUS", "IN USE", "MEM USED", "MEM TOTAL", "ALLOCATION", "FRAG")
		for _, u := range r.Pools {
			pt.row(plain, orDash(u.Pool), fmt.Sprint(u.Nodes), fmt.Sprint(u.GPUs), fmt.Sprint(u.Busy), u.UsedMiB.String(),
				u.MemoryMiB.String(), fmt.Sprintf("%.0f%%", 100*u.Allocation), fmt.Sprintf("%.2f", u.FragmentGPUs))
		}
		lw.printf("\n")
		lw.table(pt, p, "")
	}
	lw.printf("\n%s\n", fragLine(r.Fragmentation))
	if r.WithoutTopology > 0 {
		lw.printf("%d node(s) publish no GPU topology (no Rota GPUs there).\n", r.WithoutTopology)
	}
	for _, v := range r.LedgerViolations {
		lw.printf("%s\n", p.paint(red, "ledger violation: "+v))
	}
	return lw.err
}

func fragLine(f report.Fragmentation) string {
	return fmt.Sprintf("Fragmentation (default workload): %.2f of %.2f free GPUs are unusable fragments (%.1f%% of free)",
		f.FragmentGPUs, f.FreeGPUs, f.PercentOfFree)
}

func (p *printer) gpusText(out io.Writer, r report.GPUs) error {
	lw := &lineWriter{w: out}
	t := &table{}
	t.row(plain, "NODE", "GPU", "MODEL", "ISLAND", "NUMA", "STATE", "MEM USED", "MEM FREE", "PODS", "HEALTH")
	for _, g := range r.GPUs {
		health, c := "ok", plain
		if !g.Healthy {
			health, c = g.Reason, red
		}
		t.row(c, g.Node, fmt.Sprint(g.Index), g.Model, fmt.Sprint(g.Island), fmt.Sprint(g.NUMA), g.State,
			g.UsedMiB.String(), g.FreeMiB.String(), strings.Join(g.Pods, ","), health)
	}
	lw.table(t, p, "")
	lw.printf("\n%s\n", fragLine(r.Fragmentation))
	return lw.err
}

func (p *printer) teamsText(out io.Writer, r report.Teams) error {
	lw := &lineWriter{w: out}
	if r.QuotaError != "" {
		lw.printf("%s\n\n", p.paint(red, "quota configuration: "+r.QuotaError))
	}
	t := &table{}
	head := []string{"TEAM", "NAMESPACES", "QUOTA", "BORROW", "RUNNING", "PENDING", "ROOM", "STATE", "REJECTED"}
	pooled := slices.ContainsFunc(r.Teams, func(q report.TeamQuota) bool { return q.Pool != "" })
	if pooled {
		head = slices.Insert(head, 2, "NODE POOL")
	}
	if len(r.Groups) > 0 {
		head = slices.Insert(head, 1, "GROUP")
	}
	t.row(plain, head...)
	for _, q := range r.Teams {
		rej := ""
		if q.Rejections > 0 {
			rej = fmt.Sprintf("%d (last %s ago)", q.Rejections, q.LastRejectedAge)
		}
		quota, borrow, room := "", "", ""
		if q.Configured {
			quota, borrow, room = q.Guarantee.String(), q.BorrowLimit.String(), q.Headroom.String()
		}
		cells := []string{orDash(q.Team), strings.Join(q.Namespaces, ","), quota, borrow,
			q.Running.String(), q.Pending.String(), room, q.State, rej}
		if pooled {
			cells = slices.Insert(cells, 2, orDash(q.Pool))
		}
		if len(r.Groups) > 0 {
			cells = slices.Insert(cells, 1, orDash(q.Group))
		}
		t.row(p.stateColor(q.State), cells...)
	}
	lw.table(t, p, "")
	if len(r.Groups) > 0 {
		g := &table{}
		g.row(plain, "GROUP", "POOL", "TEAMS", "BORROWED", "FROM POOL", "FROM CHILDREN", "FROM ABOVE", "ABOVE LIMIT", "LENT", "LEND LIMIT")
		for _, q := range r.Groups {
			limit := "none"
			if q.BorrowLimit != nil {
				limit = q.BorrowLimit.String()
			}
			g.row(plain, strings.Repeat("  ", q.Depth)+q.Group, q.Pool.String(), strings.Join(q.Teams, ","), q.Borrowed.String(),
				q.FromPool.String(), q.FromLent.String(), q.Above.String(), limit, q.Lent.String(), q.LendLimit.String())
		}
		lw.printf("\nQuota groups (borrowing is lent by the nearest pool first):\n")
		lw.table(g, p, "")
	}
	if r.QuotaError == "" {
		lw.printf("\nShared pool: %s; borrowed %s; free %s. Teams without an entry: %s.\n",
			r.SharedPool, r.SharedPoolUsed, r.SharedPoolFree, r.UnknownTeams)
	}
	first := true
	for _, q := range r.Teams {
		if q.Note != "" && q.State != report.StateWithin {
			if first {
				lw.printf("\n")
				first = false
			}
			lw.printf("%s %s: %s\n", orDash(q.Team), q.State, q.Note)
		}
	}
	for _, q := range r.Teams {
		if q.LastRejection != "" {
			lw.printf("%s last rejected: %s\n", orDash(q.Team), q.LastRejection)
		}
	}
	return lw.err
}

func (p *printer) ledgerText(out io.Writer, l report.NodeLedger) error {
	lw := &lineWriter{w: out}
	lw.printf("Node %s: %d allocation(s) rebuilt from assignment annotations\n\n", l.Node, len(l.Entries))
	t := &table{}
	t.row(plain, "POD", "GPUS", "KIND", "MEMORY/GPU", "GANG", "PRIORITY", "PREEMPTIBLE", "PHASE", "STATE")
	for _, e := range l.Entries {
		kind := "share"
		if e.Whole {
			kind = "whole"
		}
		idx := make([]string, len(e.GPUs))
		for i, g := range e.GPUs {
			idx[i] = fmt.Sprint(g)
		}
		gang := e.Gang
		if gang != "" && e.GangSize > 0 {
			gang += fmt.Sprintf(" (%d)", e.GangSize)
		}
		t.row(plain, e.Pod, strings.Join(idx, ","), kind, e.MemoryMiB.String(), gang, fmt.Sprint(e.Priority),
			yesNo(e.Preemptible), e.Phase, e.State)
	}
	lw.table(t, p, "")
	lw.printf("\n")
	g := &table{}
	g.row(plain, "GPU", "STATE", "MEM USED", "MEM FREE", "PODS", "HEALTH")
	for _, u := range l.GPUs {
		health, c := "ok", plain
		if !u.Healthy {
			health, c = u.Reason, red
		}
		g.row(c, fmt.Sprint(u.Index), u.State, u.UsedMiB.String(), u.FreeMiB.String(), strings.Join(u.Pods, ","), health)
	}
	lw.table(g, p, "")
	if len(l.Violations) == 0 {
		lw.printf("\n%s\n", p.paint(green, "No violations: every assignment on this node is accounted, memory fits, whole GPUs are exclusive."))
		return lw.err
	}
	lw.printf("\n%s\n", p.paint(red, fmt.Sprintf("%d violation(s):", len(l.Violations))))
	for _, v := range l.Violations {
		lw.printf("  - %s\n", v)
	}
	return lw.err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// queueText prints the queued pods as the API shows them.
func (p *printer) queueText(out io.Writer, q report.Queue) error {
	lw := &lineWriter{w: out}
	if len(q.Pods) == 0 {
		lw.printf("no pods are queued\n")
		return lw.err
	}
	t := &table{}
	t.row(plain, "TEAM", "POD", "PRIORITY", "WAITING", "REASON", "WHERE IT STANDS")
	for _, qp := range q.Pods {
		t.row(plain, orDash(qp.Team), qp.Pod, fmt.Sprint(qp.Priority), qp.Waiting, orDash(qp.Reason), orDash(qp.Message))
	}
	lw.table(t, p, "")
	return lw.err
}

// liveQueueText prints the queue controller's live view.
func (p *printer) liveQueueText(out io.Writer, v report.LiveQueue) error {
	lw := &lineWriter{w: out}
	tt := &table{}
	nested := len(v.Groups) > 0
	head := []string{"TEAM", "QUEUED", "ADMITTED GPUS", "ADMITTED GPU MEMORY", "DOMINANT SHARE"}
	if nested {
		head = slices.Insert(head, 1, "GROUP")
	}
	tt.row(plain, head...)
	for _, ts := range v.Teams {
		cells := []string{ts.Team, fmt.Sprint(ts.Queued), fmt.Sprint(ts.GPUs), fmt.Sprintf("%d MiB", ts.MemoryMiB), fmt.Sprintf("%.3f", ts.Share)}
		if nested {
			cells = slices.Insert(cells, 1, orDash(ts.Group))
		}
		tt.row(plain, cells...)
	}
	lw.table(tt, p, "")
	if nested {
		lw.printf("\n")
		lw.table(queueTree(v), p, "")
	}
	if len(v.Pods) == 0 {
		lw.printf("\nno pods are queued\n")
		return lw.err
	}
	lw.printf("\n")
	pt := &table{}
	pt.row(plain, "TEAM", "POSITION", "POD", "WAITING", "REASON", "EXPECTED START", "DEADLINE", "WHERE IT STANDS")
	for _, qp := range v.Pods {
		start := "-"
		switch {
		case qp.ExpectedStart != nil:
			start = qp.ExpectedStart.UTC().Format("2006-01-02 15:04 MST")
		case qp.Reservation != "":
			start = "unknown"
		}
		pt.row(plain, qp.Team, fmt.Sprintf("%d/%d", qp.Position, qp.Of), qp.Pod,
			(time.Duration(qp.Waiting) * time.Second).String(), qp.Reason, start, deadlineCell(qp), qp.Message)
	}
	lw.table(pt, p, "")
	return lw.err
}

// deadlineCell says where a queued pod stands against its deadline: the
// latest it may start, marked when it went ahead for it or missed it.
func deadlineCell(qp contract.QueuePosition) string {
	if qp.LatestStart == nil {
		return "-"
	}
	at := "start by " + qp.LatestStart.UTC().Format("2006-01-02 15:04 MST")
	switch qp.Deadline {
	case "missed":
		return "MISSED (" + at + ")"
	case "urgent":
		return "urgent: " + at
	}
	return at
}

// queueTree is the live view's quota tree, a group a row, indented under
// its parent: its pool, what its subtree borrows and from where, its
// borrow limit, what it lends, and what its subtree has admitted and
// queued.
func queueTree(v report.LiveQueue) *table {
	parent := map[string]string{}
	for _, g := range v.Groups {
		parent[g.Group] = g.Parent
	}
	type sums struct {
		queued int
		gpus   int64
	}
	sub := map[string]sums{}
	for _, ts := range v.Teams {
		for g, depth := ts.Group, 0; g != "" && depth <= len(v.Groups); g, depth = parent[g], depth+1 {
			s := sub[g]
			s.queued += ts.Queued
			s.gpus += ts.GPUs
			sub[g] = s
		}
	}
	t := &table{}
	t.row(plain, "QUOTA GROUP", "POOL", "ADMITTED", "BORROWED", "FROM POOL", "FROM CHILDREN", "FROM ABOVE", "ABOVE LIMIT", "LENT", "QUEUED PODS")
	for _, g := range v.Groups {
		limit := "none"
		if g.BorrowLimitGPUs != nil {
			limit = fmt.Sprint(*g.BorrowLimitGPUs)
		}
		s := sub[g.Group]
		t.row(plain, strings.Repeat("  ", g.Depth)+g.Group, fmt.Sprint(g.PoolGPUs), fmt.Sprint(s.gpus), fmt.Sprint(g.BorrowedGPUs),
			fmt.Sprint(g.FromPoolGPUs), fmt.Sprint(g.FromLentGPUs), fmt.Sprint(g.AboveGPUs), limit, fmt.Sprint(g.LentGPUs), fmt.Sprint(s.queued))
	}
	return t
}
