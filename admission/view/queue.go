package view

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// Reasons of the queue's admission decisions.
const (
	// Queued: a gated pod accepted into Rota's queue.
	Queued Reason = "queued"
	// QueueFull: the team has its maxQueuedPods queued already.
	QueueFull Reason = "queue_full"
	// NeverFits: a pod larger than every account it may be charged to
	// can ever hold.
	NeverFits Reason = "never_fits"
	// NoAcceptedModel: a team with per-model quota and a pod that accepts
	// none of its models.
	NoAcceptedModel Reason = "no_accepted_model"
	// QueueingIsOff: a pod carries the queue gate where queueing is off.
	QueueingIsOff Reason = "queueing_off"
	// PerModelNeedsQueue: an ungated pod of a team whose quota is per GPU
	// model; only the queue charges per-model quota.
	PerModelNeedsQueue Reason = "per_model_quota_needs_queueing"
)

// Gated reports whether the pod carries Rota's queue gate.
func Gated(pod *corev1.Pod, names contract.Names) bool {
	for _, g := range pod.Spec.SchedulingGates {
		if g.Name == names.QueueGate {
			return true
		}
	}
	return false
}

// QueueingOff reports whether Rota's queue is off for new pods of a
// namespace: the namespace is labelled with queueing off or handed to
// Kueue, or the configuration says queueing: off. source says which, for
// messages ("" when queueing is on).
func (v *View) QueueingOff(namespace string) (off bool, source string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.queueingOff(namespace)
}

func (v *View) queueingOff(namespace string) (bool, string) {
	if v.cfg != nil && !v.cfg.QueueingEnabled() {
		return true, fmt.Sprintf("Rota's quota configuration (%s) says queueing: off", v.o.ConfigSource)
	}
	switch v.nsQueueing[namespace] {
	case contract.QueueingKueue:
		return true, fmt.Sprintf("namespace %s is labelled %s=%s (Kueue queues its workloads)", namespace, v.o.Names.QueueingLabel, contract.QueueingKueue)
	case contract.QueueingOff:
		return true, fmt.Sprintf("namespace %s is labelled %s=%s", namespace, v.o.Names.QueueingLabel, contract.QueueingOff)
	}
	return false, ""
}

// SuspendsJobs reports whether the namespace's top-level Jobs are queued
// suspended: queueing is on there, and it is labelled
// <domain>/queueing=suspend or, with SuspendJobsEverywhere, not labelled
// <domain>/queueing=gate.
func (v *View) SuspendsJobs(namespace string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if off, _ := v.queueingOff(namespace); off {
		return false
	}
	mode := v.nsQueueing[namespace]
	return mode == contract.QueueingSuspend || (v.o.SuspendJobsEverywhere && mode != contract.QueueingGate)
}

// KueueQueues reports whether the namespace is labelled
// <domain>/queueing=kueue: Kueue queues its workloads and its
// ClusterQueues are the quota there, so Rota's queue and quota stand aside.
func (v *View) KueueQueues(namespace string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.nsQueueing[namespace] == contract.QueueingKueue
}

// CapsFor is what the nodes with the given GPU models offer, summed over
// the models. With no models, or when no node has any of them yet, it is
// the whole cluster's Caps and perModel is false.
func (v *View) CapsFor(models []string) (c Caps, perModel bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.capsFor(models)
}

func (v *View) capsFor(models []string) (Caps, bool) {
	var c Caps
	found := false
	for _, m := range models {
		mc, ok := v.modelCaps[m]
		if !ok {
			continue
		}
		found = true
		c.Nodes += mc.Nodes
		c.MaxGPUs = max(c.MaxGPUs, mc.MaxGPUs)
		c.MaxGPUMemoryMiB = max(c.MaxGPUMemoryMiB, mc.MaxGPUMemoryMiB)
		c.TotalGPUs += mc.TotalGPUs
		c.TotalMemoryMiB += mc.TotalMemoryMiB
	}
	if !found {
		return v.caps, false
	}
	return c, true
}

