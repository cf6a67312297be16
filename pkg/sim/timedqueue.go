package sim

import (
	"math"
	"strconv"
	"time"

	"github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
)

// queuePass is one pass of Rota's queue (pkg/queue.Plan) over every
// waiting job: the controller's order and fair share, with the replay's
// placement (place) as the Fitter. Quota counts running jobs only: a job
// starts in the same step it is admitted. Jobs without a team, and all jobs
// when the replay has no quota, are charged to unlimited accounts.
//
// With reservations, the reservation pass follows and sets the claims; when
// it plans a job that could start now (room that earlier claims kept from
// it), the queue pass runs again, at most a few times.
//
// With reclaim, a reclaim follows each pass; when it evicted jobs, the
// queue pass runs again, at most maxReclaimsPerStep times in one step.
func (t *timed) queuePass() error {
	t.expireReclaimHolds()
	for i := 0; ; i++ {
		res, byKey, err := t.queueOnce()
		if err != nil {
			return err
		}
		if t.rsv != nil {
			if t.rsv.pass(t, res, byKey) && i < 2 {
				continue
			}
			return nil
		}
		if t.cfg.Reclaim == ReclaimOff || i >= maxReclaimsPerStep || len(res.Waiting) == 0 {
			return nil
		}
		ok, err := t.reclaim(t.lastIn, t.lastWs, res, byKey)
		if err != nil || !ok {
			return err
		}
	}
}

// maxReclaimsPerStep bounds the reclaims at one simulated time.
const maxReclaimsPerStep = 8

