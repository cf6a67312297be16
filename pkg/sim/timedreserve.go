package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/reserve"
)

// Reservation configures reservation and backfill in a timed replay
// (TimedConfig.Reserve): the queue controller's reservation policy, run
// after every queue pass, and how pods that declared no runtime are read.
type Reservation struct {
	// Policy is pkg/reserve's policy (its zero fields take the package's
	// defaults; Tiers is set by the replay).
	Policy reserve.Policy
	// DefaultRuntime, when positive, is the estimated runtime (seconds) of a
	// running pod that declared none: reservations expect it to end then
	// (an estimate; it still never backfills). 0: such a pod never ends as
	// far as reservations go.
	DefaultRuntime float64
	// ProtectQuota keeps a protected head's team quota for it while it
	// waits for quota (queue.Input.Protected): later work of its team is
	// admitted only if it ends before that quota is expected back.
	ProtectQuota bool
}

// DeclareOptions say how jobs declare a maximum runtime (DeclareRuntimes).
type DeclareOptions struct {
	// FactorMin and FactorMax bound the factor, drawn uniformly, by which a
	// declared runtime exceeds the real one (1 and 3: users over-estimate
	// by up to 3x). A factor below 1 declares less than the job needs: the
	// kubelet ends it at its declared runtime.
	FactorMin, FactorMax float64
	// Undeclared is the share of jobs, drawn at random, that declare none.
	Undeclared float64
	Seed       uint64
}

// DeclareRuntimes returns a copy of jobs with Declared set: Duration times
// a factor drawn from [FactorMin, FactorMax], or none for a share
// Undeclared of them. The draws use their own random stream, so the jobs
// are otherwise unchanged.
func DeclareRuntimes(jobs []Job, o DeclareOptions) ([]Job, error) {
	var errs []error
	if !(o.FactorMin > 0) || !(o.FactorMax >= o.FactorMin) || math.IsInf(o.FactorMax, 0) {
		errs = append(errs, fmt.Errorf("runtime factor %v..%v: want 0 < min <= max", o.FactorMin, o.FactorMax))
	}
	if !(o.Undeclared >= 0 && o.Undeclared <= 1) {
		errs = append(errs, fmt.Errorf("undeclared share %v: want 0..1", o.Undeclared))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x72756e74696d65))
	out := slices.Clone(jobs)
	for i := range out {
		undeclared := rng.Float64() < o.Undeclared
		f := o.FactorMin + rng.Float64()*(o.FactorMax-o.FactorMin)
		out[i].Declared = 0
		if !undeclared {
			out[i].Declared = out[i].Duration * f
		}
	}
	return out, nil
}

// reservations is the replay's reservation state: what the policy's
// records would hold in the API.
type reservations struct {
	policy  reserve.Policy
	def     time.Duration
	protect bool
	// records are the jobs' reservation records (reserve.Record), by job
	// name; holding the jobs with claims now; ever the jobs ever held.
	records map[string]reserve.Record
	holding map[string]bool
	ever    map[string]bool
}

func newReservations(c Reservation, tiers int) *reservations {
	p := c.Policy
	p.Tiers = tiers
	return &reservations{policy: p.WithDefaults(), def: durationOf(c.DefaultRuntime), protect: c.ProtectQuota,
		records: map[string]reserve.Record{}, holding: map[string]bool{}, ever: map[string]bool{}}
}

// clock is the replay's clock as a time.
func (t *timed) clock() time.Time { return t0.Add(durationOf(t.now)) }

// ends returns, for job j starting now, its request's declared end (zero:
// none) and its allocation's expected end (declared, or estimated from the
// default runtime). Without reservations both are zero.
func (t *timed) ends(j Job) (declared, expected time.Time, estimated bool) {
	if t.rsv == nil {
		return time.Time{}, time.Time{}, false
	}
	now := t.clock()
	declared, _ = reserve.Ends(now, now, durationOf(j.Declared), 0)
	expected, estimated = reserve.Ends(now, now, durationOf(j.Declared), t.rsv.def)
	return declared, expected, estimated
}

