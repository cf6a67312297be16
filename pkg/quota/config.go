package quota

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
)

// UnknownTeamPolicy says what happens to GPU pods of a team that has no
// entry in the configuration (including pods whose namespace has no team
// label).
type UnknownTeamPolicy string

const (
	// DenyUnknown rejects GPU pods of unknown teams with a message naming the
	// team and the missing label or entry. It is the default: a forgotten
	// namespace label must not mean unlimited GPUs.
	DenyUnknown UnknownTeamPolicy = "deny"
	// UnlimitedUnknown admits GPU pods of unknown teams without quota; their
	// use is not charged to the shared pool.
	UnlimitedUnknown UnknownTeamPolicy = "unlimited"
)

// MaxConfigBytes bounds the configuration document (a ConfigMap holds at
// most 1 MiB).
const MaxConfigBytes = 1 << 20

// Limits bound to keep every sum far from overflow.
const (
	maxGPUs        = 10_000_000
	maxMemoryGiB   = 1_000_000_000
	maxTeamNameLen = 63
)

// Config is the quota configuration. Build it with Parse; the zero value
// denies every GPU pod.
//
// Example (YAML in the ConfigMap; JSON works the same):
//
//	teams:
//	  vision:
//	    gpus: 64            # guaranteed whole GPUs
//	    gpuMemoryGiB: 512   # guaranteed GPU memory shares
//	    borrow: {gpus: 16, gpuMemoryGiB: 128}
//	    maxPriority: 1000   # pods above this priority are rejected
//	sharedPool: {gpus: 32, gpuMemoryGiB: 256}
//	allowPodTeamOverride: false
//	unknownTeams: deny
type Config struct {
	// Teams maps a team name (the value of the team label) to its quota.
	Teams map[string]Team `json:"teams"`
	// SharedPool is what all teams together may use above their guarantees.
	SharedPool Limits `json:"sharedPool"`
	// AllowPodTeamOverride lets a pod's own team label choose the team it is
	// charged to instead of its namespace's label.
	AllowPodTeamOverride bool `json:"allowPodTeamOverride,omitempty"`
	// UnknownTeams is the policy for teams not listed; empty means deny.
	UnknownTeams UnknownTeamPolicy `json:"unknownTeams,omitempty"`
	// Queueing is "on" (the default: GPU pods are gated at creation and
	// admitted by the queue controller) or "off" (pods over quota are
	// refused at creation).
	Queueing QueueingMode `json:"queueing,omitempty"`
	// ModelPools are shared pools per GPU model, for teams with per-model
	// quota; a model without a pool borrows from SharedPool.
	ModelPools map[string]Limits `json:"modelPools,omitempty"`
	// Groups, when set, make the teams a tree (see Group): a team that
	// names its group borrows from that group's pool first, then from the
	// pools above it. Without groups every team borrows from SharedPool.
	Groups map[string]Group `json:"groups,omitempty"`
	// NodePools give teams or groups nodes of their own with a placement
	// policy of their own (see NodePool), keyed by the node-pool label's
	// value.
	NodePools map[string]NodePool `json:"nodePools,omitempty"`
}

// Limits is an amount as written in the configuration.
type Limits struct {
	GPUs         int64 `json:"gpus"`
	GPUMemoryGiB int64 `json:"gpuMemoryGiB"`
}

// Amount converts l to an Amount.
func (l Limits) Amount() Amount {
	return Amount{GPUs: l.GPUs, MemoryMiB: contract.MiB(l.GPUMemoryGiB) * 1024}
}

// Team is one team's quota.
type Team struct {
	// GPUs and GPUMemoryGiB are the guarantee. A resource left out is 0: the
	// team cannot use it without borrowing.
	GPUs         int64 `json:"gpus"`
	GPUMemoryGiB int64 `json:"gpuMemoryGiB"`
	// Borrow is the most the team may take from the shared pool on top of
	// its guarantee.
	Borrow Limits `json:"borrow"`
	// MaxPriority, when set, is the highest pod priority (the value of the
	// pod's PriorityClass) the team may use.
	MaxPriority *int32 `json:"maxPriority,omitempty"`
	// Weight is the team's fair-share weight (default 1): across teams the
	// queue admits next for the team with the lowest dominant share divided
	// by its weight.
	Weight float64 `json:"weight,omitempty"`
	// MaxQueuedPods caps the team's queued pods (default
	// DefaultMaxQueuedPods); a pod beyond it is refused at creation.
	MaxQueuedPods int `json:"maxQueuedPods,omitempty"`
	// MinRuntime is how long the team's running pods are safe from reclaim
	// and preemption (except by urgent work): a Go duration such as "30m".
	// Empty is none.
	MinRuntime string `json:"minRuntime,omitempty"`
	// Defrag lets the queue make room for the team's waiting pods by moving
	// running pods that declared themselves movable, when free GPUs are
	// fragmented (off by default).
	Defrag bool `json:"defrag,omitempty"`
	// Group is the group (Config.Groups) the team belongs to; empty: it
	// borrows from the shared pool alone.
	Group string `json:"group,omitempty"`
	// Models, when set, makes the team's quota per GPU model: GPUs, GPU
	// memory and borrowing count per model, and the team-wide gpus,
	// gpuMemoryGiB and borrow above are not used.
	Models map[string]ModelQuota `json:"models,omitempty"`
}

// Guarantee is the team's guaranteed amount.
func (t Team) Guarantee() Amount {
	return Limits{GPUs: t.GPUs, GPUMemoryGiB: t.GPUMemoryGiB}.Amount()
}

var teamNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// Parse decodes and validates a JSON configuration. Unknown fields,
// duplicate data and every invalid value are errors; all problems are
// reported at once, joined, each a *contract.FieldError.
func Parse(data []byte) (Config, error) {
	if len(data) > MaxConfigBytes {
		return Config{}, &contract.FieldError{Field: "quota", Value: fmt.Sprintf("%d bytes", len(data)),
			Problem: "is too large", Fix: fmt.Sprintf("keep it under %d bytes", MaxConfigBytes)}
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, &contract.FieldError{Field: "quota", Problem: "is not a valid quota document: " + err.Error(),
			Fix: "write teams, sharedPool, groups, nodePools, allowPodTeamOverride and unknownTeams as documented in deploy/admission/quota-config.yaml"}
	}
	if dec.More() {
		return Config{}, &contract.FieldError{Field: "quota", Problem: "has data after the document", Fix: "write exactly one document"}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	// An empty map is no map: written back, it is left out.
	if len(c.Groups) == 0 {
		c.Groups = nil
	}
	if len(c.ModelPools) == 0 {
		c.ModelPools = nil
	}
	if len(c.NodePools) == 0 {
		c.NodePools = nil
	}
	for name, p := range c.NodePools {
		c.NodePools[name] = p.normalized()
	}
	return c, nil
}

// Validate reports every problem in c, joined.
func (c Config) Validate() error {
	var errs []error
	add := func(field string, value any, problem, fix string) {
		v := ""
		if value != nil {
			v = fmt.Sprint(value)
		}
		errs = append(errs, &contract.FieldError{Field: field, Value: v, Problem: problem, Fix: fix})
	}
	limits := func(field string, l Limits) {
		if l.GPUs < 0 || l.GPUs > maxGPUs {
			add(field+".gpus", l.GPUs, "is out of range", fmt.Sprintf("write a whole number of GPUs from 0 to %d", maxGPUs))
		}
		if l.GPUMemoryGiB < 0 || l.GPUMemoryGiB > maxMemoryGiB {
			add(field+".gpuMemoryGiB", l.GPUMemoryGiB, "is out of range", fmt.Sprintf("write GiB from 0 to %d", maxMemoryGiB))
		}
	}
	switch c.UnknownTeams {
	case "", DenyUnknown, UnlimitedUnknown:
	default:
		add("unknownTeams", c.UnknownTeams, "is not a known policy", `write "deny" or "unlimited"`)
	}
	switch c.Queueing {
	case "", QueueingOn, QueueingOff:
	default:
		add("queueing", c.Queueing, "is not a known mode", `write "on" or "off"`)
	}
	limits("sharedPool", c.SharedPool)
	pools := make([]string, 0, len(c.ModelPools))
	for m := range c.ModelPools {
		pools = append(pools, m)
	}
	slices.Sort(pools)
	for _, m := range pools {
		limits("modelPools["+m+"]", c.ModelPools[m])
	}
	names := make([]string, 0, len(c.Teams))
	for name := range c.Teams {
		names = append(names, name)
	}
	slices.Sort(names) // report problems in a stable order
	for _, name := range names {
		t := c.Teams[name]
		f := "teams." + name
		if len(name) > maxTeamNameLen || !teamNameRE.MatchString(name) {
			add("teams", name, "is not a valid team name",
				"use the value of the team label: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit")
		}
		limits(f, Limits{GPUs: t.GPUs, GPUMemoryGiB: t.GPUMemoryGiB})
		limits(f+".borrow", t.Borrow)
		validateModels(f, t, add, limits)
		if t.MinRuntime != "" {
			if d, err := time.ParseDuration(t.MinRuntime); err != nil || d < 0 || d > maxMinRuntime {
				add(f+".minRuntime", t.MinRuntime, "is not a duration from 0 to 30 days", `write a duration such as "30m"`)
			}
		}
	}
	validateGroups(c, add, limits)
	validatePools(c, add)
	return errors.Join(errs...)
}

// maxMinRuntime bounds a team's minimum runtime.
const maxMinRuntime = 30 * 24 * time.Hour

// TeamMinRuntime is team's minimum runtime (0 for none or an unknown
// team; Validate refused a bad one).
func (c Config) TeamMinRuntime(team string) time.Duration {
	t, ok := c.Teams[team]
	if !ok || t.MinRuntime == "" {
		return 0
	}
	d, err := time.ParseDuration(t.MinRuntime)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

// TeamDefrag reports whether the queue may move pods to make room for
// team's waiting pods (false for an unknown team).
func (c Config) TeamDefrag(team string) bool { return c.Teams[team].Defrag }

// Policy returns the effective unknown-team policy.
func (c Config) Policy() UnknownTeamPolicy {
	if c.UnknownTeams == "" {
		return DenyUnknown
	}
	return c.UnknownTeams
}

// Team returns the quota of a team and whether it is configured.
func (c Config) Team(name string) (Team, bool) {
	t, ok := c.Teams[name]
	return t, ok
}

// Reachable is the most a team can ever hold: its guarantee plus what it may
// borrow, limited by the size of the shared pool.
func (c Config) Reachable(team string) Amount {
	t, ok := c.Teams[team]
	if !ok {
		return Amount{}
	}
	if c.Nested() {
		return c.ReachableAccount(Account{Team: team})
	}
	b, p := t.Borrow.Amount(), c.SharedPool.Amount()
	return t.Guarantee().Add(Amount{GPUs: min(b.GPUs, p.GPUs), MemoryMiB: min(b.MemoryMiB, p.MemoryMiB)})
}

// PriorityAllowed reports whether a team may run pods at priority p.
func (t Team) PriorityAllowed(p int32) bool {
	return t.MaxPriority == nil || p <= *t.MaxPriority
}
