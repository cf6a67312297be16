package quota

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// QueueingMode says whether GPU pods over quota are queued or refused.
type QueueingMode string

const (
	// QueueingOn (the default) gates every GPU pod at creation; the queue
	// controller admits it when its team's quota and the cluster have room.
	// Only pods that can never run are refused at creation.
	QueueingOn QueueingMode = "on"
	// QueueingOff refuses, at creation, a GPU pod that would take its team
	// past its quota (Rota's behaviour before queueing).
	QueueingOff QueueingMode = "off"
)

// UnmarshalJSON accepts "on" and "off", and also the booleans true and
// false: YAML reads a bare on/off as a boolean, and an admin who writes
// `queueing: off` means off.
func (m *QueueingMode) UnmarshalJSON(data []byte) error {
	switch string(data) {
	case "true":
		*m = QueueingOn
		return nil
	case "false":
		*m = QueueingOff
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("queueing: want \"on\" or \"off\": %w", err)
	}
	*m = QueueingMode(s)
	return nil
}

// DefaultMaxQueuedPods caps a team's queued (gated) pods when its entry sets
// no maxQueuedPods: abandoned submissions cannot pile up without bound.
const DefaultMaxQueuedPods = 1000

// maxWeight bounds a team's fair-share weight.
const maxWeight = 1000

// ModelQuota is a team's quota for one GPU model.
type ModelQuota struct {
	GPUs         int64  `json:"gpus"`
	GPUMemoryGiB int64  `json:"gpuMemoryGiB"`
	Borrow       Limits `json:"borrow"`
}

// Account is what quota charges: a team, and the GPU model when the team's
// quota is per model. Model is "" for a team that counts all its GPUs
// together.
type Account struct {
	Team, Model string
}

func (a Account) String() string {
	if a.Model == "" {
		return a.Team
	}
	return a.Team + " (" + a.Model + ")"
}

// QueueingEnabled reports whether over-quota pods are queued (the default)
// rather than refused.
func (c Config) QueueingEnabled() bool { return c.Queueing != QueueingOff }

// Weight is the team's fair-share weight: 1 unless configured.
func (t Team) EffectiveWeight() float64 {
	if t.Weight <= 0 {
		return 1
	}
	return t.Weight
}

// QueueCap is the most pods the team may have queued at once.
func (t Team) QueueCap() int {
	if t.MaxQueuedPods <= 0 {
		return DefaultMaxQueuedPods
	}
	return t.MaxQueuedPods
}

// Accounts lists the accounts a pod of team may be charged to, given the
// GPU models it accepts (empty: any model), in the order they are tried: a
// team without per-model quota has one account (model ""); a team with
// per-model quota has one per configured model it accepts, in the order of
// the pod's list (or by name when the pod accepts any). Nil when the team is
// not configured or accepts none of the pod's models.
func (c Config) Accounts(team string, models []string) []Account {
	t, ok := c.Teams[team]
	if !ok {
		return nil
	}
	if len(t.Models) == 0 {
		return []Account{{Team: team}}
	}
	var out []Account
	if len(models) == 0 {
		names := make([]string, 0, len(t.Models))
		for m := range t.Models {
			names = append(names, m)
		}
		sort.Strings(names)
		for _, m := range names {
			out = append(out, Account{Team: team, Model: m})
		}
		return out
	}
	for _, m := range models {
		if _, ok := t.Models[m]; ok && !slices.Contains(out, Account{Team: team, Model: m}) {
			out = append(out, Account{Team: team, Model: m})
		}
	}
	return out
}

// Limits returns an account's guarantee and borrow limit, and the key of the
// shared pool it borrows from ("" is sharedPool; a model named in
// modelPools borrows from that model's pool). ok is false for an account
// the configuration does not have.
func (c Config) AccountLimits(a Account) (guarantee, borrow Amount, pool string, ok bool) {
	t, found := c.Teams[a.Team]
	if !found {
		return Amount{}, Amount{}, "", false
	}
	if a.Model == "" {
		if len(t.Models) > 0 {
			return Amount{}, Amount{}, "", false
		}
		return t.Guarantee(), t.Borrow.Amount(), "", true
	}
	mq, found := t.Models[a.Model]
	if !found {
		return Amount{}, Amount{}, "", false
	}
	if _, perModel := c.ModelPools[a.Model]; perModel {
		pool = a.Model
	}
	return Limits{GPUs: mq.GPUs, GPUMemoryGiB: mq.GPUMemoryGiB}.Amount(), mq.Borrow.Amount(), pool, true
}

// PoolSize is the size of a shared pool by key ("" is sharedPool).
func (c Config) PoolSize(pool string) Amount {
	if pool == "" {
		return c.SharedPool.Amount()
	}
	return c.ModelPools[pool].Amount()
}

// ReachableAccount is the most an account can ever hold: its guarantee plus
// what it may borrow, limited by the size of its pool.
func (c Config) ReachableAccount(a Account) Amount {
	g, b, pool, ok := c.AccountLimits(a)
	if !ok {
		return Amount{}
	}
	if c.Nested() && pool == "" {
		return c.reachableTree(a)
	}
	p := c.PoolSize(pool)
	return g.Add(Amount{GPUs: min(b.GPUs, p.GPUs), MemoryMiB: min(b.MemoryMiB, p.MemoryMiB)})
}

// AccountPoolUsed is how much of one shared pool the accounts that borrow
// from it use: the sum of their use above their guarantees.
func (c Config) AccountPoolUsed(pool string, usage map[Account]Usage) Amount {
	var used Amount
	for a, u := range usage {
		g, _, p, ok := c.AccountLimits(a)
		if !ok || p != pool {
			continue
		}
		over := u.Total().Sub(g)
		used = used.Add(Amount{GPUs: max(over.GPUs, 0), MemoryMiB: max(over.MemoryMiB, 0)})
	}
	return used
}

// CheckAccount is Check for one account: whether a may add need to its
// usage, borrowing from its pool (see Check for the rule).
func (c Config) CheckAccount(a Account, usage map[Account]Usage, need Amount) Decision {
	g, b, pool, ok := c.AccountLimits(a)
	if !ok {
		return Decision{}
	}
	if c.Nested() && pool == "" {
		return c.checkTree(a, usage, need)
	}
	return check(a.String(), usage[a], g, b, c.PoolSize(pool), c.AccountPoolUsed(pool, usage), need)
}

func validateModels(field string, t Team, add func(field string, value any, problem, fix string), limits func(string, Limits)) {
	if t.Weight < 0 || t.Weight > maxWeight {
		add(field+".weight", t.Weight, "is out of range", fmt.Sprintf("write a positive weight up to %d (default 1)", maxWeight))
	}
	if t.MaxQueuedPods < 0 || t.MaxQueuedPods > 1_000_000 {
		add(field+".maxQueuedPods", t.MaxQueuedPods, "is out of range", fmt.Sprintf("write 1 to 1000000 (default %d)", DefaultMaxQueuedPods))
	}
	names := make([]string, 0, len(t.Models))
	for m := range t.Models {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		mq := t.Models[m]
		if m == "" || len(m) > 253 {
			add(field+".models", m, "is not a GPU model name", "write the model as the device plugin reports it, e.g. \"NVIDIA H100 80GB HBM3\"")
		}
		limits(field+".models["+m+"]", Limits{GPUs: mq.GPUs, GPUMemoryGiB: mq.GPUMemoryGiB})
		limits(field+".models["+m+"].borrow", mq.Borrow)
	}
}