// countBackfill counts a pod placed on GPUs held for another job, and
// breaches: such a pod that the claim does not let in (no declared end, or
// one after the held job's expected start).
func (t *timed) countBackfill(a ledger.Allocation, declared time.Time, ni *ledger.NodeInfo) {
	if ni == nil || ni.Claim == nil || ni.Claim.Job == cmp.Or(a.Gang, a.Pod) {
		return
	}
	held := ni.HeldGPUs()
	for _, g := range a.GPUs {
		if slices.Contains(held, g.Index) {
			t.res.Backfilled++
			if !ni.Claim.Allows(cmp.Or(a.Gang, a.Pod), declared) {
				t.res.HeldBreached++
			}
			return
		}
	}
}

// started forgets a job's reservation once it runs and drops its claims at
// once (the next reservation pass would; until then they would still hold
// room on the nodes the job did not take).
func (r *reservations) started(t *timed, name string) {
	delete(r.records, name)
	if !r.holding[name] {
		return
	}
	delete(r.holding, name)
	claims := slices.DeleteFunc(t.l.Claims(), func(c ledger.Claim) bool { return c.Job == name })
	t.l.SetClaims(claims)
	t.snap = t.l.Snapshot()
}

// pass is the reservation pass after a queue pass: the policy decides from
// the waiting jobs' statuses which jobs hold room, and its claims replace
// the ledger's. It reports whether a held job could start now (the queue
// pass should run again).
func (r *reservations) pass(t *timed, res queue.Result, byKey map[string]*jobState) bool {
	now := t.clock()
	qs := make([]reserve.Queued, 0, len(res.Waiting))
	for key, st := range res.Waiting {
		js := byKey[key]
		if js.req.GPUs == 0 {
			continue // only jobs of whole GPUs are reserved for
		}
		qs = append(qs, reserve.Queued{
			Job:      reserve.Job{Key: js.job.Name, Gang: js.job.Size > 1, Member: js.req, Members: js.job.Size},
			Priority: js.job.Priority, Created: t0.Add(durationOf(js.job.Arrive)), Status: st, Record: r.records[js.job.Name]})
	}
	decisions, claims := r.policy.Pass(qs, t.snap, now)
	clear(r.holding)
	again := false
	for _, d := range decisions {
		r.records[d.Key] = d.Record
		if d.Released {
			t.res.Released++
		}
		if d.Plan == nil {
			continue
		}
		r.holding[d.Key], r.ever[d.Key] = true, true
		if !d.Plan.Start.IsZero() && !d.Plan.Start.After(now) {
			again = true
		}
	}
	t.res.Reserved = len(r.ever)
	t.l.SetClaims(claims)
	t.snap = t.l.Snapshot()
	t.heldIdle = 0
	for _, c := range claims {
		ni := t.snap.Node(c.Node)
		if ni == nil {
			continue
		}
		held := ni.HeldGPUs()
		for s, g := range ni.Node.GPUs {
			if ni.Idle(s) && slices.Contains(held, g.Index) {
				t.heldIdle++
			}
		}
	}
	return again
}

// failures remembers, within one queue pass, which shapes failed with
// which declared ends. A job that meets claims fits wherever a job of the
// same shape that ends later fits (a claim lets a pod in only when it ends
// by the expected start; one with no declared end never), so a failure at
// end E implies a failure at any later end and with none. Jobs that hold a
// reservation are always tried (their own claims are open to them).
type failures map[string]*failure

type failure struct {
	// finite: a job with a declared end failed, the earliest such end min;
	// never: a job with no declared end failed.
	finite, never bool
	min           time.Time
}

func failKey(js *jobState) string { return js.key + "/" + strconv.Itoa(js.job.Size) }

func (f failures) covers(t *timed, js *jobState) bool {
	if t.rsv.holding[js.job.Name] {
		return false
	}
	x := f[failKey(js)]
	if x == nil {
		return false
	}
	ends, _, _ := t.ends(js.job)
	if ends.IsZero() {
		return x.never || x.finite
	}
	return x.finite && !ends.Before(x.min)
}

func (f failures) add(t *timed, js *jobState) {
	if t.rsv.holding[js.job.Name] {
		return
	}
	k := failKey(js)
	x := f[k]
	if x == nil {
		x = &failure{}
		f[k] = x
	}
	ends, _, _ := t.ends(js.job)
	switch {
	case ends.IsZero():
		x.never = true
	case !x.finite || ends.Before(x.min):
		x.finite, x.min = true, ends
	}
}
