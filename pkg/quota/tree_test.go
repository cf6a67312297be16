package quota

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rota-sched/rota/pkg/contract"
)

func gpuUse(n int64) Usage { return Usage{Running: Amount{GPUs: n}} }

// orgTree: department "dept" (pool 2) holds groups "t" (pool 2) and "u"
// (pool 0); project p1 and p2 are in t, q1 in u. Nothing above dept.
func orgTree() Config {
	return Config{
		Groups: map[string]Group{
			"dept": {GPUs: 2},
			"t":    {Parent: "dept", GPUs: 2},
			"u":    {Parent: "dept"},
		},
		Teams: map[string]Team{
			"p1": {GPUs: 1, Borrow: Limits{GPUs: 10}, Group: "t"},
			"p2": {GPUs: 1, Borrow: Limits{GPUs: 10}, Group: "t"},
			"q1": {Borrow: Limits{GPUs: 10}, Group: "u"},
		},
	}
}

func allowed(c Config, team string, usage map[Account]Usage, gpus int64) bool {
	return c.CheckAccount(Account{Team: team}, usage, Amount{GPUs: gpus}).Allowed
}

// A project's burst takes its siblings' pool before its cousins': p1 at 3
// GPUs (1 guaranteed, 2 from t) leaves dept's pool to q1; p1 at 5 has taken
// it, and q1 waits.
func TestTreeBorrowsFromSiblingsBeforeCousins(t *testing.T) {
	c := orgTree()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	usage := map[Account]Usage{{Team: "p1"}: gpuUse(3)}
	if !allowed(c, "q1", usage, 2) {
		t.Error("p1 borrows t's pool, yet its cousin q1 cannot take dept's 2 GPUs")
	}
	if !allowed(c, "p2", usage, 2) {
		t.Error("p2 cannot borrow 1 GPU from dept's pool once t's is taken")
	}
	usage[Account{Team: "p2"}] = gpuUse(2) // 1 of dept's pool
	if !allowed(c, "q1", usage, 1) || allowed(c, "q1", usage, 2) {
		t.Error("with 1 of dept's 2 GPUs borrowed by p2, q1 should borrow exactly 1")
	}
	delete(usage, Account{Team: "p2"})
	usage[Account{Team: "p1"}] = gpuUse(5)
	d := c.CheckAccount(Account{Team: "q1"}, usage, Amount{GPUs: 1})
	if d.Allowed {
		t.Fatal("p1 took dept's pool too, yet q1 may borrow")
	}
	msg := d.Shortfalls[0].Message("this pod")
	if !strings.Contains(msg, "borrowable now: 0") || !strings.Contains(msg, "the shared pool (0 GPUs, with what the top groups lend) is lent out") {
		t.Errorf("message %q", msg)
	}
	if allowed(c, "p1", usage, 1) {
		t.Error("p1 borrows past every pool above it")
	}
}

// The numbers and the binding node are said; ReachableAccount follows the
// pools and borrow limits up the tree.
func TestTreeMessages(t *testing.T) {
	c := orgTree()
	usage := map[Account]Usage{{Team: "p1"}: gpuUse(5)}
	d := c.CheckAccount(Account{Team: "p2"}, usage, Amount{GPUs: 3})
	if d.Allowed || d.Shortfalls[0].Borrowable != 0 {
		t.Fatalf("p2 asking 3 with its 1 guaranteed and every pool lent: %+v", d)
	}
	g := orgTree()
	b := Limits{GPUs: 1}
	dept := g.Groups["dept"]
	dept.Borrow = &b
	g.Groups["dept"] = dept
	g.SharedPool = Limits{GPUs: 8}
	d = g.CheckAccount(Account{Team: "q1"}, usage, Amount{GPUs: 3})
	if d.Allowed || d.Shortfalls[0].Borrowable != 1 || !strings.Contains(d.Shortfalls[0].Limit, "group dept (pool 2 GPUs, borrow limit 1 GPU) would borrow past its limit") {
		t.Errorf("q1 under dept's borrow limit of 1: %+v", d)
	}
	if got := g.ReachableAccount(Account{Team: "q1"}); got.GPUs != 3 {
		t.Errorf("q1 can reach %d GPUs, want 3 (dept's pool 2 + 1 borrowed above it)", got.GPUs)
	}
	if got := g.ReachableAccount(Account{Team: "p1"}); got.GPUs != 1+2+2+1 {
		t.Errorf("p1 can reach %d GPUs, want 6 (1 + t's 2 + dept's 2 + 1 above)", got.GPUs)
	}
}

