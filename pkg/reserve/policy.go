package reserve

import (
	"cmp"
	"slices"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/queue"
)

// Policy says which queued jobs get a reservation and for how long. The
// queue controller and the simulator share it.
type Policy struct {
	// LargeGPUs: a job of at least this many GPUs is reserved for as soon
	// as it waits for room (default 64).
	LargeGPUs int64
	// MaxAge: a smaller job is reserved for once it has waited this long
	// (default 30 minutes).
	MaxAge time.Duration
	// MaxHold bounds a reservation: one whose job has not started this
	// long after it was first held is released (default 2 hours), and the
	// job is not held for again for CoolOff (default 30 minutes). (Counting
	// from the expected start instead was measured in rota-sim: no shorter
	// wait for the largest gangs, and a p99 wait of 4-32 GPU jobs 2.8x
	// longer.)
	MaxHold, CoolOff time.Duration
	// Max bounds how many reservations are held at once (default 4).
	Max int
	// Slack is how much later than the best domain's the previous domain's
	// start may be and still be kept (default 15 minutes).
	Slack time.Duration
	// Tiers is the number of topology tier labels.
	Tiers int
}

// WithDefaults fills the zero fields.
func (p Policy) WithDefaults() Policy {
	p.LargeGPUs = cmp.Or(p.LargeGPUs, 64)
	p.MaxAge = cmp.Or(p.MaxAge, 30*time.Minute)
	p.MaxHold = cmp.Or(p.MaxHold, 2*time.Hour)
	p.CoolOff = cmp.Or(p.CoolOff, 30*time.Minute)
	p.Max = cmp.Or(p.Max, 4)
	p.Slack = cmp.Or(p.Slack, 15*time.Minute)
	return p
}

// Queued is one queued job as the reservation pass sees it.
type Queued struct {
	Job
	Priority int32
	// Created is the job's age for MaxAge (the queue's order key).
	Created time.Time
	// Status is where the queue's pass left it.
	Status queue.Status
	// Candidates are the nodes it may run on (nil: all).
	Candidates []string
	// Record is its reservation as last written (zero: none).
	Record Record
}

// Record is what survives a restart: when the job was first held, in which
// domain, and until when it cools off after a released hold.
type Record struct {
	Since time.Time
	// Until is when the hold lapses (zero in an older record: Since plus
	// MaxHold).
	Until       time.Time
	Domain      string
	CooledUntil time.Time
}

// Decision is the pass's outcome for one job.
type Decision struct {
	Key string
	// Plan is set when the job holds room now.
	Plan *Plan
	// Record is the job's record after the pass (write it back when it
	// changed).
	Record Record
	// Released is set when the pass released the job's hold because it
	// reached MaxHold.
	Released bool
}

// Pass decides the reservations for one queue pass: which jobs are held
// for (the head of a team's queue that quota admits but the cluster has no
// room for, large or old enough), in priority then age order, each on nodes
// no earlier one holds, and which holds lapse. Claims are every held job's
// claims, for ledger.SetClaims.
func (p Policy) Pass(jobs []Queued, snap *ledger.Snapshot, now time.Time) (decisions []Decision, claims []ledger.Claim) {
	p = p.WithDefaults()
	order := slices.Clone(jobs)
	slices.SortFunc(order, func(a, b Queued) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.Created.Compare(b.Created), cmp.Compare(a.Key, b.Key))
	})
	exclude := map[string]bool{}
	held := 0
	for _, q := range order {
		d := Decision{Key: q.Key, Record: q.Record}
		switch {
		case !p.wants(q, now):
			d.Record.Since, d.Record.Until, d.Record.Domain = time.Time{}, time.Time{}, ""
		case !q.Record.Since.IsZero() && !now.Before(p.Until(q.Record)):
			d.Released = true
			d.Record = Record{CooledUntil: now.Add(p.CoolOff)}
		case held >= p.Max:
			// Not now; keep its record so that it keeps its age.
		default:
			plan, why := Make(q.Job, snap, Options{Now: now, Tiers: p.Tiers, Candidates: q.Candidates, Exclude: exclude,
				Prefer: q.Record.Domain, Slack: p.Slack})
			if why != "" {
				break
			}
			held++
			for _, c := range plan.Claims {
				exclude[c.Node] = true
			}
			claims = append(claims, plan.Claims...)
			d.Plan = &plan
			if d.Record.Since.IsZero() {
				d.Record.Since = now
				d.Record.Until = now.Add(p.MaxHold)
			}
			d.Record.Domain = plan.Domain()
		}
		if d.Plan != nil || d.Released || d.Record != q.Record {
			decisions = append(decisions, d)
		}
	}
	return decisions, claims
}

// Until is when a recorded hold lapses: its Until, or for an older
// record without one, Since plus MaxHold.
func (p Policy) Until(r Record) time.Time {
	if !r.Until.IsZero() {
		return r.Until
	}
	return r.Since.Add(p.WithDefaults().MaxHold)
}

// Protects reports whether a queued workload is one the queue must not
// starve of its team's quota (queue.Input.Protected): large, or waiting
// for MaxAge. The same rule picks the jobs room is held for.
func (p Policy) Protects(w *queue.Workload, now time.Time) bool {
	p = p.WithDefaults()
	return w.Need().GPUs >= p.LargeGPUs || !now.Before(w.Created.Add(p.MaxAge))
}

// wants reports whether q should hold room: the head of its team's queue,
// waiting for room (not quota), large or old, not cooling off.
func (p Policy) wants(q Queued, now time.Time) bool {
	if q.Status.Reason != queue.WaitRoom || q.Status.Position != 1 {
		return false
	}
	if now.Before(q.Record.CooledUntil) {
		return false
	}
	gpus := int64(q.Members) * int64(q.Member.GPUs)
	return gpus >= p.LargeGPUs || !now.Before(q.Created.Add(p.MaxAge))
}

// Ends is a pod's expected end for the ledger: its start (now for a pod not
// started) plus its declared maximum runtime, else plus def as an estimate
// (def 0: no expected end).
func Ends(started, now time.Time, declared, def time.Duration) (ends time.Time, estimated bool) {
	if started.IsZero() {
		started = now
	}
	switch {
	case declared > 0:
		return started.Add(declared), false
	case def > 0:
		return started.Add(def), true
	}
	return time.Time{}, false
}
