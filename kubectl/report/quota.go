package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// Quota states of a team.
const (
	StateWithin     = "within quota"
	StateBorrowing  = "borrowing"
	StateAtQuota    = "at quota"
	StateOverQuota  = "over quota"
	StateUnlimited  = "unlimited"
	StateNoQuota    = "no quota"
	StateNoConfig   = "quota not loaded"
	StateNotCharged = "no team"
)

// TeamQuota is one team's quota and use.
type TeamQuota struct {
	Team string `json:"team"`
	// Namespaces labelled with the team.
	Namespaces []string `json:"namespaces,omitempty"`
	Configured bool     `json:"configured"`
	// Group is the quota group the team belongs to, in a nested
	// configuration ("" under the shared pool).
	Group string `json:"group,omitempty"`
	// Pool is the node pool the team's GPU pods place on ("" the nodes of
	// none; quota.Config.PoolOf).
	Pool string `json:"pool,omitempty"`
	// Guarantee, BorrowLimit and Reachable (guarantee plus what it may
	// borrow, bounded by the shared pool) come from the configuration.
	Guarantee   Amount `json:"guarantee"`
	BorrowLimit Amount `json:"borrowLimit"`
	Reachable   Amount `json:"reachable"`
	// Running is placed on nodes, Pending admitted and waiting.
	Running Amount `json:"running"`
	Pending Amount `json:"pending"`
	// Borrowed is the part of running+pending above the guarantee.
	Borrowed Amount `json:"borrowed"`
	// Headroom is what the team may still add now (shared pool permitting).
	Headroom Amount `json:"headroom"`
	State    string `json:"state"`
	// Note explains the state in a sentence.
	Note string `json:"note,omitempty"`
	// Rejections counts admission refusals seen in controllers' events.
	Rejections    int32     `json:"rejections,omitempty"`
	LastRejection string    `json:"lastRejection,omitempty"`
	LastRejected  time.Time `json:"lastRejected,omitzero"`
	// LastRejectedAge is how long ago LastRejected was.
	LastRejectedAge string `json:"lastRejectedAge,omitempty"`
}

// teamQuota reads one team's quota state.
func (c *Cluster) teamQuota(team string) TeamQuota {
	u := c.usage[team]
	tq := TeamQuota{Team: team, Namespaces: c.teamNS[team], Running: amount(u.Running), Pending: amount(u.Pending)}
	switch {
	case !c.quotaOK:
		tq.State, tq.Note = StateNoConfig, c.quotaErr+"; the webhook admits no GPU pod without it"
		return tq
	case team == "":
		tq.State = StateNotCharged
		if c.quota.Policy() == quota.DenyUnknown {
			tq.Note = "pods of namespaces without a team label are rejected (unknownTeams: deny)"
		} else {
			tq.Note = "pods of namespaces without a team label run without quota (unknownTeams: unlimited)"
		}
		return tq
	}
	t, ok := c.quota.Team(team)
	if !ok {
		if c.quota.Policy() == quota.DenyUnknown {
			tq.State, tq.Note = StateNoQuota, fmt.Sprintf("team %s has no entry in %s; its GPU pods are rejected", team, c.o.QuotaSource)
		} else {
			tq.State, tq.Note = StateUnlimited, fmt.Sprintf("team %s has no entry in %s; its GPU pods run without quota", team, c.o.QuotaSource)
		}
		return tq
	}
	tq.Configured = true
	tq.Group = t.Group
	tq.Pool = c.quota.PoolOf(team)
	tq.Guarantee = amount(t.Guarantee())
	tq.BorrowLimit = amount(t.Borrow.Amount())
	tq.Reachable = amount(c.quota.Reachable(team))
	used := u.Total()
	over := used.Sub(t.Guarantee())
	tq.Borrowed = Amount{GPUs: max(over.GPUs, 0), MemoryMiB: max(over.MemoryMiB, 0)}
	tq.Headroom = amount(c.headroom(team))
	var full []string
	switch {
	case used.GPUs > int64(tq.Reachable.GPUs) || used.MemoryMiB > tq.Reachable.MemoryMiB:
		tq.State = StateOverQuota
		tq.Note = fmt.Sprintf("uses %s, more than it may ever hold (%s); new GPU pods are rejected until use drops",
			amount(used), tq.Reachable)
		return tq
	case tq.Guarantee.GPUs+tq.BorrowLimit.GPUs > 0 && tq.Headroom.GPUs == 0:
		full = append(full, "GPUs")
	}
	if tq.Guarantee.MemoryMiB+tq.BorrowLimit.MemoryMiB > 0 && tq.Headroom.MemoryMiB == 0 {
		full = append(full, "GPU memory")
	}
	switch {
	case len(full) > 0:
		tq.State = StateAtQuota
		tq.Note = fmt.Sprintf("no room for more %s: new pods asking for it are rejected until use drops", strings.Join(full, " or "))
	case !tq.Borrowed.isZero():
		tq.State = StateBorrowing
		tq.Note = fmt.Sprintf("borrows %s from the shared pool", tq.Borrowed)
		if tq.Group != "" {
			tq.Note = fmt.Sprintf("borrows %s through group %s (nearest pool first)", tq.Borrowed, tq.Group)
		}
	default:
		tq.State = StateWithin
	}
	return tq
}

