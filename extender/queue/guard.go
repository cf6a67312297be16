package queue

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// GuardOptions configures a Guard: the same pods, namespaces and quota the
// queue controller reads.
type GuardOptions struct {
	Names contract.Names
	// Records decides which admission records the guard believes, as the
	// queue does.
	Records       podreq.Records
	MemoryUnitMiB contract.MiB
	// Parser is the process's one parse of pods' requests; nil makes one.
	Parser     *podreq.Parser
	Pods       cache.SharedIndexInformer
	Namespaces cache.SharedIndexInformer
	Quota      func() (cfg *quota.Config, ok bool)
	// StopCost and UrgentPriority keep a team's pods inside its minimum
	// runtime (quota minRuntime) from a preemptor below UrgentPriority (0:
	// none is urgent); Now is the clock (nil: time.Now).
	StopCost       stopcost.Policy
	UrgentPriority int32
	Now            func() time.Time
}

// Guard keeps the queue's guarantees in kube-scheduler's own priority
// preemption: the extender's preempt verb asks it which victims must stay
// (pkg/queue.Spared: never a team taken below its guarantee for another
// team's pod). It reads the informers on each call, so it needs no queue
// pass and answers on every replica.
type Guard struct{ o GuardOptions }

// NewGuard builds a Guard.
func NewGuard(o GuardOptions) *Guard {
	if o.MemoryUnitMiB <= 0 {
		o.MemoryUnitMiB = contract.DefaultMemoryUnitMiB
	}
	if o.Parser == nil {
		o.Parser = podreq.NewParser(podreq.Options{Names: o.Names, MemoryUnitMiB: o.MemoryUnitMiB}, o.Records, 0)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Guard{o: o}
}

// For returns what a preemption for preemptor must leave alone: given the
// victims one node's choice would evict, the ones (by pod UID) to keep, and
// why. The teams' admitted use is read from the informer once here, not per
// node the scheduler proposes. Nothing is kept when the quota configuration
// names no team or does not parse (nothing was promised, or nothing can be
// known).
func (g *Guard) For(preemptor *corev1.Pod) func(victims []*ledger.Allocation) (map[string]bool, string) {
	q, ok := g.o.Quota()
	if !ok || q == nil || len(q.Teams) == 0 {
		return func([]*ledger.Allocation) (map[string]bool, string) { return nil, "" }
	}
	cfg := *q
	teamOf := func(p *corev1.Pod) string {
		return podreq.Team(p, g.namespaceLabels(p.Namespace), g.o.Names, cfg.AllowPodTeamOverride)
	}
	admitted := map[quota.Account]quota.Usage{}
	for _, obj := range g.o.Pods.GetStore().List() {
		p, ok := obj.(*corev1.Pod)
		if !ok || podreq.Terminal(p) || p.DeletionTimestamp != nil || podreq.Queued(p, g.o.Names) {
			continue
		}
		team := teamOf(p)
		if _, named := cfg.Teams[team]; !named {
			continue // promised nothing: never spared, its use is not needed
		}
		if acct, amt, ok := g.charge(cfg, p, team); ok {
			u := admitted[acct]
			u.Running = u.Running.Add(amt)
			admitted[acct] = u
		}
	}
	preemptorTeam := teamOf(preemptor)
	urgent := g.o.UrgentPriority > 0 && preemptor.Spec.Priority != nil && *preemptor.Spec.Priority >= g.o.UrgentPriority
	now := g.o.Now()
	return func(victims []*ledger.Allocation) (map[string]bool, string) {
		var vs []pkgqueue.Victim
		uidsOf := map[quota.Account][]string{}
		keep := map[string]bool{}
		var whys []string
		for _, a := range victims {
			obj, exists, err := g.o.Pods.GetStore().GetByKey(a.Pod)
			p, isPod := obj.(*corev1.Pod)
			if err != nil || !exists || !isPod {
				continue
			}
			team := teamOf(p)
			pol := g.o.StopCost
			if pol.TeamMinRuntime = cfg.TeamMinRuntime(team); !urgent && stopcost.Young(a.Stop, now, pol) {
				keep[a.PodUID] = true
				whys = append(whys, fmt.Sprintf("%s runs less than team %s's minimum runtime %s", a.Pod, team, stopcost.MinRuntime(a.Stop, pol)))
				continue
			}
			acct, amt, ok := g.charge(cfg, p, team)
			if !ok {
				continue
			}
			vs = append(vs, pkgqueue.Victim{Key: a.Pod, Team: acct.Team, Account: acct, Amount: amt})
			uidsOf[acct] = append(uidsOf[acct], a.PodUID)
		}
		spared := pkgqueue.Spared(cfg, admitted, preemptorTeam, vs)
		if len(spared) == 0 && len(keep) == 0 {
			return nil, ""
		}
		for _, s := range spared {
			for _, uid := range uidsOf[s.Account] {
				keep[uid] = true
			}
			whys = append(whys, s.Why)
		}
		return keep, strings.Join(whys, "; ")
	}
}

func (g *Guard) namespaceLabels(ns string) map[string]string {
	obj, exists, err := g.o.Namespaces.GetStore().GetByKey(ns)
	if err != nil || !exists {
		return nil
	}
	if n, ok := obj.(*corev1.Namespace); ok {
		return n.Labels
	}
	if m, ok := obj.(interface{ GetLabels() map[string]string }); ok {
		return m.GetLabels()
	}
	return nil
}

// charge is what an admitted GPU pod counts against its team's quota: the
// account (its believed admission record's, else the first its team and
// models allow) and its GPUs and GPU memory. It is false for a pod that
// asks for none of Rota's resources or whose request does not parse.
func (g *Guard) charge(cfg quota.Config, pod *corev1.Pod, team string) (quota.Account, quota.Amount, bool) {
	if !podreq.Wants(pod, g.o.Names) {
		return quota.Account{}, quota.Amount{}, false
	}
	p := g.o.Parser.Of(pod)
	if p.Err != nil {
		return quota.Account{}, quota.Amount{}, false
	}
	acct, _ := accountFrom(cfg, team, p.Models, p.Admission)
	return acct, quota.AmountOf(p.Request.GPUs, p.Request.MemoryUnits, g.o.MemoryUnitMiB), true
}
