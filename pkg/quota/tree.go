package quota

import (
	"fmt"
	"iter"
	"slices"
	"strings"
)

// Group is an inner node of the quota tree: a department, an organisation,
// a team with projects under it. Teams (the leaves) and groups name their
// parent group; those that name none hang under the shared pool, the
// root. Everything a group's subtree uses above its members' guarantees
// is lent, nearest first: by the parent group's pool, then its parent's,
// up to the shared pool. So a project's burst takes its siblings' slack
// before its cousins', and another department's only last.
//
//	groups:
//	  research:   {gpus: 64, borrow: {gpus: 32}}
//	  vision:     {parent: research, gpus: 16, lend: {gpus: 8}}
//	teams:
//	  detection:  {gpus: 8, borrow: {gpus: 24}, group: vision}
//	  tracking:   {gpus: 8, borrow: {gpus: 24}, group: vision}
//	  speech:     {gpus: 32, borrow: {gpus: 16}, group: research}
type Group struct {
	// Parent is the group it belongs to; empty: it hangs under the shared
	// pool.
	Parent string `json:"parent,omitempty"`
	// GPUs and GPUMemoryGiB are the group's pool: what it lends to the
	// teams of its subtree on top of their guarantees (its guarantee to its
	// subtree).
	GPUs         int64 `json:"gpus"`
	GPUMemoryGiB int64 `json:"gpuMemoryGiB"`
	// Borrow, when set, is the most the subtree takes from above the
	// group (its parent's pool and up). Unset: only the pools above bound
	// it.
	Borrow *Limits `json:"borrow,omitempty"`
	// Lend is the most of the group's pool, unused by its subtree, that
	// its parent's other children may borrow (default none: the pool is
	// its subtree's alone).
	Lend Limits `json:"lend,omitzero"`
	// Weight is the group's fair-share weight among its siblings (default
	// 1): the queue picks, level by level, the sibling with the lowest
	// weighted dominant share, then inside it.
	Weight float64 `json:"weight,omitempty"`
}

// EffectiveWeight is the group's fair-share weight: 1 unless configured.
func (g Group) EffectiveWeight() float64 {
	if g.Weight <= 0 {
		return 1
	}
	return g.Weight
}

// maxTreeDepth bounds the groups above a team.
const maxTreeDepth = 16

// Nested reports whether the configuration is a tree (it has groups);
// otherwise every team borrows from the shared pool alone, as before
// groups existed.
func (c Config) Nested() bool { return len(c.Groups) > 0 }

// Path is the groups above team, nearest first (nil for a team under the
// shared pool, or unknown).
func (c Config) Path(team string) []string {
	t, ok := c.Teams[team]
	if !ok {
		return nil
	}
	return slices.Collect(c.up(t.Group))
}

// up yields g and the groups above it, nearest first. A cycle, which
// Validate refuses, ends after maxTreeDepth+1 groups.
func (c Config) up(g string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for depth := 0; g != "" && depth <= maxTreeDepth; g, depth = c.Groups[g].Parent, depth+1 {
			if !yield(g) {
				return
			}
		}
	}
}

