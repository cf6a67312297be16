// Package nodepool answers, for the quota configuration in force, which
// node pool a team's GPU pods place on and which placement policy scores a
// pool's nodes (pkg/quota NodePool). The extender's filter and prioritize
// verbs, the queue's room planner and the metrics read it; an edit of the
// quota ConfigMap takes effect at the next decision, without a restart.
package nodepool

import (
	"sync"

	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/quota"
)

// Policies builds each pool's policy from the configuration in force and
// keeps it until the configuration changes. Safe for concurrent use; the
// zero value is not usable (New).
type Policies struct {
	quota    func() (*quota.Config, bool)
	def      placement.Policy
	workload placement.Workload
	logger   klog.Logger

	mu sync.Mutex
	// cfg is the configuration byPool was built from (nil: none);
	// configurations are replaced, never changed, so the pointer tells.
	cfg    *quota.Config
	byPool map[string]placement.Policy
}

// New reads the configuration from quotaFn (nil: no pools, every pod on
// every node by def). def is the extender's --policy and workload its
// --workload-file (nil: the built-in guess), which pools without their own
// use.
func New(logger klog.Logger, quotaFn func() (*quota.Config, bool), def placement.Policy, workload placement.Workload) *Policies {
	return &Policies{quota: quotaFn, def: def, workload: workload, logger: logger}
}

// current rebuilds the pools' policies when the configuration changed.
// Callers hold mu.
func (p *Policies) current() {
	if p.quota == nil {
		return
	}
	cfg, _ := p.quota()
	if cfg == p.cfg {
		return
	}
	p.cfg, p.byPool = cfg, nil
	if cfg == nil {
		return
	}
	p.byPool = make(map[string]placement.Policy, len(cfg.NodePools))
	for _, name := range cfg.PoolNames() {
		pol, w, _ := cfg.PoolPolicy(name)
		if pol == "" && len(w) == 0 {
			p.byPool[name] = p.def
			continue
		}
		if pol == "" {
			pol = p.def.Name()
		}
		if len(w) == 0 {
			w = p.workload
		}
		built, err := placement.NewPolicy(pol, w)
		if err != nil { // quota.Parse checked both; keep the extender's
			p.logger.Error(err, "Node pool's policy could not be built; its nodes are scored by the extender's", "pool", name)
			built = p.def
		}
		p.byPool[name] = built
		p.logger.V(2).Info("Node pool policy in force", "pool", name, "owner", cfg.NodePools[name].Owner, "policy", built.Name())
	}
}

// PoolOf is the pool team's GPU pods place on ("" for the nodes of none).
func (p *Policies) PoolOf(team string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current()
	if p.cfg == nil {
		return ""
	}
	return p.cfg.PoolOf(team)
}

// For is the policy that scores pool's nodes: the pool's own, else the
// extender's.
func (p *Policies) For(pool string) placement.Policy {
	if pool == "" {
		return p.def
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current()
	if pol, ok := p.byPool[pool]; ok {
		return pol
	}
	return p.def
}

// Pool describes one configured pool as it is now.
type Pool struct {
	Name, Owner, Policy string
}

// Pools lists the configured pools in order, with the policy in force.
func (p *Policies) Pools() []Pool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current()
	if p.cfg == nil {
		return nil
	}
	out := make([]Pool, 0, len(p.byPool))
	for _, name := range p.cfg.PoolNames() {
		out = append(out, Pool{Name: name, Owner: p.cfg.NodePools[name].Owner, Policy: p.byPool[name].Name()})
	}
	return out
}

// Default is the extender's own policy (nodes without a pool).
func (p *Policies) Default() placement.Policy { return p.def }
