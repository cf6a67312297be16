package remediation

import (
	"fmt"
	"time"
)

// Cause of a fault.
type Cause string

const (
	// GPUUnhealthy: the device plugin published the GPU Unhealthy (XID,
	// ECC, lost).
	GPUUnhealthy Cause = "GPUUnhealthy"
	// NodeNotReady: the Node's Ready condition is False or Unknown.
	NodeNotReady Cause = "NodeNotReady"
	// NodeHeartbeatLost: the node's Lease was not renewed within the
	// heartbeat timeout.
	NodeHeartbeatLost Cause = "NodeHeartbeatLost"
)

// Fault is one GPU or node that stopped working.
type Fault struct {
	Target Target
	Cause  Cause
	// Detail says more, e.g. "XID 79" or "lease renewed 2m ago".
	Detail string
	// Since is when the controller first saw the fault.
	Since time.Time
}

// Message is the fault in words, for events and the pod condition.
func (f Fault) Message() string {
	var s string
	switch f.Cause {
	case GPUUnhealthy:
		s = f.Target.String() + " is unhealthy"
	case NodeNotReady:
		s = "node " + f.Target.Node + " is not Ready"
	case NodeHeartbeatLost:
		s = "node " + f.Target.Node + " stopped reporting"
	default:
		s = f.Target.String() + " failed"
	}
	if f.Detail != "" {
		s += " (" + f.Detail + ")"
	}
	return s
}

// Pod is what the planner needs to know about a pod.
type Pod struct {
	Namespace, Name, UID string
	Node                 string
	// Gang is the gang key ("namespace/name"), empty when none.
	Gang string
	// MarkOnly: the pod asked (label <domain>/remediation: mark-only) to be
	// marked and never deleted.
	MarkOnly bool
}

// Key is "namespace/name".
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// Action is what happens to one pod.
type Action string

const (
	// Mark: event and pod condition only.
	Mark Action = "mark"
	// Delete: mark, then delete gracefully.
	Delete Action = "delete"
	// Deferred: would be deleted, but the rate limiter has no tokens; the
	// pod is marked now and tried again on a later pass.
	Deferred Action = "deferred"
)

// Decision is the plan for one pod.
type Decision struct {
	Pod    Pod
	Action Action
	// DryRun: report only, change nothing.
	DryRun bool
	// Reason says why, in words: the fault, and for a gang member on a
	// healthy GPU, the member that hit it.
	Reason string
}

// Planner turns faults into per-pod decisions. It is not safe for
// concurrent use (its limiter keeps state).
type Planner struct {
	Mode    Mode
	Limiter *Limiter
}

// Plan decides what happens to the pods a fault touches at now.
//
// Steps:
//  1. Each affected pod pulls in its whole gang (members(gang) returns
//     every live member, the affected one included): a gang whose member
//     lost its GPU cannot make progress, so it restarts together.
//  2. A unit (a pod alone, or a gang) with any mark-only member is only
//     marked: deleting part of a gang would not help it.
//  3. Other units are deleted whole when the limiter grants a token for
//     the fault's node (and cluster-wide), else Deferred. A token is one
//     workload restarted: a pod alone or a whole gang (charging a gang per
//     member would defer any gang larger than the burst forever).
//  4. In DryRun every decision is the same but flagged DryRun (the limiter
//     is charged too, so the report shows what on would have done).
//
// Pods are returned in unit order, each at most once.
func (p *Planner) Plan(f Fault, affected []Pod, members func(gang string) []Pod, now time.Time) []Decision {
	seen := map[string]bool{}
	var out []Decision
	for _, a := range affected {
		if seen[a.UID] {
			continue
		}
		unit := []Pod{a}
		if a.Gang != "" && members != nil {
			unit = unit[:0]
			hasSelf := false
			for _, m := range members(a.Gang) {
				if !seen[m.UID] {
					unit = append(unit, m)
					hasSelf = hasSelf || m.UID == a.UID
				}
			}
			if !hasSelf {
				unit = append(unit, a)
			}
		}
		markOnly := false
		for _, m := range unit {
			seen[m.UID] = true
			markOnly = markOnly || m.MarkOnly
		}
		action := Mark
		if !markOnly {
			action = Deferred
			if p.Limiter == nil || p.Limiter.AllowN(f.Target.Node, now, 1) {
				action = Delete
			}
		}
		for _, m := range unit {
			reason := f.Message()
			if m.UID != a.UID {
				reason = fmt.Sprintf("%s; gang member %s was running on it", reason, a.Key())
			}
			out = append(out, Decision{Pod: m, Action: action, DryRun: p.Mode != On, Reason: reason})
		}
	}
	return out
}
