package quota

import (
	"fmt"
	"strings"

	"github.com/rota-sched/rota/pkg/contract"
)

// Resource names one of the two resources quota counts.
type Resource string

const (
	GPUs      Resource = "gpus"
	GPUMemory Resource = "gpuMemory"
)

// Decision is the answer of Check.
type Decision struct {
	Allowed bool
	// Borrowed is how much of the request comes from the shared pool.
	Borrowed Amount
	// Shortfalls lists each resource that does not fit; empty when Allowed.
	Shortfalls []Shortfall
}

// Shortfall describes one resource a request does not fit in, with the
// numbers a person needs to act on it. GPU counts are in GPUs, memory in MiB.
type Shortfall struct {
	Team     string
	Resource Resource
	// Quota is the team's guarantee.
	Quota int64
	// Running and Pending are the team's current use.
	Running, Pending int64
	// Need is what the request asks for.
	Need int64
	// Borrowable is what the team could still take from the shared pool now.
	Borrowable int64
	// BorrowLimit is the team's borrow limit; PoolFree the pool's free room.
	BorrowLimit, PoolFree int64
	// Limit, in a nested configuration, names the node of the tree whose
	// limit binds, in words.
	Limit string
}

// Message formats the shortfall; subject names what asks, e.g. "this pod"
// or "gang train-7 (16 pods x 8 GPUs)".
//
//	team vision: quota 64 GPUs, 60 in use or queued (52 running, 8 pending);
//	this pod needs 8; borrowable from shared pool: 0 (team borrow limit 16, pool free 0)
func (s Shortfall) Message(subject string) string {
	f := func(v int64) string { return fmt.Sprint(v) }
	quota := gpus(s.Quota)
	if s.Resource == GPUMemory {
		f = func(v int64) string { return contract.MiB(v).String() }
		quota = contract.MiB(s.Quota).String() + " of GPU memory"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "team %s: quota %s, %s in use or queued (%s running, %s pending); %s needs %s; ",
		s.Team, quota, f(s.Running+s.Pending), f(s.Running), f(s.Pending), subject, f(s.Need))
	if s.Limit != "" {
		fmt.Fprintf(&b, "borrowable now: %s (team borrow limit %s): %s", f(s.Borrowable), f(s.BorrowLimit), s.Limit)
		return b.String()
	}
	fmt.Fprintf(&b, "borrowable from shared pool: %s", f(s.Borrowable))
	if s.BorrowLimit == 0 {
		b.WriteString(" (the team may not borrow)")
	} else {
		fmt.Fprintf(&b, " (team borrow limit %s, shared pool free %s)", f(s.BorrowLimit), f(s.PoolFree))
	}
	return b.String()
}

// PoolUsed is how much of the shared pool the configured teams use: the sum
// over teams of their use above their guarantee. Teams not in c are not
// charged to the pool.
func (c Config) PoolUsed(usage map[string]Usage) Amount {
	var used Amount
	for name, u := range usage {
		t, ok := c.Teams[name]
		if !ok {
			continue
		}
		over := u.Total().Sub(t.Guarantee())
		used = used.Add(Amount{GPUs: max(over.GPUs, 0), MemoryMiB: max(over.MemoryMiB, 0)})
	}
	return used
}

// Check decides whether team may add need to its usage. It does not apply to
// teams missing from c (the caller applies Policy first); for those it
// returns a denial with no shortfalls.
//
// Per resource, with guarantee g, borrow limit b, current use u, the team's
// own borrowing o = max(0, u-g), pool size P and pool use p (all teams):
//
//	headroom = max(0, g-u) + max(0, min(b-o, P-p))
//
// and the request fits when need <= headroom. Example: g=64, b=16, u=60,
// P=32, p=20 (other teams) gives headroom 4 + min(16, 12) = 16.
func (c Config) Check(team string, usage map[string]Usage, need Amount) Decision {
	t, ok := c.Teams[team]
	if !ok {
		return Decision{}
	}
	if c.Nested() {
		byAccount := make(map[Account]Usage, len(usage))
		for name, u := range usage {
			byAccount[Account{Team: name}] = u
		}
		return c.CheckAccount(Account{Team: team}, byAccount, need)
	}
	return check(team, usage[team], t.Guarantee(), t.Borrow.Amount(), c.SharedPool.Amount(), c.PoolUsed(usage), need)
}

// check is Check's rule for one account (named team in shortfalls) with
// usage u, guarantee, borrow limit, pool size and pool use.
func check(team string, u Usage, guarantee, borrow, pool, poolUsed, need Amount) Decision {
	d := Decision{Allowed: true}
	one := func(r Resource, g, b, running, pending, p, pUsed, n int64) {
		used := running + pending
		own := max(0, used-g)
		borrowable := max(0, min(b-own, p-pUsed))
		headroom := max(0, g-used) + borrowable
		if n <= headroom {
			d.Borrowed = d.Borrowed.Add(amountOf(r, max(0, n-max(0, g-used))))
			return
		}
		d.Allowed = false
		d.Shortfalls = append(d.Shortfalls, Shortfall{Team: team, Resource: r, Quota: g, Running: running, Pending: pending,
			Need: n, Borrowable: borrowable, BorrowLimit: b, PoolFree: max(0, p-pUsed)})
	}
	if need.GPUs > 0 {
		one(GPUs, guarantee.GPUs, borrow.GPUs, u.Running.GPUs, u.Pending.GPUs, pool.GPUs, poolUsed.GPUs, need.GPUs)
	}
	if need.MemoryMiB > 0 {
		one(GPUMemory, int64(guarantee.MemoryMiB), int64(borrow.MemoryMiB), int64(u.Running.MemoryMiB), int64(u.Pending.MemoryMiB),
			int64(pool.MemoryMiB), int64(poolUsed.MemoryMiB), int64(need.MemoryMiB))
	}
	if !d.Allowed {
		d.Borrowed = Amount{}
	}
	return d
}

func amountOf(r Resource, v int64) Amount {
	if r == GPUMemory {
		return Amount{MemoryMiB: contract.MiB(v)}
	}
	return Amount{GPUs: v}
}
