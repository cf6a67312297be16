package remediation

import (
	"slices"
	"time"

	"github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/topology"
)

// Adjust marks the GPUs that must not take new work unhealthy: those
// quarantined and those (or whose node) still in their recovery quiet
// period or whose node is not Ready. In dry-run and off it changes nothing.
func (c *Controller) Adjust(n *topology.Node) *topology.Node {
	if c.cfg.Mode != remediation.On {
		return n
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	nodeOut := ""
	switch nt := remediation.NodeTarget(n.Name); {
	case c.quarantine.Has(nt):
		nodeOut = "node quarantined"
	case !c.recovery.Usable(nt, now):
		nodeOut = "node not ready or recovering"
	}
	var out *topology.Node
	for i, g := range n.GPUs {
		why := nodeOut
		if why == "" {
			why = c.gpuOutLocked(remediation.GPUTarget(n.Name, g.UUID), g.Healthy, now)
		}
		if why == "" || !g.Healthy {
			continue
		}
		if out == nil {
			cp := *n
			cp.GPUs = slices.Clone(n.GPUs)
			out = &cp
		}
		out.GPUs[i].Healthy, out.GPUs[i].Reason = false, why
	}
	if out == nil {
		return n
	}
	return out
}

// gpuOutLocked says why the GPU gt (healthy as published) is kept out of
// placement, or "".
func (c *Controller) gpuOutLocked(gt remediation.Target, healthy bool, now time.Time) string {
	switch {
	case c.quarantine.Has(gt):
		return "quarantined"
	case healthy && !c.recovery.Usable(gt, now):
		return "recovering"
	}
	return ""
}
