package reserve

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
)

// Job is a queued job to reserve room for.
type Job struct {
	// Key is the job's key ("namespace/gang" or "namespace/pod"); Gang is
	// set for a gang.
	Key  string
	Gang bool
	// Member is what each member asks for; Members how many there are.
	Member  placement.Request
	Members int
}

// Options are one plan's inputs besides the job and the ledger.
type Options struct {
	Now time.Time
	// Tiers is the number of topology tier labels (placement.PlanGang's).
	Tiers int
	// Candidates are the nodes the job may run on (its node selector,
	// affinity and tolerations); nil: every node.
	Candidates []string
	// Exclude are nodes held for other jobs.
	Exclude map[string]bool
	// Prefer is the previous plan's domain (Plan.Domain), kept while its
	// start is at most Slack later than the best domain's.
	Prefer string
	Slack  time.Duration
}

// Plan is a reservation.
type Plan struct {
	Job string
	// Level and Where are the domain (placement.GangPlan's meaning);
	// Domain() names it.
	Level int
	Where string
	// Start is the expected start; zero when unknown (the domain waits for
	// pods with no expected end). Estimated is set when it rests on an
	// estimated end.
	Start     time.Time
	Estimated bool
	// Missing is how many members the domain cannot hold even once every
	// pod with an expected end has left (0 when Start is known).
	Missing int
	// Claims are what to hold, one per node.
	Claims []ledger.Claim
	// WaitsFor are the pods on the held nodes that must leave first,
	// soonest first ("namespace/name ends 14:40", "(estimated)" where so).
	WaitsFor []string
}

// Domain names the plan's domain: "node n1", "tier 0 leaf-a", "cluster".
func (p Plan) Domain() string { return domainName(p.Level, p.Where) }

// Nodes returns the held nodes, sorted.
func (p Plan) Nodes() []string {
	out := make([]string, len(p.Claims))
	for i, c := range p.Claims {
		out[i] = c.Node
	}
	slices.Sort(out)
	return out
}

func domainName(level int, where string) string {
	switch {
	case level == placement.TierNode:
		return "node " + where
	case where == "cluster":
		return "cluster"
	}
	return fmt.Sprintf("tier %d %s", level, where)
}

// release is one pod leaving a node.
type release struct {
	at        time.Time
	node      int // index into domain.nodes
	uid, pod  string
	estimated bool
}

type domain struct {
	level int
	where string
	nodes []*ledger.NodeInfo
}

// outcome is one domain's evaluation.
type outcome struct {
	d         *domain
	start     time.Time
	known     bool
	estimated int
	missing   int
	state     []*ledger.NodeInfo // the nodes at start (or after every known release)
	left      []release          // the releases that happened by then
}

// Make plans a reservation for job. It returns false, with the reason,
// when there is nothing to plan: the job asks for no whole GPUs, or no
// candidate node could ever hold a member.
func Make(job Job, snap *ledger.Snapshot, o Options) (Plan, string) {
	if job.Members <= 0 || job.Member.GPUs <= 0 {
		return Plan{}, "only jobs of whole GPUs are reserved for"
	}
	job.Member.Job = job.Key
	domains := domainsOf(job, snap, o)
	var best *outcome
	var preferred *outcome
	for _, d := range domains {
		out := evaluate(job, d, o.Now)
		if out == nil {
			continue
		}
		if domainName(d.level, d.where) == o.Prefer {
			preferred = out
		}
		if best == nil || better(out, best) {
			best = out
		}
	}
	if best == nil {
		return Plan{}, "no candidate node can hold a member"
	}
	if preferred != nil && preferred != best && keep(preferred, best, o.Slack) {
		best = preferred
	}
	return best.plan(job), ""
}

// keep reports whether the previous domain p stays against the best b.
func keep(p, b *outcome, slack time.Duration) bool {
	switch {
	case p.known && b.known:
		return !p.start.After(b.start.Add(slack))
	case !p.known && !b.known:
		return p.missing <= b.missing
	}
	return false
}

// better orders outcomes as the package doc says.
func better(a, b *outcome) bool {
	if a.known != b.known {
		return a.known
	}
	if !a.known {
		if a.missing != b.missing {
			return a.missing < b.missing
		}
	} else if c := a.start.Compare(b.start); c != 0 {
		return c < 0
	}
	if a.estimated != b.estimated {
		return a.estimated < b.estimated
	}
	if a.d.level != b.d.level {
		return a.d.level < b.d.level
	}
	return a.d.where < b.d.where
}

