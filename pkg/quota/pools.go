package quota

import (
	"fmt"
	"slices"

	"github.com/rota-sched/rota/pkg/placement"
)

// NodePool gives a team, or a group's subtree, nodes of its own, placed by
// a placement policy of its own. A node is in pool P when its node-pool
// label (<domain>/node-pool) says P. The owner's GPU pods go to the
// pool's nodes only, and no one else's go there, so the pool's policy is
// the only one that ever scores those nodes: an administrator tries a new
// policy on one team's pool, watches its allocation, fragmentation and
// wait beside the rest, and rolls it forward or back by editing this
// configuration, without a restart.
//
//	nodePools:
//	  vision-a100:
//	    owner: vision                  # a team or a group
//	    policy: fragmentation-aware    # empty: the extender's --policy
//	    workload:                      # the mix it keeps room for (empty: the extender's)
//	      - {gpus: 1, weight: 0.7}
//	      - {gpus: 8, weight: 0.3}
//
// A pod goes to the pool of its team, or of the nearest group above it
// that owns one; a pod whose team has none goes to nodes without the
// label. A node labelled with a pool that is not configured here takes no
// Rota GPU pods (no one owns it).
type NodePool struct {
	// Owner is the team or group whose pods the pool's nodes take.
	Owner string `json:"owner"`
	// Policy is the placement policy on the pool's nodes (placement
	// policy names); empty: the extender's --policy.
	Policy string `json:"policy,omitempty"`
	// Workload is the expected mix of pod shapes the fragmentation-aware
	// and fgd policies keep room for on the pool's nodes; empty: the
	// extender's --workload-file (or the built-in guess).
	Workload placement.Workload `json:"workload,omitempty"`
}

// normalized writes empty lists as none (written back, they are left out).
func (p NodePool) normalized() NodePool {
	if len(p.Workload) == 0 {
		p.Workload = nil
		return p
	}
	p.Workload = slices.Clone(p.Workload)
	for i := range p.Workload {
		if len(p.Workload[i].Models) == 0 {
			p.Workload[i].Models = nil
		}
	}
	return p
}

// maxNodePools bounds the pools (each builds a policy).
const maxNodePools = 256

// PoolOf is the node pool team's GPU pods go to: the pool its team owns,
// else the one its nearest group owns; "" for the nodes without a pool.
// It allocates nothing: the extender asks it for every decision.
func (c Config) PoolOf(team string) string {
	if len(c.NodePools) == 0 || team == "" {
		return ""
	}
	t, ok := c.Teams[team]
	if !ok {
		return ""
	}
	if p := c.ownedBy(team); p != "" {
		return p
	}
	for g := range c.up(t.Group) {
		if p := c.ownedBy(g); p != "" {
			return p
		}
	}
	return ""
}

// ownedBy is the pool owner owns ("" for none; Validate allows one).
func (c Config) ownedBy(owner string) string {
	for name, p := range c.NodePools {
		if p.Owner == owner {
			return name
		}
	}
	return ""
}

func (c Config) isTeam(name string) bool {
	_, ok := c.Teams[name]
	return ok
}

// PoolPolicy is pool's policy and workload as configured ("" and nil
// where the extender's own apply; ok false for a pool not configured).
func (c Config) PoolPolicy(pool string) (policy string, w placement.Workload, ok bool) {
	p, ok := c.NodePools[pool]
	return p.Policy, p.Workload, ok
}

// PoolNames lists the configured pools in order.
func (c Config) PoolNames() []string {
	names := make([]string, 0, len(c.NodePools))
	for n := range c.NodePools {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func validatePools(c Config, add func(field string, value any, problem, fix string)) {
	if len(c.NodePools) > maxNodePools {
		add("nodePools", len(c.NodePools), "has too many pools", fmt.Sprintf("configure at most %d", maxNodePools))
	}
	owned := map[string]string{}
	for _, name := range c.PoolNames() {
		p := c.NodePools[name]
		f := "nodePools." + name
		if len(name) > maxTeamNameLen || !teamNameRE.MatchString(name) {
			add("nodePools", name, "is not a valid pool name",
				"use the node-pool label's value: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
		}
		_, isGroup := c.Groups[p.Owner]
		switch {
		case p.Owner == "":
			add(f+".owner", "", "is missing", "name the team or group whose pods the pool's nodes take")
		case !c.isTeam(p.Owner) && !isGroup:
			add(f+".owner", p.Owner, "is not a team or a group", "name a team listed under teams or a group listed under groups")
		case owned[p.Owner] != "":
			add(f+".owner", p.Owner, "already owns pool "+owned[p.Owner],
				"give an owner one pool: its pods must meet one policy, and two pools' scores do not compare")
		default:
			owned[p.Owner] = name
		}
		if p.Policy != "" && !slices.Contains(placement.PolicyNames, p.Policy) {
			add(f+".policy", p.Policy, "is not a placement policy", fmt.Sprintf("write one of %v, or leave it out for the extender's --policy", placement.PolicyNames))
		}
		if err := p.Workload.Validate(); err != nil {
			add(f+".workload", "", err.Error(), "write shapes as in the extender's --workload-file")
		}
	}
}
