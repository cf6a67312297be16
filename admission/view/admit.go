package view

import (
	"fmt"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
)

// Reason classifies an admission outcome (a metric label).
type Reason string

const (
	WithinQuota     Reason = "within_quota"
	Borrowed        Reason = "borrowed"
	GangReserved    Reason = "gang_reserved"
	UnlimitedTeam   Reason = "unlimited_team"
	QuotaExceeded   Reason = "quota_exceeded"
	NoTeam          Reason = "no_team"
	UnknownTeam     Reason = "unknown_team"
	PriorityCeiling Reason = "priority_ceiling"
	GangMismatch    Reason = "gang_mismatch"
	GangTooLarge    Reason = "gang_larger_than_cluster"
	GangNeverFits   Reason = "gang_never_fits"
	NoConfig        Reason = "config_not_loaded"
)

// Request is one pod to admit, already validated by podreq.
type Request struct {
	Namespace, Name string
	// UID is the pod's UID if the request carries one.
	UID string
	// PodTeam is the pod's own team label value.
	PodTeam string
	// Amount is what the pod asks for (memory converted with the view's unit).
	Amount quota.Amount
	Gang   *podreq.GangRef
	// Priority is the pod's resolved priority, nil when unset.
	Priority *int32
	// Models are the GPU models the pod accepts (podreq.GPUModels; empty:
	// any). Only Queue reads them.
	Models []string
	// DryRun decides without reserving.
	DryRun bool
}

// Outcome is the decision on one Request.
type Outcome struct {
	Allowed bool
	Reason  Reason
	// Team is the team the pod is charged to ("" when its namespace has none).
	Team string
	// Message says why, in words a user can act on (empty when allowed).
	Message string
}

// Admit decides whether the pod fits its team's quota and, when it does,
// reserves the pod (and, for a gang's first member, the whole gang) until
// the informer shows it. See the package comment for the rules.
func (v *View) Admit(req Request) Outcome {
	now := v.o.Now()
	k := key(req.Namespace, req.Name)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.expire(now)

	cfg := v.cfg
	if cfg == nil {
		return v.noConfig()
	}
	// A new CREATE for a name replaces an earlier admission of that name
	// (a failed or retried create): at most one of them becomes the pod.
	v.dropPodRes(k)

	bk := bucketKey{ns: req.Namespace, podTeam: req.PodTeam}
	out, t, known, denied := v.teamChecks(cfg, bk, req)
	if denied {
		return out
	}
	team := out.Team
	deny := func(r Reason, msg string) Outcome {
		out.Reason, out.Message = r, msg
		return out
	}
	if known && len(t.Models) > 0 {
		_, why := v.queueingOff(req.Namespace)
		if why == "" {
			why = "the pod was created without Rota's queue gate " + v.o.Names.QueueGate
		}
		return deny(PerModelNeedsQueue, fmt.Sprintf(
			"team %s has GPU quota per GPU model, which only Rota's queue charges, and this pod is not queued: %s; ask a cluster admin to turn queueing on for the namespace",
			team, why))
	}

	need := req.Amount
	subject := "this pod"
	var (
		g          *gang
		newGangRes bool
	)
	if req.Gang != nil {
		g = v.gangs[req.Gang.Key]
		if msg := gangMismatch(req, g); msg != "" {
			return deny(GangMismatch, msg)
		}
		if size := req.Gang.Size; size > 0 {
			total := req.Amount.Times(int64(size))
			if msg := tooLarge(req, total, v.caps, "the whole cluster has"); msg != "" {
				return deny(GangTooLarge, msg)
			}
			if known && !total.Fits(cfg.Reachable(team)) {
				return deny(GangNeverFits, v.neverFits(cfg, team, req, total))
			}
			members := 0
			if g != nil {
				members = g.seen + g.reserved
			}
			switch {
			case members >= size:
				// The gang is complete (a replacement member, or one too
				// many): charge this pod like any other.
			case g != nil && g.res != nil:
				need = quota.Amount{} // held by the gang's reservation
			default:
				// The first member (or the first after the gang's hold
				// expired) reserves room for every member still to come.
				need = req.Amount.Times(int64(size - members))
				newGangRes = true
				subject = fmt.Sprintf("gang %s (%d pods x %s; %d not yet admitted)", req.Gang.Name, size, req.Amount, size-members)
			}
		}
	}

	switch {
	case !known:
		out.Reason = UnlimitedTeam
	case need.IsZero():
		out.Reason = GangReserved
	default:
		d := cfg.Check(team, v.usage(cfg), need)
		if !d.Allowed {
			msgs := make([]string, len(d.Shortfalls))
			for i, s := range d.Shortfalls {
				msgs[i] = s.Message(subject)
			}
			if n := v.queuedPods(cfg, team); n > 0 {
				msgs = append(msgs, fmt.Sprintf("team %s also has %d pods in Rota's queue, not counted here", team, n))
			}
			return deny(QuotaExceeded, strings.Join(msgs, "; "))
		}
		out.Reason = WithinQuota
		if !d.Borrowed.IsZero() {
			out.Reason = Borrowed
		}
	}
	out.Allowed = true
	if req.DryRun {
		return out
	}

	// Reserve the pod, and for a gang count it as a member and (re)start the
	// hold on the gang's remaining slots.
	expires := now.Add(v.o.InFlightTTL)
	r := &podRes{uid: req.UID, bucket: bk, amt: req.Amount, expires: expires}
	if req.Gang != nil {
		r.gang = req.Gang.Key
	}
	v.addPodRes(k, r)
	if req.Gang != nil {
		v.updateGang(req.Gang.Key, req.Gang.Size, req.Amount, func(g *gang) {
			g.reserved++
			if newGangRes || g.res != nil {
				g.res = &gangRes{bucket: bk, expires: expires}
			}
		})
		if newGangRes || (g != nil && g.res != nil) {
			v.push(expiry{key: req.Gang.Key, gang: true, at: expires})
		}
	}
	return out
}