// A group lends its unused pool to its parent's other children, up to its
// lend limit, and only what its own subtree leaves.
func TestTreeLend(t *testing.T) {
	c := orgTree()
	tg := c.Groups["t"]
	tg.Lend = Limits{GPUs: 1}
	c.Groups["t"] = tg
	c.Groups["dept"] = Group{} // no pool of its own
	if !allowed(c, "q1", nil, 1) {
		t.Error("t lends 1 GPU of its pool, yet q1 cannot borrow it")
	}
	if allowed(c, "q1", nil, 2) {
		t.Error("q1 borrows more than t lends")
	}
	usage := map[Account]Usage{{Team: "p1"}: gpuUse(3)} // t's pool used by its own
	if allowed(c, "q1", usage, 1) {
		t.Error("t's subtree uses its pool, yet q1 borrows it")
	}
	// The lent GPU is back to t's subtree only as q1's borrowed work ends.
	usage = map[Account]Usage{{Team: "q1"}: gpuUse(1)}
	if !allowed(c, "p1", usage, 2) || allowed(c, "p1", usage, 3) {
		t.Error("p1 should get its guarantee and the 1 GPU t did not lend, not the lent one")
	}
	bad := c
	bad.Groups = map[string]Group{"t": {GPUs: 1, Lend: Limits{GPUs: 2}}}
	bad.Teams = nil
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "more than the group's pool") {
		t.Errorf("lend above the pool: %v", err)
	}
}

// A tree of one group with no pool and no limits, every team in it, is
// today's flat configuration: the same decisions on random use.
func TestTreeOfOneGroupIsFlat(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 3))
		flat := Config{Teams: map[string]Team{}, SharedPool: Limits{GPUs: int64(r.IntN(20)), GPUMemoryGiB: int64(r.IntN(40))}}
		usage := map[Account]Usage{}
		for i := range 1 + r.IntN(4) {
			name := fmt.Sprintf("t%d", i)
			flat.Teams[name] = Team{GPUs: int64(r.IntN(8)), GPUMemoryGiB: int64(r.IntN(16)),
				Borrow: Limits{GPUs: int64(r.IntN(12)), GPUMemoryGiB: int64(r.IntN(24))}}
			usage[Account{Team: name}] = Usage{Running: Amount{GPUs: int64(r.IntN(12)), MemoryMiB: contract.MiB(1024 * r.IntN(20))},
				Pending: Amount{GPUs: int64(r.IntN(3))}}
		}
		tree := flat
		tree.Groups = map[string]Group{"all": {}}
		tree.Teams = map[string]Team{}
		for name, tm := range flat.Teams {
			tm.Group = "all"
			tree.Teams[name] = tm
		}
		for name := range flat.Teams {
			for range 4 {
				need := Amount{GPUs: int64(r.IntN(6))}
				if r.IntN(2) == 0 {
					need = Amount{MemoryMiB: contract.MiB(1024 * (1 + r.IntN(10)))}
				}
				a := Account{Team: name}
				want, got := flat.CheckAccount(a, usage, need), tree.CheckAccount(a, usage, need)
				if want.Allowed != got.Allowed || want.Borrowed != got.Borrowed {
					t.Fatalf("seed %d, %s needs %v with %v: flat %+v, tree %+v", seed, name, need, usage, want, got)
				}
				if !want.Allowed && want.Shortfalls[0].Borrowable != got.Shortfalls[0].Borrowable {
					t.Fatalf("seed %d: borrowable flat %d, tree %d", seed, want.Shortfalls[0].Borrowable, got.Shortfalls[0].Borrowable)
				}
				// Teams under the shared pool of a nested configuration
				// are told exactly as in the flat one.
				mixed := flat
				mixed.Groups = map[string]Group{"other": {GPUs: 3}}
				if got := mixed.CheckAccount(a, usage, need); !cmp.Equal(want, got) {
					t.Fatalf("seed %d, a team under the shared pool beside a group: flat %+v, nested %+v", seed, want, got)
				}
			}
			if a := (Account{Team: name}); flat.Headroom(a, usage) != tree.Headroom(a, usage) {
				t.Fatalf("seed %d: %s's headroom %v flat, %v in the tree", seed, name, flat.Headroom(a, usage), tree.Headroom(a, usage))
			}
			if flat.ReachableAccount(Account{Team: name}) != tree.ReachableAccount(Account{Team: name}) {
				t.Fatalf("seed %d: %s reaches %v flat, %v in the tree", seed, name,
					flat.ReachableAccount(Account{Team: name}), tree.ReachableAccount(Account{Team: name}))
			}
		}
	}
}

