package ledger

import (
	"cmp"
	"slices"
	"time"
)

// Claim holds room on one node for a queued job that does not fit yet (a
// reservation): the GPUs, CPU and host memory the job will need there when
// it starts. A claim is not an allocation. It changes no GPU's use; it
// changes what other pods see (NodeInfo.For): the GPUs it holds look taken
// to every pod that is neither the job's nor a backfill pod, a pod whose
// declared end is not after the claim's expected start.
//
// The GPUs a claim holds are chosen afresh whenever the node changes: up to
// GPUs of the node's GPUs that will be free at Start (healthy, of the
// job's models, and every allocation on them ends by Start), idle ones
// first. So a GPU that frees is held at once, a backfill pod that takes a
// held GPU shrinks the hold until it ends, and a pod the claim cannot stop
// (a bound pod read back from the API) is never refused by it.
type Claim struct {
	// Job is the key of the job it holds for ("namespace/gang" or
	// "namespace/pod"): the Job of its members' requests and allocations.
	Job string
	// Gang is set when the job is a gang (for messages).
	Gang bool
	// Node is the node it holds on.
	Node string
	// GPUs is how many whole GPUs the job needs on the node; Models, when
	// set, the GPU models they must be.
	GPUs   int
	Models []string
	// CPUMilli and HostMemoryMiB are what the job needs on the node (held
	// only where the node tracks them).
	CPUMilli      int64
	HostMemoryMiB MiB
	// Start is the job's expected start; zero when it is not known (it
	// waits for pods that declared no end): then nothing backfills.
	Start time.Time
}

// Allows reports whether a pod of job whose declared end is ends may use
// what the claim holds: the claim's own job, or a backfill pod that ends by
// the expected start. A pod with no declared end (zero) never backfills.
func (c *Claim) Allows(job string, ends time.Time) bool {
	if c == nil || (job != "" && job == c.Job) {
		return true
	}
	return !ends.IsZero() && !c.Start.IsZero() && !ends.After(c.Start)
}

func (c *Claim) modelOK(m string) bool { return len(c.Models) == 0 || slices.Contains(c.Models, m) }

func sameClaim(a, b *Claim) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Job == b.Job && a.Gang == b.Gang && a.Node == b.Node && a.GPUs == b.GPUs && slices.Equal(a.Models, b.Models) &&
		a.CPUMilli == b.CPUMilli && a.HostMemoryMiB == b.HostMemoryMiB && a.Start.Equal(b.Start)
}

// For returns the view of the node that a pod of job with declared end
// ends sees: ni itself when the node holds no claim or the claim allows
// the pod, else the view in which the claim's GPUs are owned whole and its
// CPU and host memory are in use.
func (ni *NodeInfo) For(job string, ends time.Time) *NodeInfo {
	if ni.Claim == nil || ni.Claim.Allows(job, ends) {
		return ni
	}
	return ni.held
}

// HeldGPUs returns the indexes of the GPUs the node's claim holds now.
func (ni *NodeInfo) HeldGPUs() []int {
	var out []int
	for _, s := range ni.heldSlots {
		out = append(out, ni.Node.GPUs[s].Index)
	}
	return out
}