// gangMismatch compares a member with the gang's other members.
func gangMismatch(req Request, g *gang) string {
	if g == nil {
		return ""
	}
	if g.size > 0 && req.Gang.Size > 0 && g.size != req.Gang.Size {
		return fmt.Sprintf("gang %s: this pod says the gang has %d pods but its other members say %d; give every member the same gang size",
			req.Gang.Name, req.Gang.Size, g.size)
	}
	if g.perMember != req.Amount {
		return fmt.Sprintf("gang %s: this pod asks for %s but the gang's other members ask for %s each; every member must ask for the same",
			req.Gang.Name, req.Amount, g.perMember)
	}
	return ""
}

// tooLarge checks a whole gang against everything c has; where names it
// ("the whole cluster has").
func tooLarge(req Request, total quota.Amount, c Caps, where string) string {
	switch {
	case c.TotalGPUs > 0 && total.GPUs > int64(c.TotalGPUs):
		return fmt.Sprintf("gang %s needs %d GPUs in total (%d pods x %s) but %s %d; it can never run: make the gang smaller",
			req.Gang.Name, total.GPUs, req.Gang.Size, req.Amount, where, c.TotalGPUs)
	case c.TotalMemoryMiB > 0 && total.MemoryMiB > c.TotalMemoryMiB:
		return fmt.Sprintf("gang %s needs %s of GPU memory in total (%d pods x %s) but %s %s; it can never run: make the gang smaller",
			req.Gang.Name, total.MemoryMiB, req.Gang.Size, req.Amount.MemoryMiB, where, c.TotalMemoryMiB)
	}
	return ""
}

func (v *View) noConfig() Outcome {
	return Outcome{Reason: NoConfig, Message: fmt.Sprintf(
		"Rota's quota configuration (%s) is not loaded yet, so GPU pods cannot be admitted; try again in a minute, or ask a cluster admin to check the webhook's log",
		v.o.ConfigSource)}
}

// teamChecks finds the team a request is charged to and applies what
// refuses a pod of it whatever the quota: the unknown-team policy and the
// priority ceiling. denied reports a refusal, in out.
func (v *View) teamChecks(cfg *quota.Config, bk bucketKey, req Request) (out Outcome, t quota.Team, known, denied bool) {
	team := v.teamOf(cfg, bk)
	t, known = cfg.Team(team)
	out = Outcome{Team: team}
	deny := func(r Reason, msg string) (Outcome, quota.Team, bool, bool) {
		out.Reason, out.Message = r, msg
		return out, t, known, true
	}
	if !known && cfg.Policy() == quota.DenyUnknown {
		if team == "" {
			return deny(NoTeam, fmt.Sprintf(
				"namespace %s has no %s label, so Rota cannot charge its GPU use to a team; ask a cluster admin to label it (kubectl label namespace %s %s=<team>)",
				req.Namespace, v.o.Names.TeamLabel, req.Namespace, v.o.Names.TeamLabel))
		}
		return deny(UnknownTeam, fmt.Sprintf(
			"team %s has no GPU quota in Rota's quota configuration (%s); ask a cluster admin to add the team",
			team, v.o.ConfigSource))
	}
	if known && req.Priority != nil && !t.PriorityAllowed(*req.Priority) {
		return deny(PriorityCeiling, fmt.Sprintf(
			"team %s may use pod priority up to %d; this pod has priority %d; choose a lower PriorityClass",
			team, *t.MaxPriority, *req.Priority))
	}
	return out, t, known, false
}

func (v *View) neverFits(cfg *quota.Config, team string, req Request, total quota.Amount) string {
	t, _ := cfg.Team(team)
	reach := cfg.Reachable(team)
	g, b, p := t.Guarantee(), t.Borrow.Amount(), cfg.SharedPool.Amount()
	if total.GPUs > reach.GPUs {
		return fmt.Sprintf("gang %s needs %d GPUs in total (%d pods x %s) but team %s can never have more than %d (quota %d + borrow limit %d, shared pool %d); make the gang smaller or ask for more quota",
			req.Gang.Name, total.GPUs, req.Gang.Size, req.Amount, team, reach.GPUs, g.GPUs, b.GPUs, p.GPUs)
	}
	return fmt.Sprintf("gang %s needs %s of GPU memory in total (%d pods x %s) but team %s can never have more than %s (quota %s + borrow limit %s, shared pool %s); make the gang smaller or ask for more quota",
		req.Gang.Name, total.MemoryMiB, req.Gang.Size, contract.MiB(req.Amount.MemoryMiB), team, reach.MemoryMiB, g.MemoryMiB, b.MemoryMiB, p.MemoryMiB)
}