// Admitting only what CheckAccount allows, from nothing, never takes any
// node of a random tree past its limit, checked by a separate feasibility
// test: each group's subtree borrows past its members' guarantees no more
// than its pool plus its borrow limit, and the whole tree no more than the
// groups' pools and the shared pool.
func TestTreeNeverPastALimit(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 5))
		c := Config{Groups: map[string]Group{}, Teams: map[string]Team{}, SharedPool: Limits{GPUs: int64(r.IntN(6))}}
		var groups []string
		for i := range 1 + r.IntN(5) {
			name := fmt.Sprintf("g%d", i)
			g := Group{GPUs: int64(r.IntN(5))}
			if len(groups) > 0 && r.IntN(3) > 0 {
				g.Parent = groups[r.IntN(len(groups))]
			}
			if r.IntN(2) == 0 {
				g.Borrow = &Limits{GPUs: int64(r.IntN(4))}
			}
			c.Groups[name] = g
			groups = append(groups, name)
		}
		var teams []string
		for i := range 2 + r.IntN(5) {
			name := fmt.Sprintf("t%d", i)
			tm := Team{GPUs: int64(r.IntN(4)), Borrow: Limits{GPUs: int64(r.IntN(8))}}
			if r.IntN(4) > 0 {
				tm.Group = groups[r.IntN(len(groups))]
			}
			c.Teams[name] = tm
			teams = append(teams, name)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		usage := map[Account]Usage{}
		for range 60 {
			name := teams[r.IntN(len(teams))]
			a := Account{Team: name}
			// Headroom is the most CheckAccount allows.
			h := c.Headroom(a, usage).GPUs
			if !c.CheckAccount(a, usage, Amount{GPUs: h}).Allowed || c.CheckAccount(a, usage, Amount{GPUs: h + 1}).Allowed {
				t.Fatalf("seed %d: %s's headroom %d is not the most CheckAccount allows", seed, name, h)
			}
			n := int64(1 + r.IntN(3))
			if !c.CheckAccount(a, usage, Amount{GPUs: n}).Allowed {
				continue
			}
			u := usage[a]
			u.Running.GPUs += n
			usage[a] = u
			if why := feasible(c, usage); why != "" {
				t.Fatalf("seed %d: admitted %d GPUs for %s, and %s (use %v, config %+v)", seed, n, name, why, usage, c)
			}
		}
	}
}