func validateGroups(c Config, add func(field string, value any, problem, fix string), limits func(string, Limits)) {
	names := make([]string, 0, len(c.Groups))
	for name := range c.Groups {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		g := c.Groups[name]
		f := "groups." + name
		if len(name) > maxTeamNameLen || !teamNameRE.MatchString(name) {
			add("groups", name, "is not a valid group name", "use up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
		}
		if _, clash := c.Teams[name]; clash {
			add(f, name, "is also a team's name", "give the group and the team different names")
		}
		pool := Limits{GPUs: g.GPUs, GPUMemoryGiB: g.GPUMemoryGiB}
		limits(f, pool)
		if g.Borrow != nil {
			limits(f+".borrow", *g.Borrow)
		}
		limits(f+".lend", g.Lend)
		if g.Weight < 0 || g.Weight > maxWeight {
			add(f+".weight", g.Weight, "is out of range", fmt.Sprintf("write a positive weight up to %d (default 1)", maxWeight))
		}
		if g.Lend.GPUs > g.GPUs || g.Lend.GPUMemoryGiB > g.GPUMemoryGiB {
			add(f+".lend", fmt.Sprintf("%+v", g.Lend), "is more than the group's pool", "lend at most the group's own gpus and gpuMemoryGiB")
		}
		if g.Parent != "" {
			if _, ok := c.Groups[g.Parent]; !ok {
				add(f+".parent", g.Parent, "is not a group", "name a group listed under groups, or leave parent out to hang it under the shared pool")
				continue
			}
		}
		seen := map[string]bool{name: true}
		depth := 0
		for p := g.Parent; p != ""; p = c.Groups[p].Parent {
			if seen[p] {
				add(f+".parent", g.Parent, "makes a cycle", "make every chain of parents end at a group without a parent")
				break
			}
			seen[p] = true
			if depth++; depth >= maxTreeDepth {
				add(f+".parent", g.Parent, fmt.Sprintf("makes the tree deeper than %d groups", maxTreeDepth), "flatten the tree")
				break
			}
		}
	}
	teams := make([]string, 0, len(c.Teams))
	for name := range c.Teams {
		teams = append(teams, name)
	}
	slices.Sort(teams)
	for _, name := range teams {
		t := c.Teams[name]
		if t.Group == "" {
			continue
		}
		f := "teams." + name + ".group"
		if _, ok := c.Groups[t.Group]; !ok {
			add(f, t.Group, "is not a group", "name a group listed under groups, or leave group out to borrow from the shared pool alone")
		}
		if len(t.Models) > 0 {
			add(f, t.Group, "is set on a team with per-model quota", "nested groups count all GPU models together: leave group out of a team with models")
		}
	}
}

// vec is one amount per resource, in the order of resources.
type vec [2]int64

var resources = [2]Resource{GPUs, GPUMemory}

func vecOf(a Amount) vec { return vec{a.GPUs, int64(a.MemoryMiB)} }

// node keys of the tree's excess: a team's, a group's, and the root's.
func teamNode(t string) string  { return "team " + t }
func groupNode(g string) string { return "group " + g }

const rootNode = "shared pool"

// treeExcess is, per node of the tree and resource, how far usage goes
// past the node's limit: a team past its borrow limit, a group whose
// subtree borrows past the group's borrow limit, and the root whose
// lenders (the shared pool and what the top groups lend) are short. Each
// group's subtree borrows from the group's own pool first, then from what
// its child groups lend, then from above; a child lends what its own
// subtree leaves of its pool, up to its lend limit. Accounts of other
// pools (per-model pools) do not count.
func (c Config) treeExcess(usage map[Account]Usage) map[string]vec {
	ex, _ := c.treeFlow(usage, nil)
	return ex
}

// GroupFlow is what one group's subtree borrows and where it comes from.
type GroupFlow struct {
	// Borrowed is what the subtree's teams use past their guarantees
	// (through child groups too); FromPool the part the group's own pool
	// lends, FromLent the part its child groups lend, Above the rest, taken
	// from above the group.
	Borrowed, FromPool, FromLent, Above Amount
	// Lent is what of the group's pool it lends to its parent's other
	// children now (at most its lend limit).
	Lent Amount
}

// GroupFlows is each group's flow (nil without groups), and the shared
// pool's: what the tree borrows from it and what it has left.
func (c Config) GroupFlows(usage map[Account]Usage) (groups map[string]GroupFlow, sharedUsed, sharedFree Amount) {
	if !c.Nested() {
		return nil, Amount{}, Amount{}
	}
	groups = map[string]GroupFlow{}
	_, free := c.treeFlow(usage, groups)
	root := groups[""]
	delete(groups, "")
	return groups, root.Borrowed, amountOfVec(free)
}

// treeFlow is treeExcess, and what the root has left to lend (the shared
// pool and what the top groups lend, less what the tree borrows from it).
// With flows, it records each group's flow there ("" the root's).
func (c Config) treeFlow(usage map[Account]Usage, flows map[string]GroupFlow) (map[string]vec, vec) {
	ex := map[string]vec{}
	demand := map[string]vec{} // per group ("" the root): borrowed by its subtree
	for a, u := range usage {
		g, b, pool, ok := c.AccountLimits(a)
		if !ok || pool != "" {
			continue
		}
		over := vecOf(u.Total().Sub(g))
		lim := vecOf(b)
		var e vec
		for r := range over {
			over[r] = max(0, over[r])
			e[r] = max(0, over[r]-lim[r])
		}
		if e != (vec{}) {
			ex[teamNode(a.Team)] = e
		}
		parent := ""
		if a.Model == "" {
			parent = c.Teams[a.Team].Group
		}
		d := demand[parent]
		for r := range d {
			d[r] += over[r]
		}
		demand[parent] = d
	}
	lendIn := map[string]vec{}
	order := c.GroupsTopDown()
	slices.Reverse(order) // every group after its subtree, before its parent
	for _, at := range order {
		name := at.Name
		g := c.Groups[name]
		d, in := demand[name], lendIn[name]
		own := vecOf(Limits{GPUs: g.GPUs, GPUMemoryGiB: g.GPUMemoryGiB}.Amount())
		lend := vecOf(g.Lend.Amount())
		var up, out, e vec
		for r := range d {
			fromOwn := min(d[r], own[r])
			up[r] = max(0, d[r]-fromOwn-in[r])
			out[r] = min(lend[r], own[r]-fromOwn)
			if g.Borrow != nil {
				e[r] = max(0, up[r]-vecOf(g.Borrow.Amount())[r])
			}
		}
		if e != (vec{}) {
			ex[groupNode(name)] = e
		}
		if flows != nil {
			var pool, lent vec
			for r := range d {
				pool[r] = min(d[r], own[r])
				lent[r] = min(d[r]-pool[r], in[r])
			}
			flows[name] = GroupFlow{Borrowed: amountOfVec(d), FromPool: amountOfVec(pool), FromLent: amountOfVec(lent),
				Above: amountOfVec(up), Lent: amountOfVec(out)}
		}
		pd, pl := demand[g.Parent], lendIn[g.Parent]
		for r := range up {
			pd[r] += up[r]
			pl[r] += out[r]
		}
		demand[g.Parent], lendIn[g.Parent] = pd, pl
	}
	d, in, pool := demand[""], lendIn[""], vecOf(c.SharedPool.Amount())
	var e, free vec
	for r := range d {
		e[r] = max(0, d[r]-pool[r]-in[r])
		free[r] = max(0, pool[r]+in[r]-d[r])
	}
	if e != (vec{}) {
		ex[rootNode] = e
	}
	if flows != nil {
		flows[""] = GroupFlow{Borrowed: amountOfVec(d)}
	}
	return ex, free
}

// GroupAt is a group's place in the tree: its name and depth (0 under the
// shared pool).
type GroupAt struct {
	Name  string
	Depth int
}

// GroupsTopDown lists the groups parents first, each followed by its
// subtree, siblings by name (the order reports draw the tree in).
func (c Config) GroupsTopDown() []GroupAt {
	children := map[string][]string{}
	for name, g := range c.Groups {
		children[g.Parent] = append(children[g.Parent], name)
	}
	var out []GroupAt
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		names := children[parent]
		slices.Sort(names)
		for _, name := range names {
			out = append(out, GroupAt{Name: name, Depth: depth})
			if depth < maxTreeDepth {
				walk(name, depth+1)
			}
		}
	}
	walk("", 0)
	return out
}

