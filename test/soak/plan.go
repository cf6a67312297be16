package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The faults the soak injects. A kill is SIGKILL (kill -9) and a start
// again after Hold; a pause is SIGSTOP for Hold, past the leases, then
// SIGCONT; a restart stops and starts the process on the same data.
const (
	ExtenderLeaderKill  Kind = "extender-leader-kill"
	ExtenderStandbyKill Kind = "extender-standby-kill"
	ExtenderLeaderPause Kind = "extender-leader-pause"
	WebhookKill         Kind = "webhook-kill"
	WebhookPause        Kind = "webhook-pause"
	PluginKill          Kind = "device-plugin-kill"
	PluginPause         Kind = "device-plugin-pause"
	NodeHeartbeat       Kind = "node-heartbeat-loss"
	SchedulerKill       Kind = "kube-scheduler-kill"
	APIServerRestart    Kind = "kube-apiserver-restart"
	EtcdRestart         Kind = "etcd-restart"
)

// Kinds lists every kind, in report order.
var Kinds = []Kind{ExtenderLeaderKill, ExtenderStandbyKill, ExtenderLeaderPause, WebhookKill, WebhookPause,
	PluginKill, PluginPause, NodeHeartbeat, SchedulerKill, APIServerRestart, EtcdRestart}

// kindSpec is how a kind is drawn: how long it holds, what it targets, and
// the group of faults it never overlaps with.
type kindSpec struct {
	holdMin, holdMax time.Duration
	// targets: "" (none), "webhook" (a replica), "plugin" (a node running
	// a device plugin), "node" (any node).
	targets string
	group   string
}

var specs = map[Kind]kindSpec{
	ExtenderLeaderKill:  {time.Second, 6 * time.Second, "", "extender"},
	ExtenderStandbyKill: {time.Second, 6 * time.Second, "", "extender"},
	// Past the extenders' 15 s lease, so the standby takes over.
	ExtenderLeaderPause: {20 * time.Second, 35 * time.Second, "", "extender"},
	// The webhook faults never overlap: with both replicas down no pod is
	// created, which only delays the Jobs' pods.
	WebhookKill:  {time.Second, 6 * time.Second, "webhook", "webhook"},
	WebhookPause: {20 * time.Second, 35 * time.Second, "webhook", "webhook"},
	PluginKill:   {time.Second, 6 * time.Second, "plugin", "plugin"},
	PluginPause:  {10 * time.Second, 20 * time.Second, "plugin", "plugin"},
	// Past the node lifecycle controller's 50 s grace: the node turns
	// NotReady and is tainted unreachable; it comes back well before the
	// pods' 300 s toleration evicts them.
	NodeHeartbeat:    {60 * time.Second, 90 * time.Second, "node", "node"},
	SchedulerKill:    {time.Second, 5 * time.Second, "", "scheduler"},
	APIServerRestart: {0, 0, "", "storage"},
	EtcdRestart:      {0, 0, "", "storage"},
}

// upgradeLength is the upgrade segment's load; the rolling upgrade and
// back runs beside it and the segment lasts until both end.
const upgradeLength = 2 * time.Minute

// Fault is one fault of the plan.
type Fault struct {
	// Segment is the load segment it happens in; At is from its start.
	Segment int           `json:"segment"`
	At      time.Duration `json:"at"`
	Kind    Kind          `json:"kind"`
	// Target is the webhook replica or the node index (kinds with targets).
	Target int `json:"target"`
	// Hold is how long the fault lasts before the part is started,
	// resumed or heard from again.
	Hold time.Duration `json:"hold"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("segment %d +%3.0fs %-22s", f.Segment+1, f.At.Seconds(), f.Kind)
	if specs[f.Kind].targets != "" {
		s += fmt.Sprintf(" target %d", f.Target)
	}
	if f.Hold > 0 {
		s += fmt.Sprintf(" for %.0fs", f.Hold.Seconds())
	}
	return s
}

// Segment is a stretch of load; a quiet point follows each: load stops,
// every fault has healed, the work drains, and every Rota process is
// measured.
type Segment struct {
	Length time.Duration `json:"length"`
	// Chaos says whether faults are injected in it (not in the warm-up
	// and the clean segment at the end).
	Chaos bool `json:"chaos"`
	// Upgrade says that every Rota part is rolled to the next build and
	// back under the segment's load (no faults are injected in it).
	Upgrade bool `json:"upgrade,omitempty"`
}

// Plan is a soak's fault schedule. A failing run can be rerun with the
// same plan (-plan); the interleavings differ.
type Plan struct {
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration"`
	Nodes    int           `json:"nodes"`
	Plugins  int           `json:"plugins"`
	Webhooks int           `json:"webhooks"`
	Segments []Segment     `json:"segments"`
	Faults   []Fault       `json:"faults"`
}