// queuedPods is how many pods team has queued (gated pods the informer
// shows and those just accepted).
func (v *View) queuedPods(cfg *quota.Config, team string) int {
	n := 0
	for k, b := range v.buckets {
		if (b.queuedPods > 0 || b.queuedRes > 0) && v.teamOf(cfg, k) == team {
			n += b.queuedPods + b.queuedRes
		}
	}
	return n
}

// TeamQueue is one team's queued pods.
type TeamQueue struct {
	// Pods counts the queued pods, those the informer shows and those just
	// accepted; Amount is what the shown ones ask for.
	Pods   int
	Amount quota.Amount
}

// Queued returns every team's queued pods (the key "" holds namespaces
// without a team label), for metrics and tests.
func (v *View) Queued() map[string]TeamQueue {
	now := v.o.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.expire(now)
	out := map[string]TeamQueue{}
	for k, b := range v.buckets {
		if b.queuedPods == 0 && b.queuedRes == 0 {
			continue
		}
		t := v.teamOf(v.cfg, k)
		q := out[t]
		q.Pods += b.queuedPods + b.queuedRes
		q.Amount = q.Amount.Add(b.queued)
		out[t] = q
	}
	return out
}

// Queue decides on a pod that carries the queue gate. It refuses only what
// can never run: no configuration, an unknown team (under unknownTeams:
// deny), a priority above the team's ceiling, a gang whose members
// disagree, a pod or whole gang larger than the cluster's GPUs of the
// models it accepts or than every account it may be charged to can ever
// hold, a team with per-model quota and no model the pod accepts, and a
// pod beyond the team's queued-pod cap. Current use is not checked: the
// queue controller admits the pod when there is room. An accepted pod
// holds a place under the cap until the informer shows it (or the
// reservation TTL ends).
func (v *View) Queue(req Request) Outcome {
	now := v.o.Now()
	k := key(req.Namespace, req.Name)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.expire(now)

	cfg := v.cfg
	if cfg == nil {
		return v.noConfig()
	}
	v.dropPodRes(k)
	if off, why := v.queueingOff(req.Namespace); off {
		return Outcome{Reason: QueueingIsOff, Message: fmt.Sprintf(
			"this pod carries scheduling gate %s, but %s, so Rota's queue does not admit it and it would never start; remove the gate from the pod's spec.schedulingGates",
			v.o.Names.QueueGate, why)}
	}
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
	var g *gang
	if req.Gang != nil {
		g = v.gangs[req.Gang.Key]
		if msg := gangMismatch(req, g); msg != "" {
			return deny(GangMismatch, msg)
		}
	}
	if r, msg := v.neverRuns(cfg, req, team, t, known); msg != "" {
		return deny(r, msg)
	}

	queueCap := quota.DefaultMaxQueuedPods
	if known {
		queueCap = t.QueueCap()
	}
	queued := v.queuedPods(cfg, team)
	room := 1
	if req.Gang != nil && req.Gang.Size > 0 {
		members := 0
		if g != nil {
			members = g.seen + g.reserved
		}
		room = max(1, req.Gang.Size-members)
	}
	if room > queueCap {
		return deny(QueueFull, fmt.Sprintf(
			"gang %s has %d members but %s may have at most %d pods queued (maxQueuedPods %d), so it can never be queued whole: make the gang smaller or ask a cluster admin to raise maxQueuedPods",
			req.Gang.Name, req.Gang.Size, teamPhrase(team), queueCap, queueCap))
	}
	if queued+room > queueCap {
		msg := fmt.Sprintf("%s has %d pods queued (maxQueuedPods %d); ", teamPhrase(team), queued, queueCap)
		if room > 1 {
			msg += fmt.Sprintf("gang %s needs room for %d more members", req.Gang.Name, room)
		} else {
			msg += "this pod would be one more"
		}
		return deny(QueueFull, msg+": wait until some of them start, or delete queued pods that are no longer needed")
	}

	out.Allowed, out.Reason = true, Queued
	if req.DryRun {
		return out
	}
	r := &podRes{uid: req.UID, bucket: bk, amt: req.Amount, queued: true, expires: now.Add(v.o.InFlightTTL)}
	if req.Gang != nil {
		r.gang = req.Gang.Key
	}
	v.addPodRes(k, r)
	if req.Gang != nil {
		v.updateGang(req.Gang.Key, req.Gang.Size, req.Amount, func(g *gang) { g.reserved++ })
	}
	return out
}