// checkTree is CheckAccount for an account of the tree (a model-agnostic
// team or an account that borrows from the shared pool, in a nested
// configuration): need fits when adding it takes no node of the tree
// further past its limit, in any resource need asks for.
func (c Config) checkTree(a Account, usage map[Account]Usage, need Amount) Decision {
	g, b, _, _ := c.AccountLimits(a)
	u := usage[a]
	before, rootFree := c.treeFlow(usage, nil)
	// A team under the shared pool is told as in a flat configuration;
	// one in a group is told which node of the tree binds.
	inGroup := a.Model == "" && c.Teams[a.Team].Group != ""
	after := c.excessWith(a, usage, need)
	d := Decision{Allowed: true}
	nv, gv, bv, used := vecOf(need), vecOf(g), vecOf(b), vecOf(u.Total())
	var borrowed vec
	for r := range nv {
		if nv[r] == 0 {
			continue
		}
		free := max(0, gv[r]-used[r])
		if node := firstWorse(before, after, r); node != "" {
			d.Allowed = false
			// The most it could add now, past its free guarantee.
			lo := max(0, c.mostAllowed(a, usage, before, r, nv[r]-1)-free)
			s := Shortfall{Team: a.String(), Resource: resources[r], Quota: gv[r],
				Running: vecOf(u.Running)[r], Pending: vecOf(u.Pending)[r], Need: nv[r], Borrowable: lo, BorrowLimit: bv[r],
				PoolFree: rootFree[r]}
			if inGroup {
				s.Limit = c.limitPhrase(node, resources[r])
			}
			d.Shortfalls = append(d.Shortfalls, s)
			continue
		}
		borrowed[r] = max(0, nv[r]-free)
	}
	if d.Allowed {
		d.Borrowed = amountOfVec(borrowed)
	}
	return d
}

