package sim

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/stopcost"
)

// ReclaimMode says whether and how the time-aware replay reclaims GPUs a
// team lent (TimedConfig.Reclaim).
type ReclaimMode string

const (
	// ReclaimOff: no reclaim; a team within its guarantee waits until
	// borrowed work ends.
	ReclaimOff ReclaimMode = ""
	// ReclaimNewest: pkg/queue.Reclaim without lost work, so the newest
	// admitted work goes first (the rule before lost work counted).
	ReclaimNewest ReclaimMode = "newest"
	// ReclaimLostWork: pkg/queue.Reclaim with each victim's lost work
	// (pkg/stopcost): the least lost work goes first.
	ReclaimLostWork ReclaimMode = "lost-work"
)

// ReclaimOptions are the queue controller's reclaim settings.
type ReclaimOptions struct {
	// MaxPreemptibleGangSize: members of larger gangs are never evicted
	// (0: any gang may be).
	MaxPreemptibleGangSize int
	// Cooldown is how long, in seconds, a job that reclaimed waits before
	// it reclaims again (0: DefaultReclaimCooldown).
	Cooldown float64
	// DefaultInterval is the checkpoint interval, in seconds, assumed for
	// a job that declares none (0: DefaultCheckpointInterval).
	DefaultInterval float64
	// QuotaOnly evicts whatever frees the quota, as the queue controller
	// did before it checked room: the freed GPUs may be where the job
	// cannot go. False (the controller now): a reclaim evicts only when the
	// job would fit with the victims gone.
	QuotaOnly bool
}

// DefaultReclaimCooldown and DefaultCheckpointInterval are the queue
// controller's and the extender's defaults, in seconds.
const (
	DefaultReclaimCooldown    = 60.0
	DefaultCheckpointInterval = 1800.0
)

// Eviction is one job evicted by reclaim.
type Eviction struct {
	T float64
	// Job was evicted for For; Team is its team.
	Job, For, Team string
	GPUs           float64
	// Lost is the work it lost, GPU-seconds: GPUs x the time since its
	// last checkpoint.
	Lost float64
	// TeamGPUsAfter is its team's running GPUs once it left;
	// GuaranteeGPUs the team's guarantee.
	TeamGPUsAfter, GuaranteeGPUs float64
}

// CheckpointIntervals are the intervals DrawCheckpoints draws from, in
// seconds; 0 declares none.
var CheckpointIntervals = []float64{600, 1800, 3600, 7200, 0}

// DrawCheckpoints returns a copy of jobs with a checkpoint interval drawn
// uniformly from CheckpointIntervals (0: the job declares none, and is
// taken to checkpoint at the default interval from its start) and a phase
// (its first checkpoint comes that long after each start) drawn uniformly
// below the interval. The draws use their own random stream.
func DrawCheckpoints(jobs []Job, seed uint64) []Job {
	rng := rand.New(rand.NewPCG(seed, 0x636b7074))
	out := slices.Clone(jobs)
	for i := range out {
		iv := CheckpointIntervals[rng.IntN(len(CheckpointIntervals))]
		ph := rng.Float64() * iv
		out[i].Checkpoint, out[i].CheckpointPhase = iv, ph
	}
	return out
}

// DrawDeadlines gives a share of the jobs, drawn from seed, a deadline:
// their arrival plus their duration times a slack drawn from 1.2 to 4, as
// a user who asks for a result by a time would. A job given a deadline
// that declares no runtime declares 1.25 times its duration (a deadline
// helps only with a runtime: the latest start is the deadline less it).
// Other jobs are unchanged.
func DrawDeadlines(jobs []Job, share float64, seed uint64) []Job {
	rng := rand.New(rand.NewPCG(seed, 0x646c696e))
	out := slices.Clone(jobs)
	for i := range out {
		if rng.Float64() < share {
			j := &out[i]
			j.Deadline = j.Arrive + j.Duration*(1.2+2.8*rng.Float64())
			if j.Declared == 0 {
				j.Declared = 1.25 * j.Duration
			}
		}
	}
	return out
}

// planned is the runtime the job declares (0: none), which a deadline's
// latest start subtracts, as podreq.LatestStart does.
func (j Job) planned() float64 { return j.Declared }