// queueOnce is one queue.Plan pass; it returns the statuses of the jobs
// left waiting, by key, and the jobs by key.
func (t *timed) queueOnce() (queue.Result, map[string]*jobState, error) {
	if len(t.held) == 0 {
		t.queuedMilli, t.largeWaitMilli = 0, 0
		return queue.Result{}, nil, nil
	}
	cfg := quota.Config{Teams: map[string]quota.Team{}}
	if t.cfg.Quota != nil {
		cfg = *t.cfg.Quota
		cfg.Teams = make(map[string]quota.Team, len(t.cfg.Quota.Teams)+1)
		for k, v := range t.cfg.Quota.Teams {
			cfg.Teams[k] = v
		}
	}
	in := queue.Input{Config: cfg, Admitted: map[quota.Account]quota.Usage{}, TeamUse: map[string]queue.Use{},
		Capacity: queue.Capacity{GPUs: t.capMilli / MilliPerGPU}}
	byKey := make(map[string]*jobState, len(t.held))
	for _, js := range t.held {
		team := js.job.Team
		if _, ok := cfg.Teams[team]; !ok {
			cfg.Teams[team] = quota.Team{GPUs: math.MaxInt32, GPUMemoryGiB: math.MaxInt32}
		}
		key := strconv.Itoa(js.idx)
		byKey[key] = js
		shape := js.key + "/" + strconv.Itoa(js.job.Size)
		if t.rsv != nil {
			// Whether a job fits depends on its declared end and on whose
			// claims it meets, not on its shape alone: the Fitter's own
			// cache (reservations.fits) decides what a failure implies.
			shape = ""
		}
		w := queue.Workload{Key: key, Team: team, Accounts: []quota.Account{{Team: team}},
			Priority: js.job.Priority, Members: 1, Present: 1, PerMember: js.job.quotaNeed(),
			Created: t0.Add(durationOf(js.job.Arrive)), Shape: shape}
		if t.rsv != nil && js.job.Declared > 0 {
			w.Ends = t0.Add(durationOf(t.now + js.job.Declared))
		}
		if d := js.job.Deadline; d > 0 {
			w.LatestStart = t0.Add(durationOf(d - js.job.planned()))
		}
		in.Queued = append(in.Queued, w)
	}
	if t.cfg.Reclaim != ReclaimOff {
		t.lastWs = make(map[string]*queue.Workload, len(in.Queued))
		for i := range in.Queued {
			w := in.Queued[i] // a copy: Plan may reorder its input
			t.lastWs[w.Key] = &w
		}
	}
	if t.rsv != nil && t.rsv.protect {
		// Protected heads keep their team's quota (queue.Input.Protected),
		// from the running jobs' declared ends.
		now := t0.Add(durationOf(t.now))
		in.Protected = func(w *queue.Workload) bool { return t.rsv.policy.Protects(w, now) }
		in.Releases = map[quota.Account][]queue.Release{}
		for _, js := range t.gone {
			if js.job.Declared > 0 && js.job.Team != "" {
				a := quota.Account{Team: js.job.Team}
				in.Releases[a] = append(in.Releases[a], queue.Release{At: t0.Add(durationOf(js.start + js.job.Declared)),
					Amount: js.job.quotaNeed()})
			}
		}
	}
	for team, u := range t.usage {
		in.Admitted[quota.Account{Team: team}] = u
	}
	for team, m := range t.teamMilli {
		in.TeamUse[team] = queue.Use{GPUs: m / MilliPerGPU}
	}
	in.Config = cfg
	if t.cfg.DeadlineLead > 0 {
		in.Now, in.DeadlineLead = t0.Add(durationOf(t.now)), durationOf(t.cfg.DeadlineLead)
	}
	if hl := t.cfg.FairShareHalfLife; hl > 0 {
		// The shares held since the last pass are those now: use changes
		// only at events, and every event is followed by a pass.
		shares := make(map[string]float64, len(in.TeamUse))
		for team, u := range in.TeamUse {
			shares[team] = queue.DominantShare(u, in.Capacity)
		}
		if t.hist.HalfLife == 0 {
			t.hist = queue.History{HalfLife: durationOf(hl), At: t0.Add(durationOf(t.now))}
		}
		t.hist = t.hist.Observe(shares, t0.Add(durationOf(t.now)))
		in.Past = t.hist.Share
	}
	t.lastIn = in
	var perr error
	var failed failures
	if t.rsv != nil {
		failed = failures{}
	}
	res := queue.Plan(in, queue.FitterFunc(func(w *queue.Workload, _ quota.Account) (bool, string) {
		if perr != nil {
			return false, "stopped"
		}
		js := byKey[w.Key]
		if failed != nil && failed.covers(t, js) {
			return false, "no room"
		}
		ok, err := t.place(js)
		if err != nil {
			perr = err
			return false, err.Error()
		}
		if !ok {
			if failed != nil {
				failed.add(t, js)
			}
			return false, "no room"
		}
		return true, ""
	}))
	if perr != nil {
		return res, byKey, perr
	}
	// Admitted work waiting for room (quota allows it): what LostGPUHours
	// weighs idle GPUs against, as the FIFO mode's admitted queue.
	t.queuedMilli, t.largeWaitMilli = 0, 0
	for key, st := range res.Waiting {
		byKey[key].forQuota = st.Reason == queue.WaitQuota
		if st.Reason == queue.WaitRoom || st.Reason == queue.WaitTurn {
			t.queuedMilli += byKey[key].job.gpuMilli()
			t.largeWaitMilli += largeGangMilli(byKey[key].job)
		}
	}
	if len(res.Admitted) == 0 {
		return res, byKey, nil
	}
	started := make(map[*jobState]bool, len(res.Admitted))
	for _, a := range res.Admitted {
		js := byKey[a.Workload.Key]
		js.admitted = js.start
		started[js] = true
	}
	keep := t.held[:0]
	for _, js := range t.held {
		if !started[js] {
			keep = append(keep, js)
		}
	}
	clear(t.held[len(keep):])
	t.held = keep
	return res, byKey, nil
}

// jain is Jain's fairness index of the teams' weighted GPU shares now, over
// the teams that run or wait; ok is false with fewer than two such teams.
func (t *timed) jain() (float64, bool) {
	active := map[string]bool{}
	for team, m := range t.teamMilli {
		if m > 0 && team != "" {
			active[team] = true
		}
	}
	for _, js := range t.held {
		if js.job.Team != "" {
			active[js.job.Team] = true
		}
	}
	for _, js := range t.queue {
		if js.job.Team != "" {
			active[js.job.Team] = true
		}
	}
	if len(active) < 2 {
		return 0, false
	}
	var sum, sq float64
	for team := range active {
		w := 1.0
		if t.cfg.Quota != nil {
			if tm, ok := t.cfg.Quota.Team(team); ok {
				w = tm.EffectiveWeight()
			}
		}
		x := float64(t.teamMilli[team]) / MilliPerGPU / w
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1, true
	}
	return sum * sum / (float64(len(active)) * sq), true
}

// t0 is the replay's time zero for queue ages.
var t0 = time.Unix(0, 0).UTC()

// durationOf converts simulated seconds to a duration for queue ages.
func durationOf(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
