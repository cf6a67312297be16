package queue

import (
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	pkgqueue "github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
)

// withUnlimited returns cfg with an entry for team that never runs out: a
// team the configuration does not list, while unknown teams are unlimited.
// The map is copied; cfg is not changed.
func withUnlimited(cfg quota.Config, team string) quota.Config {
	teams := make(map[string]quota.Team, len(cfg.Teams)+1)
	for k, v := range cfg.Teams {
		teams[k] = v
	}
	teams[team] = quota.Team{GPUs: math.MaxInt32, GPUMemoryGiB: math.MaxInt32}
	cfg.Teams = teams
	return cfg
}

func (c *Controller) accounts(cfg quota.Config, team string, models []string) []quota.Account {
	return accountsOf(cfg, team, models)
}

// accountsOf lists the accounts a team's pod asking for models may be
// charged to: an unknown team's own when unknown teams are unlimited.
func accountsOf(cfg quota.Config, team string, models []string) []quota.Account {
	if _, ok := cfg.Teams[team]; !ok {
		if cfg.Policy() == quota.UnlimitedUnknown {
			return []quota.Account{{Team: team}}
		}
		return nil
	}
	return cfg.Accounts(team, models)
}

// accountFrom is the account an admitted pod of team, naming models, is
// charged to: its admission
// record's (adm, nil: none) when the record names the pod's own team and
// an account that team and the pod's models allow, else the first they
// allow. The record only says which of the allowed accounts the queue
// chose; the team is always the pod's (its namespace's label, or its own
// where overrides are allowed), never the record's: where the records
// policy is missing, the pod's owner can rewrite the record, and it would
// otherwise move the pod's GPUs to another team's quota. believed is false
// for a record that names another team or an account the team does not
// have.
func accountFrom(cfg quota.Config, team string, models []string, adm *contract.Admission) (acct quota.Account, believed bool) {
	allowed := accountsOf(cfg, team, models)
	if adm != nil {
		recorded := quota.Account{Team: adm.Team, Model: adm.Model}
		if recorded.Team == team && (slices.Contains(allowed, recorded) || len(allowed) == 0) {
			return recorded, true
		}
	}
	if len(allowed) > 0 {
		return allowed[0], adm == nil
	}
	return quota.Account{Team: team}, adm == nil
}

func (c *Controller) namespaces() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, obj := range c.o.Namespaces.GetStore().List() {
		if n, ok := obj.(metav1.Object); ok {
			out[n.GetName()] = n.GetLabels()
		}
	}
	return out
}

func capacity(s *ledger.Snapshot) pkgqueue.Capacity {
	var c pkgqueue.Capacity
	if s == nil {
		return c
	}
	for _, name := range s.Names() {
		ni := s.Node(name)
		if ni == nil || ni.Node == nil {
			continue
		}
		c.GPUs += int64(len(ni.Node.GPUs))
		for _, g := range ni.Node.GPUs {
			c.MemoryMiB += int64(g.MemoryMiB)
		}
		c.CPUMilli += ni.Node.CPUMilli
	}
	return c
}

// shape groups workloads whose room is decided alike (pkg/queue skips a
// shape that failed in the pass): the same request, and the same declared
// runtime, since a reservation's held room admits a pod by its end.
func shape(r placement.Request, amt quota.Amount, pod *corev1.Pod, names contract.Names) string {
	d, _, _ := podreq.MaxRuntime(pod, names)
	return fmt.Sprintf("%d/%d/%d/%d/%s/%s", amt.GPUs, amt.MemoryMiB, r.CPUMilli, r.HostMemoryMiB, strings.Join(r.Models, ","), d)
}