func teamPhrase(team string) string {
	if team == "" {
		return "namespaces without a team label"
	}
	return "team " + team
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// neverHolds says why no account can ever hold total: what each may hold
// at most, with its quota and borrowing, and what the pod or gang needs.
//
//	team vision may hold at most 80 GPUs (64 quota + 16 borrow); this gang needs 128 GPUs (gang train: 16 pods x 8 GPUs); ...
func neverHolds(cfg *quota.Config, accounts []quota.Account, req Request, size int, total quota.Amount) string {
	mem := total.GPUs == 0 // a pod asks for whole GPUs or for memory, not both
	parts := make([]string, len(accounts))
	for i, a := range accounts {
		g, b, pool, _ := cfg.AccountLimits(a)
		p := cfg.PoolSize(pool)
		poolName := "the shared pool"
		if pool != "" {
			poolName = fmt.Sprintf("model pool %q", pool)
		}
		reach := cfg.ReachableAccount(a)
		var s string
		if path := cfg.Path(a.Team); cfg.Nested() && pool == "" && a.Model == "" && len(path) > 0 {
			// The tree's pools and borrow limits bound it (pkg/quota.Group);
			// a team under the shared pool is told as in a flat configuration.
			via := "the pools of groups " + quoteList(path) + " and the shared pool, within their borrow limits"
			if mem {
				s = fmt.Sprintf("at most %s of GPU memory (%s quota + %s borrowed from %s", reach.MemoryMiB, g.MemoryMiB, reach.MemoryMiB-g.MemoryMiB, via)
			} else {
				s = fmt.Sprintf("at most %s (%d quota + %d borrowed from %s", gpuCount(reach.GPUs), g.GPUs, reach.GPUs-g.GPUs, via)
			}
		} else if mem {
			s = fmt.Sprintf("at most %s of GPU memory (%s quota + %s borrow", reach.MemoryMiB, g.MemoryMiB, min(b.MemoryMiB, p.MemoryMiB))
			if p.MemoryMiB < b.MemoryMiB {
				s += fmt.Sprintf(": borrow limit %s, %s %s", b.MemoryMiB, poolName, p.MemoryMiB)
			}
		} else {
			s = fmt.Sprintf("at most %s (%d quota + %d borrow", gpuCount(reach.GPUs), g.GPUs, min(b.GPUs, p.GPUs))
			if p.GPUs < b.GPUs {
				s += fmt.Sprintf(": borrow limit %d, %s %d", b.GPUs, poolName, p.GPUs)
			}
		}
		s += ")"
		if a.Model != "" {
			s += fmt.Sprintf(" of GPU model %q", a.Model)
		}
		parts[i] = s
	}
	need := gpuCount(total.GPUs)
	if mem {
		need = total.MemoryMiB.String() + " of GPU memory"
	}
	subject := "this pod needs " + need
	if size > 1 {
		subject = fmt.Sprintf("this gang needs %s (gang %s: %d pods x %s)", need, req.Gang.Name, size, req.Amount)
	}
	return fmt.Sprintf("team %s may hold %s; %s, so it can never run: make it smaller or ask a cluster admin for more quota",
		accounts[0].Team, strings.Join(parts, ", "), subject)
}

func gpuCount(n int64) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// poolFit checks a queued pod, and its whole gang, against the node pool
// its team places on (quota.Config.PoolOf; the nodes without a pool for a
// team with none), when the configuration has node pools and that pool
// has nodes: a pod larger than the pool's largest node, or a gang larger
// than the pool, can never run. Callers hold mu.
func (v *View) poolFit(cfg *quota.Config, team string, req Request, total quota.Amount) string {
	if len(cfg.NodePools) == 0 {
		return ""
	}
	pool := cfg.PoolOf(team)
	c, ok := v.poolCaps[pool]
	if !ok || c.Nodes == 0 {
		return "" // a pool being set up: its nodes may come
	}
	where, verb := fmt.Sprintf("node pool %s (where team %s's GPU pods go)", pool, team), "has"
	if pool == "" {
		where, verb = fmt.Sprintf("the nodes without a node pool (where team %s's GPU pods go)", team), "have"
	}
	switch {
	case req.Amount.GPUs > 0 && req.Amount.GPUs > int64(c.MaxGPUs):
		return fmt.Sprintf("the pod asks for %d GPUs but the largest node of %s has %d, so it can never run; split the job into a gang of smaller pods",
			req.Amount.GPUs, where, c.MaxGPUs)
	case req.Amount.GPUs == 0 && req.Amount.MemoryMiB > c.MaxGPUMemoryMiB:
		return fmt.Sprintf("the pod asks for %s of GPU memory on one GPU but the largest GPU of %s has %s, so it can never run",
			req.Amount.MemoryMiB, where, c.MaxGPUMemoryMiB)
	}
	if req.Gang != nil && req.Gang.Size > 0 {
		return tooLarge(req, total, c, where+" "+verb)
	}
	return ""
}

// WorkloadEverRuns applies to a whole workload queued suspended (a Job or
// JobSet whose pods do not exist yet; req is one of its planned pods, with
// the gang its pods will form) what Queue refuses of a gated pod because
// it can never run: the team's policy and priority ceiling, a pod or gang
// larger than the cluster or than every account it may be charged to can
// ever hold, a team with per-model quota and no model it accepts. Nothing
// is reserved, and the queued-pod cap does not apply: the workload's pods
// do not exist while it waits.
func (v *View) WorkloadEverRuns(req Request) Outcome {
	v.mu.Lock()
	defer v.mu.Unlock()
	cfg := v.cfg
	if cfg == nil {
		return v.noConfig()
	}
	out, t, known, denied := v.teamChecks(cfg, bucketKey{ns: req.Namespace, podTeam: req.PodTeam}, req)
	if denied {
		return out
	}
	if r, msg := v.neverRuns(cfg, req, out.Team, t, known); msg != "" {
		out.Reason, out.Message = r, msg
		return out
	}
	out.Allowed, out.Reason = true, Queued
	return out
}

// neverRuns is why a queued request of the team can never run whatever the
// queue holds now, with its reason; "" when it can. v.mu is held.
func (v *View) neverRuns(cfg *quota.Config, req Request, team string, t quota.Team, known bool) (Reason, string) {
	size := 1
	if req.Gang != nil {
		size = max(req.Gang.Size, 1)
	}
	total := req.Amount.Times(int64(size))
	caps, perModel := v.capsFor(req.Models)
	if req.Gang != nil && req.Gang.Size > 0 {
		where := "the whole cluster has"
		if perModel {
			where = fmt.Sprintf("the cluster's nodes with the GPU models it accepts (%s) have", quoteList(req.Models))
		}
		if msg := tooLarge(req, total, caps, where); msg != "" {
			return GangTooLarge, msg
		}
	}
	if msg := v.poolFit(cfg, team, req, total); msg != "" {
		r := NeverFits
		if req.Gang != nil && req.Gang.Size > 0 {
			r = GangTooLarge
		}
		return r, msg
	}
	if known {
		accounts := cfg.Accounts(team, req.Models)
		if len(t.Models) > 0 && len(accounts) == 0 {
			models := make([]string, 0, len(t.Models))
			for m := range t.Models {
				models = append(models, m)
			}
			slices.Sort(models)
			return NoAcceptedModel, fmt.Sprintf(
				"team %s has GPU quota only for GPU models %s; this pod accepts only %s (annotation %s), so it can never run: add one of the team's models to the annotation, or remove the annotation to accept any model",
				team, quoteList(models), quoteList(req.Models), v.o.Names.GPUModelsAnnotation)
		}
		fits := false
		for _, a := range accounts {
			if total.Fits(cfg.ReachableAccount(a)) {
				fits = true
				break
			}
		}
		if !fits {
			r := NeverFits
			if size > 1 {
				r = GangNeverFits
			}
			return r, neverHolds(cfg, accounts, req, size, total)
		}
	}
	return "", ""
}