// NewPlan draws the schedule of a soak of duration d: a warm-up segment,
// chaos segments of about six minutes with the upgrade segment after the
// first, and a clean segment; at least
// one fault of every kind per four minutes of chaos, and at least one in
// all. Faults of one group never overlap, and every fault ends inside its
// segment.
func NewPlan(seed uint64, d time.Duration, nodes, plugins, webhooks int) Plan {
	r := rand.New(rand.NewPCG(seed, 0x50a4))
	p := Plan{Seed: seed, Duration: d, Nodes: nodes, Plugins: plugins, Webhooks: webhooks}
	warm := min(max(d/10, 30*time.Second), 3*time.Minute)
	clean := max(d/6, 45*time.Second)
	chaos := max(d-warm-clean, 2*time.Minute)
	n := max(int((chaos+3*time.Minute)/(6*time.Minute)), 1)
	p.Segments = append(p.Segments, Segment{Length: warm.Round(time.Second)})
	for range n {
		p.Segments = append(p.Segments, Segment{Length: (chaos / time.Duration(n)).Round(time.Second), Chaos: true})
	}
	// Midway, after the first chaos segment, the rolling upgrade and back.
	p.Segments = slices.Insert(p.Segments, 2, Segment{Length: upgradeLength})
	p.Segments[2].Upgrade = true
	p.Segments = append(p.Segments, Segment{Length: clean.Round(time.Second)})

	perKind := max(int(chaos/(4*time.Minute)), 1)
	byGroup := map[string]map[int][]Fault{} // group -> segment -> faults
	var chaosSegs []int
	for i, sg := range p.Segments {
		if sg.Chaos {
			chaosSegs = append(chaosSegs, i)
		}
	}
	next := r.IntN(n)
	for _, k := range Kinds {
		sp := specs[k]
		for range perKind {
			seg := chaosSegs[next%n]
			next++
			f := Fault{Segment: seg, Kind: k, Hold: sp.holdMin}
			if sp.holdMax > sp.holdMin {
				f.Hold += time.Duration(r.Int64N(int64(sp.holdMax - sp.holdMin))).Round(time.Second)
			}
			switch sp.targets {
			case "webhook":
				f.Target = r.IntN(max(webhooks, 1))
			case "plugin":
				f.Target = r.IntN(max(plugins, 1))
			case "node":
				f.Target = r.IntN(max(nodes, 1))
			}
			if byGroup[sp.group] == nil {
				byGroup[sp.group] = map[int][]Fault{}
			}
			byGroup[sp.group][seg] = append(byGroup[sp.group][seg], f)
		}
	}
	const gap = 5 * time.Second
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		for _, seg := range slices.Sorted(maps.Keys(byGroup[g])) {
			fs := byGroup[g][seg]
			length := p.Segments[seg].Length
			var busy time.Duration
			for _, f := range fs {
				busy += f.Hold + gap
			}
			// Spread the group's faults over the segment in a random
			// order with random gaps, one after another.
			r.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
			slack := max(length-busy-gap, 0)
			cuts := make([]time.Duration, len(fs))
			for i := range cuts {
				cuts[i] = time.Duration(r.Int64N(int64(slack) + 1))
			}
			slices.Sort(cuts)
			at := gap
			for i := range fs {
				fs[i].At = (at + cuts[i]).Round(time.Second)
				at += fs[i].Hold + gap
			}
			p.Faults = append(p.Faults, fs...)
		}
	}
	slices.SortFunc(p.Faults, func(a, b Fault) int {
		if a.Segment != b.Segment {
			return a.Segment - b.Segment
		}
		if a.At != b.At {
			return int(a.At - b.At)
		}
		return strings.Compare(string(a.Kind), string(b.Kind))
	})
	return p
}

func (p Plan) hasUpgrade() bool {
	for _, sg := range p.Segments {
		if sg.Upgrade {
			return true
		}
	}
	return false
}

// Counts is the number of faults of each kind.
func (p Plan) Counts() map[Kind]int {
	out := map[Kind]int{}
	for _, f := range p.Faults {
		out[f.Kind]++
	}
	return out
}

// Check refuses a plan the soak cannot run: unknown kinds, targets out of
// range, faults outside their segment.
func (p Plan) Check() error {
	var errs []string
	if len(p.Segments) < 2 {
		errs = append(errs, "fewer than two segments")
	}
	for i, f := range p.Faults {
		sp, ok := specs[f.Kind]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("fault %d: unknown kind %q", i, f.Kind))
			continue
		case f.Segment < 0 || f.Segment >= len(p.Segments):
			errs = append(errs, fmt.Sprintf("fault %d: segment %d of %d", i, f.Segment, len(p.Segments)))
			continue
		case !p.Segments[f.Segment].Chaos:
			errs = append(errs, fmt.Sprintf("fault %d: segment %d has no faults", i, f.Segment))
		case f.At < 0 || f.Hold < 0:
			errs = append(errs, fmt.Sprintf("fault %d: negative time", i))
		}
		limit := map[string]int{"webhook": p.Webhooks, "plugin": p.Plugins, "node": p.Nodes}[sp.targets]
		if sp.targets != "" && (f.Target < 0 || f.Target >= limit) {
			errs = append(errs, fmt.Sprintf("fault %d (%s): target %d, want 0..%d", i, f.Kind, f.Target, limit-1))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("fault plan: %s", strings.Join(errs, "; "))
	}
	return nil
}

// LoadPlan reads a plan written by a soak (plan.json).
func LoadPlan(path string) (Plan, error) {
	var p Plan
	raw, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, p.Check()
}