// hold computes which GPUs the claim holds and the view other pods see.
// It is called on a fresh NodeInfo before it is stored (setNode).
func (ni *NodeInfo) hold(c *Claim) {
	ni.Claim, ni.held, ni.heldSlots = c, nil, nil
	if c == nil {
		return
	}
	type cand struct {
		slot int
		ends time.Time // latest end of the GPU's allocations; zero: idle
	}
	var cands []cand
	for s, g := range ni.Node.GPUs {
		if !g.Healthy || !c.modelOK(g.Model) {
			continue
		}
		var last time.Time
		free := true
		for _, a := range ni.Allocs {
			if !a.usesSlot(ni, s) {
				continue
			}
			if a.Ends.IsZero() || c.Start.IsZero() || a.Ends.After(c.Start) {
				free = false
				break
			}
			last = maxTime(last, a.Ends)
		}
		if free {
			cands = append(cands, cand{slot: s, ends: last})
		}
	}
	// Idle GPUs first, then those that free soonest, then by slot.
	slices.SortStableFunc(cands, func(a, b cand) int { return a.ends.Compare(b.ends) })
	for _, x := range cands[:min(len(cands), c.GPUs)] {
		ni.heldSlots = append(ni.heldSlots, x.slot)
	}
	slices.Sort(ni.heldSlots)
	v := &NodeInfo{Node: ni.Node, Use: slices.Clone(ni.Use), Allocs: ni.Allocs,
		CPUMilli: ni.CPUMilli, HostMemoryMiB: ni.HostMemoryMiB}
	for _, s := range ni.heldSlots {
		v.Use[s].Exclusive = true
	}
	if n := ni.Node; n.CPUMilli > 0 {
		v.CPUMilli = min(n.CPUMilli, v.CPUMilli+c.CPUMilli)
	}
	if n := ni.Node; n.HostMemoryMiB > 0 {
		v.HostMemoryMiB = min(n.HostMemoryMiB, v.HostMemoryMiB+c.HostMemoryMiB)
	}
	// The view carries the claim, so callers can say why, and is its own
	// held view, so For on it is a no-op.
	v.Claim, v.held, v.heldSlots = c, v, ni.heldSlots
	ni.held = v
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// usesSlot reports whether the allocation holds the GPU at slot s of ni.
func (a *Allocation) usesSlot(ni *NodeInfo, s int) bool {
	idx := ni.Node.GPUs[s].Index
	for _, g := range a.GPUs {
		if g.Index == idx {
			return true
		}
	}
	return false
}

// declaredEnd is the end a claim lets backfill by: an estimated end never
// backfills.
func (a *Allocation) declaredEnd() time.Time {
	if a.EndsEstimated {
		return time.Time{}
	}
	return a.Ends
}

// job is the key claims match an allocation by: its gang, else its pod.
func (a *Allocation) job() string { return cmp.Or(a.Gang, a.Pod) }

// SetClaims replaces every claim with the given ones (at most one per
// node; a later one for the same node wins). Claims on nodes the ledger
// does not know are kept and apply when the node appears.
func (l *Ledger) SetClaims(claims []Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fresh := make(map[string]*Claim, len(claims))
	for i := range claims {
		c := claims[i]
		c.Models = slices.Clone(c.Models)
		fresh[c.Node] = &c
	}
	touched := false
	for name, old := range l.claims {
		if c, ok := fresh[name]; !ok || !sameClaim(old, c) {
			delete(l.claims, name)
			if ni, ok := l.nodes[name]; ok {
				l.setNode(name, ni.clone())
				touched = true
			}
		}
	}
	for name, c := range fresh {
		if _, ok := l.claims[name]; ok {
			continue // unchanged
		}
		l.claims[name] = c
		if ni, ok := l.nodes[name]; ok {
			l.setNode(name, ni.clone())
			touched = true
		}
	}
	if touched {
		l.changed()
	}
}

// Claims returns the claims, sorted by node.
func (l *Ledger) Claims() []Claim {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Claim, 0, len(l.claims))
	for _, c := range l.claims {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Claim) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// ClaimsFor are the claims that hold, for job, the room planned
// allocations take: one per node, with the GPUs (a share counts one), CPU
// and host memory they use there. gang marks a gang's; models, when set,
// are the GPU models the job must get.
func ClaimsFor(job string, gang bool, models []string, allocs []Allocation) []Claim {
	at := map[string]int{} // node -> index in out
	var out []Claim
	for _, a := range allocs {
		i, ok := at[a.Node]
		if !ok {
			i = len(out)
			out = append(out, Claim{Job: job, Gang: gang, Node: a.Node, Models: models})
			at[a.Node] = i
		}
		out[i].GPUs += max(len(a.GPUs), 1)
		out[i].CPUMilli += a.CPUMilli
		out[i].HostMemoryMiB += a.HostMemoryMiB
	}
	return out
}