func (a Amount) isZero() bool { return a.GPUs == 0 && a.MemoryMiB == 0 }

// headroom is what team may add now, per resource (quota.Config.Check's
// formula): max(0, g-u) + max(0, min(b-o, P-p)).
func (c *Cluster) headroom(team string) quota.Amount {
	if c.quota.Nested() {
		return c.quota.Headroom(quota.Account{Team: team}, c.accountUsage())
	}
	t, _ := c.quota.Team(team)
	u := c.usage[team].Total()
	g, b := t.Guarantee(), t.Borrow.Amount()
	pool, poolUsed := c.quota.SharedPool.Amount(), c.quota.PoolUsed(c.usage)
	one := func(g, b, u, p, pu int64) int64 {
		own := max(0, u-g)
		return max(0, g-u) + max(0, min(b-own, p-pu))
	}
	return quota.Amount{
		GPUs: one(g.GPUs, b.GPUs, u.GPUs, pool.GPUs, poolUsed.GPUs),
		MemoryMiB: contract.MiB(one(int64(g.MemoryMiB), int64(b.MemoryMiB), int64(u.MemoryMiB),
			int64(pool.MemoryMiB), int64(poolUsed.MemoryMiB))),
	}
}

// accountUsage is the teams' use keyed by quota account (model-agnostic).
func (c *Cluster) accountUsage() map[quota.Account]quota.Usage {
	out := make(map[quota.Account]quota.Usage, len(c.usage))
	for team, u := range c.usage {
		if team != "" {
			out[quota.Account{Team: team}] = u
		}
	}
	return out
}

// GroupQuota is one quota group of a nested configuration and what its
// subtree borrows, from where.
type GroupQuota struct {
	Group  string `json:"group"`
	Parent string `json:"parent,omitempty"`
	// Depth is 0 for a group under the shared pool.
	Depth int `json:"depth"`
	// Pool is the group's own pool; BorrowLimit what its subtree may take
	// from above (nil: no limit); LendLimit what of its pool it may lend.
	Pool        Amount  `json:"pool"`
	BorrowLimit *Amount `json:"borrowLimit,omitempty"`
	LendLimit   Amount  `json:"lendLimit"`
	// Borrowed is what its teams use past their guarantees; FromPool,
	// FromLent (child groups' loans) and Above say where it comes from;
	// Lent is what of its pool others borrow now.
	Borrowed Amount `json:"borrowed"`
	FromPool Amount `json:"fromPool"`
	FromLent Amount `json:"fromLent"`
	Above    Amount `json:"above"`
	Lent     Amount `json:"lent"`
	// Teams are the teams directly in it.
	Teams []string `json:"teams,omitempty"`
}

