package queue

import (
	"github.com/rota-sched/rota/extender/room"
	"github.com/rota-sched/rota/pkg/quota"
)

// scope is where pods charged to account a may be placed: GPUs of its
// model, nodes of its team's node pool (quota.Config.PoolOf in the
// configuration in force).
func (c *Controller) scope(a quota.Account) room.Scope {
	s := room.Scope{Model: a.Model}
	if c.o.Quota != nil {
		if cfg, _ := c.o.Quota(); cfg != nil {
			s.Pool = cfg.PoolOf(a.Team)
		}
	}
	return s
}

// scopeOf is scope for a queued workload charged to its first account.
func (c *Controller) scopeOf(wl *workload) room.Scope {
	a := quota.Account{Team: wl.w.Team}
	if len(wl.w.Accounts) > 0 {
		a = wl.w.Accounts[0]
	}
	return c.scope(a)
}