// domainsOf groups the candidate nodes into domains.
func domainsOf(job Job, snap *ledger.Snapshot, o Options) []*domain {
	names := o.Candidates
	if names == nil {
		names = snap.Names()
	}
	var nodes []*ledger.NodeInfo
	for _, n := range names {
		if o.Exclude[n] {
			continue
		}
		if ni := snap.Node(n); ni != nil {
			nodes = append(nodes, ni)
		}
	}
	slices.SortFunc(nodes, func(a, b *ledger.NodeInfo) int { return cmp.Compare(a.Name(), b.Name()) })
	if job.Members == 1 && !job.Gang {
		out := make([]*domain, len(nodes))
		for i, ni := range nodes {
			out[i] = &domain{level: placement.TierNode, where: ni.Name(), nodes: []*ledger.NodeInfo{ni}}
		}
		return out
	}
	var out []*domain
	for level := range o.Tiers {
		groups := map[string]*domain{}
		var keys []string
		for _, ni := range nodes {
			v := ni.Node.Tier(level)
			if v == "" {
				continue
			}
			g := groups[v]
			if g == nil {
				g = &domain{level: level, where: v}
				groups[v] = g
				keys = append(keys, v)
			}
			g.nodes = append(g.nodes, ni)
		}
		slices.Sort(keys)
		for _, k := range keys {
			out = append(out, groups[k])
		}
	}
	return append(out, &domain{level: o.Tiers, where: "cluster", nodes: nodes})
}

// evaluate finds the first moment the domain holds every member; nil when
// no node of it could ever hold one.
func evaluate(job Job, d *domain, now time.Time) *outcome {
	state := slices.Clone(d.nodes)
	slots := make([]int, len(state))
	total := 0
	var events []release
	for i, ni := range state {
		slots[i] = placement.Slots(job.Member, ni, job.Members)
		total += slots[i]
		for uid, a := range ni.Allocs {
			if a.Ends.IsZero() {
				continue
			}
			events = append(events, release{at: maxTime(a.Ends, now), node: i, uid: uid, pod: cmp.Or(a.Pod, uid), estimated: a.EndsEstimated})
		}
	}
	slices.SortFunc(events, func(a, b release) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.node, b.node), cmp.Compare(a.uid, b.uid))
	})
	out := &outcome{d: d, state: state}
	if total >= job.Members {
		out.start, out.known = now, true
		return out
	}
	for i, ev := range events {
		state[ev.node] = state[ev.node].Without(ev.uid)
		total -= slots[ev.node]
		slots[ev.node] = placement.Slots(job.Member, state[ev.node], job.Members)
		total += slots[ev.node]
		out.left = events[:i+1]
		if ev.estimated {
			out.estimated++
		}
		// Pods that leave at the same moment leave together.
		if total >= job.Members && (i+1 == len(events) || !events[i+1].at.Equal(ev.at)) {
			out.start, out.known = ev.at, true
			return out
		}
	}
	if total == 0 {
		return nil
	}
	out.missing = job.Members - total
	return out
}

// plan turns the chosen outcome into claims on the fewest nodes.
func (out *outcome) plan(job Job) Plan {
	p := Plan{Job: job.Key, Level: out.d.level, Where: out.d.where, Missing: out.missing}
	if out.known {
		p.Start = out.start
	}
	type cand struct {
		i, slots int
	}
	var cands []cand
	for i, ni := range out.state {
		if s := placement.Slots(job.Member, ni, job.Members); s > 0 {
			cands = append(cands, cand{i, s})
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(b.slots, a.slots) })
	left := job.Members
	held := map[int]bool{}
	for _, c := range cands {
		if left == 0 {
			break
		}
		k := min(c.slots, left)
		left -= k
		held[c.i] = true
		m := job.Member
		p.Claims = append(p.Claims, ledger.Claim{Job: job.Key, Gang: job.Gang, Node: out.state[c.i].Name(),
			GPUs: k * m.GPUs, Models: slices.Clone(m.Models), CPUMilli: int64(k) * m.CPUMilli,
			HostMemoryMiB: ledger.MiB(k) * m.HostMemoryMiB, Start: p.Start})
	}
	slices.SortFunc(p.Claims, func(a, b ledger.Claim) int { return cmp.Compare(a.Node, b.Node) })
	for _, ev := range out.left {
		if !held[ev.node] {
			continue
		}
		s := ev.pod + " ends " + ev.at.UTC().Format("15:04")
		if ev.estimated {
			s += " (estimated)"
			p.Estimated = true
		}
		p.WaitsFor = append(p.WaitsFor, s)
	}
	return p
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Summary says the plan in words, for the pod's Queued condition and
// kubectl rota: "GPUs held on 2 nodes of tier 0 leaf-a; expected start
// 2026-12-02 14:40 UTC, waiting for 3 pods to end".
func (p Plan) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d GPUs held on %d node(s) of %s", p.heldGPUs(), len(p.Claims), p.Domain())
	switch {
	case p.Start.IsZero():
		fmt.Fprintf(&b, "; expected start unknown: %d member(s) wait for pods that declared no maximum runtime", p.Missing)
	default:
		fmt.Fprintf(&b, "; expected start %s", p.Start.UTC().Format("2006-01-02 15:04 MST"))
		if p.Estimated {
			b.WriteString(" (estimated)")
		}
	}
	if n := len(p.WaitsFor); n > 0 {
		fmt.Fprintf(&b, ", waiting for %d pod(s) to end: %s", n, strings.Join(p.WaitsFor[:min(n, 3)], ", "))
		if n > 3 {
			b.WriteString(", ...")
		}
	}
	return b.String()
}

func (p Plan) heldGPUs() int {
	n := 0
	for _, c := range p.Claims {
		n += c.GPUs
	}
	return n
}