// groups lists the quota tree's groups, each parent before its children,
// siblings by name.
func (c *Cluster) groups() []GroupQuota {
	flows, _, _ := c.quota.GroupFlows(c.accountUsage())
	members := map[string][]string{}
	for name, t := range c.quota.Teams {
		if t.Group != "" {
			members[t.Group] = append(members[t.Group], name)
		}
	}
	var out []GroupQuota
	for _, at := range c.quota.GroupsTopDown() {
		g, f := c.quota.Groups[at.Name], flows[at.Name]
		teams := members[at.Name]
		slices.Sort(teams)
		gq := GroupQuota{Group: at.Name, Parent: g.Parent, Depth: at.Depth,
			Pool: amount(quota.Limits{GPUs: g.GPUs, GPUMemoryGiB: g.GPUMemoryGiB}.Amount()), LendLimit: amount(g.Lend.Amount()),
			Borrowed: amount(f.Borrowed), FromPool: amount(f.FromPool), FromLent: amount(f.FromLent), Above: amount(f.Above),
			Lent: amount(f.Lent), Teams: teams}
		if g.Borrow != nil {
			b := amount(g.Borrow.Amount())
			gq.BorrowLimit = &b
		}
		out = append(out, gq)
	}
	return out
}

// Teams is the `top teams` report.
type Teams struct {
	Teams []TeamQuota `json:"teams"`
	// Groups is the quota tree, parents first (empty without groups).
	Groups []GroupQuota `json:"groups,omitempty"`
	// SharedPool is the pool's size, use and free room.
	SharedPool     Amount `json:"sharedPool"`
	SharedPoolUsed Amount `json:"sharedPoolUsed"`
	SharedPoolFree Amount `json:"sharedPoolFree"`
	UnknownTeams   string `json:"unknownTeams,omitempty"`
	// QuotaError says why the quota configuration could not be read.
	QuotaError string `json:"quotaError,omitempty"`
}

// TopTeams lists every team that has a quota entry, a labelled namespace or
// GPU use, sorted by name ("" for pods of unlabelled namespaces, last).
func (c *Cluster) TopTeams() Teams {
	names := map[string]bool{}
	for t := range c.quota.Teams {
		names[t] = true
	}
	for t := range c.teamNS {
		names[t] = true
	}
	for t, u := range c.usage {
		if !u.Total().IsZero() {
			names[t] = true
		}
	}
	list := make([]string, 0, len(names))
	for t := range names {
		list = append(list, t)
	}
	slices.SortFunc(list, func(a, b string) int {
		switch {
		case a == "":
			return 1
		case b == "":
			return -1
		}
		return strings.Compare(a, b)
	})
	out := Teams{QuotaError: c.quotaErr}
	if c.quotaOK {
		pool := c.quota.SharedPool.Amount()
		used := c.quota.PoolUsed(c.usage)
		free := pool.Sub(used)
		free = quota.Amount{GPUs: max(free.GPUs, 0), MemoryMiB: max(free.MemoryMiB, 0)}
		if c.quota.Nested() {
			// The groups' pools lend first; the shared pool the rest.
			_, used, free = c.quota.GroupFlows(c.accountUsage())
			out.Groups = c.groups()
		}
		out.SharedPool, out.SharedPoolUsed, out.SharedPoolFree = amount(pool), amount(used), amount(free)
		out.UnknownTeams = string(c.quota.Policy())
	}
	rej := c.rejections()
	for _, t := range list {
		tq := c.teamQuota(t)
		if r, ok := rej[t]; ok {
			tq.Rejections, tq.LastRejection, tq.LastRejected, tq.LastRejectedAge = r.count, r.msg, r.at, c.age(r.at)
		}
		out.Teams = append(out.Teams, tq)
	}
	return out
}