// stopPolicy is the replay's pkg/stopcost policy for team.
func (t *timed) stopPolicy(team string) stopcost.Policy {
	p := stopcost.Policy{DefaultInterval: durationOf(cmp0(t.cfg.ReclaimOptions.DefaultInterval, DefaultCheckpointInterval))}
	if t.cfg.Quota != nil {
		p.TeamMinRuntime = t.cfg.Quota.TeamMinRuntime(team)
	}
	return p
}

func cmp0(v, def float64) float64 {
	if v > 0 {
		return v
	}
	return def
}

// stopFacts are what a running job says about stopping it now: its
// start, GPUs, declared interval and, once one passed, its last checkpoint.
func (t *timed) stopFacts(js *jobState) stopcost.Facts {
	j := js.job
	f := stopcost.Facts{Started: t0.Add(durationOf(js.start)), GPUs: float64(j.gpuMilli()) / MilliPerGPU,
		Interval: durationOf(j.Checkpoint)}
	if iv := j.Checkpoint; iv > 0 {
		if since := t.now - js.start - j.CheckpointPhase; since >= 0 {
			f.LastCheckpoint = t0.Add(durationOf(js.start + j.CheckpointPhase + math.Floor(since/iv)*iv))
		}
	}
	return f
}

// reclaim runs after a queue pass, as the queue controller does: for the
// first job (in queue order) that waits for room and whose team stays
// within its guarantee, pkg/queue.Reclaim chooses running jobs of teams
// above their guarantee to evict. One reclaim per pass; it reports whether
// it evicted anything.
func (t *timed) reclaim(in queue.Input, ws map[string]*queue.Workload, res queue.Result, byKey map[string]*jobState) (bool, error) {
	if t.cfg.Quota == nil {
		return false, nil
	}
	var keys []string
	for _, k := range queue.ReclaimOrder(in.Config, res, func(k string) *queue.Workload { return ws[k] }) {
		js := byKey[k]
		if _, ok := t.cfg.Quota.Teams[js.job.Team]; !ok {
			continue
		}
		if js.reclaimedAt >= 0 && t.now-js.reclaimedAt < cmp0(t.cfg.ReclaimOptions.Cooldown, DefaultReclaimCooldown) {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return false, nil
	}
	now := t0.Add(durationOf(t.now))
	running := map[string]*jobState{}
	var victims []queue.Victim
	for _, js := range t.gone {
		j := js.job
		if _, ok := t.cfg.Quota.Teams[j.Team]; !ok || j.quotaNeed().IsZero() {
			continue
		}
		key := strconv.Itoa(js.idx)
		running[key] = js
		f, p := t.stopFacts(js), t.stopPolicy(j.Team)
		v := queue.Victim{Key: key, Team: j.Team, Account: quota.Account{Team: j.Team}, Amount: j.quotaNeed(),
			Preemptible: true, AdmittedAt: t0.Add(durationOf(js.start)), Young: stopcost.Young(f, now, p)}
		v.Protected = j.Size > 1 && t.cfg.ReclaimOptions.MaxPreemptibleGangSize > 0 && j.Size > t.cfg.ReclaimOptions.MaxPreemptibleGangSize
		if t.cfg.Reclaim == ReclaimLostWork {
			v.LostWork = stopcost.LostWork(f, now, p)
		}
		victims = append(victims, v)
	}
	admitted := map[quota.Account]quota.Usage{}
	for team, u := range t.usage {
		admitted[quota.Account{Team: team}] = u
	}
	for _, k := range keys {
		js := byKey[k]
		chosen := queue.Reclaim(in.Config, admitted, ws[k], quota.Account{Team: js.job.Team}, victims)
		if len(chosen) == 0 {
			continue
		}
		var claims []ledger.Claim
		if !t.cfg.ReclaimOptions.QuotaOnly {
			if claims = t.roomWithout(js, chosen, running); len(claims) == 0 {
				t.res.ReclaimsWithoutRoom++
				continue
			}
		}
		js.reclaimedAt = t.now
		t.res.Reclaims++
		for _, v := range chosen {
			if err := t.evict(running[v.Key], js.job.Name); err != nil {
				return false, err
			}
		}
		if len(claims) > 0 {
			// The freed room is held for js, as the queue controller
			// holds it while the evicted pods stop.
			if t.reclaimHolds == nil {
				t.reclaimHolds = map[string][]ledger.Claim{}
			}
			t.reclaimHolds[js.job.Name] = claims
			if t.reclaimHoldUntil == nil {
				t.reclaimHoldUntil = map[string]float64{}
			}
			t.reclaimHoldUntil[js.job.Name] = t.now + ReclaimHoldFor
			t.setReclaimClaims()
		}
		return true, nil
	}
	return false, nil
}

// evict stops a running job: it loses the work since its last checkpoint,
// gives back its GPUs and quota, and waits again, keeping its arrival; the
// lost part is run again.
func (t *timed) evict(js *jobState, forJob string) error {
	if js == nil || js.start < 0 {
		return errors.New("evicting a job that does not run")
	}
	i := slices.Index(t.gone, js)
	if i < 0 {
		return fmt.Errorf("job %s runs but is not in the departures", js.job.Name)
	}
	j := js.job
	lost := stopcost.SinceCheckpoint(t.stopFacts(js), t0.Add(durationOf(t.now)), t.stopPolicy(j.Team)).Seconds()
	lost = math.Min(lost, t.now-js.start)
	js.done += t.now - js.start - lost
	heap.Remove(&t.gone, i)
	t.release(js)
	gpus := float64(j.gpuMilli()) / MilliPerGPU
	ev := Eviction{T: t.now, Job: j.Name, For: forJob, Team: j.Team, GPUs: gpus, Lost: gpus * lost,
		TeamGPUsAfter: float64(t.teamMilli[j.Team]) / MilliPerGPU}
	if tm, ok := t.cfg.Quota.Team(j.Team); ok {
		ev.GuaranteeGPUs = guaranteeGPUs(tm)
	}
	t.res.Evictions = append(t.res.Evictions, ev)
	t.res.LostWorkGPUHours += ev.Lost / 3600
	js.evicted++
	js.start, js.end = -1, -1
	js.queuedSince = t.now
	t.held = append(t.held, js)
	return nil
}

// roomWithout returns the claims that would hold room for js with the
// chosen victims' GPUs free (one per node), or none when js would not fit
// then: a pod on the first node it fits (placement.Fit), a gang where
// placement.PlanGang puts it, as place would.
func (t *timed) roomWithout(js *jobState, chosen []queue.Victim, running map[string]*jobState) []ledger.Claim {
	var uids []string
	for _, v := range chosen {
		if r := running[v.Key]; r != nil {
			uids = append(uids, r.uids...)
		}
	}
	snap := t.snap.Without(uids...)
	j := js.job
	r := js.req
	if j.Size == 1 {
		for _, name := range t.names {
			if _, reason := placement.Fit(r, snap.Node(name)); reason == nil {
				return []ledger.Claim{r.ClaimOn(name)}
			}
		}
		return nil
	}
	g := placement.Gang{Name: j.Name, Member: r}
	for m := range j.Size {
		g.UIDs = append(g.UIDs, "check-"+strconv.Itoa(m))
	}
	plan, reason := placement.PlanGang(g, snap, nil, t.tiers)
	if reason != nil {
		return nil
	}
	return ledger.ClaimsFor(j.Name, true, r.Models, plan.Allocations)
}

// setReclaimClaims puts the reclaim holds into the ledger (reclaim runs
// without reservations, so they are its only claims).
func (t *timed) setReclaimClaims() {
	var claims []ledger.Claim
	for _, cs := range t.reclaimHolds {
		claims = append(claims, cs...)
	}
	slices.SortFunc(claims, func(a, b ledger.Claim) int { return cmp.Compare(a.Node, b.Node) })
	t.l.SetClaims(claims)
	t.snap = t.l.Snapshot()
}

// unholdReclaimed drops the hold of a job that started.
func (t *timed) unholdReclaimed(name string) {
	if _, ok := t.reclaimHolds[name]; !ok {
		return
	}
	delete(t.reclaimHolds, name)
	delete(t.reclaimHoldUntil, name)
	t.setReclaimClaims()
}

// ReclaimHoldFor is how long, in seconds, reclaim holds the room it freed
// for a job that has not started (the queue controller's default).
const ReclaimHoldFor = 600.0

// expireReclaimHolds drops the holds past their time.
func (t *timed) expireReclaimHolds() {
	changed := false
	for name, until := range t.reclaimHoldUntil {
		if t.now >= until {
			delete(t.reclaimHolds, name)
			delete(t.reclaimHoldUntil, name)
			changed = true
		}
	}
	if changed {
		t.setReclaimClaims()
	}
}