func amountOfVec(v vec) Amount { return amountOf(GPUs, v[0]).Add(amountOf(GPUMemory, v[1])) }

// limitPhrase names the node whose limit binds, with the limit.
func (c Config) limitPhrase(node string, r Resource) string {
	f := func(l Limits) string {
		if r == GPUMemory {
			return fmt.Sprintf("%d GiB of GPU memory", l.GPUMemoryGiB)
		}
		return gpus(l.GPUs)
	}
	switch {
	case node == rootNode:
		return "the shared pool (" + f(c.SharedPool) + ", with what the top groups lend) is lent out"
	case strings.HasPrefix(node, "group "):
		g := c.Groups[strings.TrimPrefix(node, "group ")]
		lim := "no borrow limit"
		if g.Borrow != nil {
			lim = "borrow limit " + f(*g.Borrow)
		}
		return fmt.Sprintf("%s (pool %s, %s) would borrow past its limit", node, f(Limits{GPUs: g.GPUs, GPUMemoryGiB: g.GPUMemoryGiB}), lim)
	default:
		return node + "'s borrow limit"
	}
}

// Headroom is what account a may add now, per resource: the most
// CheckAccount allows.
func (c Config) Headroom(a Account, usage map[Account]Usage) Amount {
	g, b, pool, ok := c.AccountLimits(a)
	if !ok {
		return Amount{}
	}
	if !c.Nested() || pool != "" {
		u := usage[a].Total()
		p, pu := vecOf(c.PoolSize(pool)), vecOf(c.AccountPoolUsed(pool, usage))
		gv, bv, uv := vecOf(g), vecOf(b), vecOf(u)
		var h vec
		for r := range h {
			own := max(0, uv[r]-gv[r])
			h[r] = max(0, gv[r]-uv[r]) + max(0, min(bv[r]-own, p[r]-pu[r]))
		}
		return amountOfVec(h)
	}
	before := c.treeExcess(usage)
	var h vec
	for r := range h {
		h[r] = c.mostAllowed(a, usage, before, r, resourceMax[r])
	}
	return amountOfVec(h)
}

// resourceMax bounds the searches per resource (GPUs, MiB).
var resourceMax = vec{maxGPUs, maxMemoryGiB * 1024}

// mostAllowed is the most, up to hi, of resource r that a tree account may
// add to usage (before is usage's excess): a binary search, since adding
// more never takes a node less far past its limit.
func (c Config) mostAllowed(a Account, usage map[Account]Usage, before map[string]vec, r int, hi int64) int64 {
	lo := int64(0)
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		var try vec
		try[r] = mid
		if firstWorse(before, c.excessWith(a, usage, amountOfVec(try)), r) == "" {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// excessWith is treeExcess with need added to a's pending use.
func (c Config) excessWith(a Account, usage map[Account]Usage, need Amount) map[string]vec {
	next := make(map[Account]Usage, len(usage)+1)
	for k, v := range usage {
		next[k] = v
	}
	w := next[a]
	w.Pending = w.Pending.Add(need)
	next[a] = w
	return c.treeExcess(next)
}

// firstWorse is the first node (by name) that after takes further past
// its limit in resource r than before; "" when none.
func firstWorse(before, after map[string]vec, r int) string {
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if after[k][r] > before[k][r] {
			return k
		}
	}
	return ""
}

// reachableTree is the most a tree account can ever hold: with nothing
// else in use, the largest amount checkTree allows, per resource.
func (c Config) reachableTree(a Account) Amount { return c.Headroom(a, nil) }