// feasible checks, bottom-up and apart from treeExcess, that every team's
// use past its guarantee fits its borrow limit and that each subtree's
// borrowing fits the pools in and above it within the borrow limits.
func feasible(c Config, usage map[Account]Usage) string {
	children := map[string][]string{}
	for name, g := range c.Groups {
		children[g.Parent] = append(children[g.Parent], name)
	}
	// unmet is what the subtree of group g (or the root, "") borrows
	// beyond its own pools.
	var unmet func(g string) (int64, string)
	unmet = func(g string) (int64, string) {
		var borrowed int64
		for name, tm := range c.Teams {
			if tm.Group != g {
				continue
			}
			over := max(0, usage[Account{Team: name}].Total().GPUs-tm.GPUs)
			if over > tm.Borrow.GPUs {
				return 0, "team " + name + " borrows past its limit"
			}
			borrowed += over
		}
		for _, ch := range children[g] {
			up, why := unmet(ch)
			if why != "" {
				return 0, why
			}
			borrowed += up
		}
		if g == "" {
			if borrowed > c.SharedPool.GPUs {
				return 0, fmt.Sprintf("the tree borrows %d past its groups' pools, more than the shared pool's %d", borrowed, c.SharedPool.GPUs)
			}
			return 0, ""
		}
		grp := c.Groups[g]
		up := max(0, borrowed-grp.GPUs)
		if grp.Borrow != nil && up > grp.Borrow.GPUs {
			return 0, fmt.Sprintf("group %s borrows %d from above, past its limit %d", g, up, grp.Borrow.GPUs)
		}
		return up, ""
	}
	_, why := unmet("")
	return why
}

// Bad trees are refused with the field named.
func TestTreeValidate(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"groups: {a: {parent: b}, b: {parent: a}}", "groups.a.parent"},
		{"groups: {a: {parent: nope}}", "is not a group"},
		{"groups: {a: {}}\nteams: {x: {gpus: 1, group: b}}", "teams.x.group"},
		{"groups: {x: {}}\nteams: {x: {gpus: 1}}", "is also a team's name"},
		{"groups: {a: {}}\nteams: {x: {group: a, models: {H100: {gpus: 1}}}}", "per-model quota"},
		{"groups: {a: {gpus: -1}}", "groups.a.gpus"},
	} {
		if _, err := ParseYAML([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
	if _, err := ParseYAML([]byte("groups: {org: {gpus: 4}, dept: {parent: org, gpus: 2, borrow: {gpus: 2}, lend: {gpus: 1}}}\nteams: {x: {gpus: 1, group: dept}}")); err != nil {
		t.Errorf("a valid tree: %v", err)
	}
}

// GroupFlows says, per group, what its subtree borrows and from where.
func TestGroupFlows(t *testing.T) {
	c := orgTree()
	tg := c.Groups["t"]
	tg.Lend = Limits{GPUs: 2}
	c.Groups["t"] = tg
	c.SharedPool = Limits{GPUs: 4}
	// p1 borrows 1 of t's pool; t lends its other 1 to q1, which borrows 4:
	// 1 from t's loan, 2 from dept's pool, 1 from the shared pool.
	usage := map[Account]Usage{{Team: "p1"}: gpuUse(2), {Team: "q1"}: gpuUse(4)}
	flows, used, free := c.GroupFlows(usage)
	want := map[string]GroupFlow{
		"t":    {Borrowed: Amount{GPUs: 1}, FromPool: Amount{GPUs: 1}, Lent: Amount{GPUs: 1}},
		"u":    {Borrowed: Amount{GPUs: 4}, Above: Amount{GPUs: 4}},
		"dept": {Borrowed: Amount{GPUs: 4}, FromPool: Amount{GPUs: 2}, FromLent: Amount{GPUs: 1}, Above: Amount{GPUs: 1}},
	}
	if diff := cmp.Diff(want, flows); diff != "" {
		t.Errorf("flows (-want +got):\n%s", diff)
	}
	if used.GPUs != 1 || free.GPUs != 3 {
		t.Errorf("shared pool: used %v, free %v; want 1 and 3", used, free)
	}
	if f, _, _ := orgTree().GroupFlows(nil); len(f) != 3 {
		t.Errorf("flows of an idle tree: %v, want the 3 groups", f)
	}
	if f, _, _ := (Config{}).GroupFlows(nil); f != nil {
		t.Errorf("flows of a flat configuration: %v", f)
	}
}

// GroupsTopDown lists parents first, each followed by its subtree.
func TestGroupsTopDown(t *testing.T) {
	c := orgTree()
	c.Groups["w"] = Group{Parent: "t"}
	got := c.GroupsTopDown()
	want := []GroupAt{{"dept", 0}, {"t", 1}, {"w", 2}, {"u", 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GroupsTopDown (-want +got):\n%s", diff)
	}
}
