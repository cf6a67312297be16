package sim

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/queue"
	"github.com/rota-sched/rota/pkg/quota"
)

// Job is one unit of work in a timed replay: Size identical members placed
// all-or-nothing (Size 1: a plain pod). Times are seconds of simulated time.
type Job struct {
	Name string
	// Team is charged for the job's GPUs against TimedConfig.Quota ("": not
	// charged).
	Team string
	// Kind groups jobs in the report (e.g. "single", "finetune").
	Kind     string
	Member   Pod
	Size     int
	Priority int32
	Arrive   float64
	Duration float64
	// Declared is the job's declared maximum runtime in seconds (0: none;
	// see DeclareRuntimes). The kubelet enforces it (activeDeadlineSeconds),
	// so the job runs min(Duration, Declared); reservations read it (see
	// TimedConfig.Reserve).
	Declared float64
	// Checkpoint is the job's declared checkpoint interval in seconds (0:
	// none; see DrawCheckpoints), CheckpointPhase when, after each start,
	// its first checkpoint comes. Reclaim weighs the work an eviction loses
	// by them (TimedConfig.Reclaim).
	Checkpoint, CheckpointPhase float64
	// Deadline is when the job must end by, in seconds (0: none; see
	// DrawDeadlines). With TimedConfig.DeadlineLead the queue moves it
	// ahead inside its team when its latest start (Deadline less its
	// declared runtime, or its duration when it declares none) comes near.
	Deadline float64
}

// runtime is how long the job runs: its duration, cut at its declared
// maximum runtime.
func (j Job) runtime() float64 {
	if j.Declared > 0 {
		return min(j.Duration, j.Declared)
	}
	return j.Duration
}

// gpuMilli is the job's GPU request in thousandths of a GPU.
func (j Job) gpuMilli() int64 { return int64(j.Size) * j.Member.GPUMilliTotal() }

// OneGPU reports whether the job is a single pod on at most one GPU (a
// whole GPU or a share): the small jobs whose starvation the report tracks.
func (j Job) OneGPU() bool { return j.Size == 1 && j.Member.GPUs == 1 }

// quotaNeed is what the job counts against its team's quota: whole GPUs, or
// memory shares in MiB (one simulated GPU is GPUMemoryMiB).
func (j Job) quotaNeed() quota.Amount {
	switch {
	case j.Member.GPUs == 0:
		return quota.Amount{}
	case j.Member.GPUMilli >= MilliPerGPU:
		return quota.Amount{GPUs: int64(j.Size * j.Member.GPUs)}
	default:
		return quota.Amount{MemoryMiB: contract.MiB(int64(j.Size) * int64(j.Member.GPUMilli))}
	}
}

// TimedConfig is one time-aware replay. Jobs arrive at Arrive, wait in a
// queue until they fit (priority, then arrival order, with backfill: a job
// that fits goes even when an earlier one does not, as kube-scheduler's
// active queue does), run for Duration and leave.
type TimedConfig struct {
	Nodes []Node
	Jobs  []Job
	// Policy scores nodes for single-pod jobs; gangs (Size > 1) are placed by
	// placement.PlanGang (smallest topology tier that holds them all).
	Policy placement.Policy
	// Quota, when set, admits a job only while its team's running plus
	// pending use stays within quota (pkg/quota.Check); other jobs are held
	// in arrival order and retried whenever a job leaves.
	Quota *quota.Config
	// Samples is the number of utilization samples over the arrival window
	// (0: 50).
	Samples int
	// Check runs ledger.Check after every placement (tests).
	Check bool
	// Queue is how waiting jobs are ordered and admitted: QueueFIFO (the
	// default: quota checked in arrival order, then priority-then-arrival
	// placement with backfill) or QueueDRF (Rota's queue controller,
	// pkg/queue: per team priority then age, across teams the lowest
	// weighted dominant share, quota and room decided together).
	Queue QueueMode
	// DeadlineLead, with QueueDRF, is the queue's deadline lead in seconds
	// (pkg/queue.Input.DeadlineLead); 0: no deadline ordering (jobs'
	// deadlines are still counted in TimedResult.Deadlines).
	DeadlineLead float64
	// FairShareHalfLife, with QueueDRF, is fair share's memory in seconds
	// (pkg/queue.History): teams are ordered by current plus decayed past
	// dominant share. 0: current share only.
	FairShareHalfLife float64
	// Label, when set, names the run in tables instead of its policy and
	// queue.
	Label string
	// Reserve, with QueueDRF, turns on reservation and backfill: after each
	// queue pass the reservation policy (pkg/reserve.Policy.Pass) holds
	// room for the heads of the teams' queues that wait for room, and pods
	// backfill held GPUs only when their declared runtime ends by the held
	// job's expected start.
	Reserve *Reservation
	// Reclaim, with QueueDRF and Quota, lets a job whose team stays within
	// its guarantee evict running jobs of teams that borrow above theirs
	// (pkg/queue.Reclaim, after each queue pass, one reclaim per pass).
	// An evicted job loses the work since its last checkpoint
	// (pkg/stopcost), waits again with its arrival kept, and runs the lost
	// part again. ReclaimOff: no reclaim.
	Reclaim        ReclaimMode
	ReclaimOptions ReclaimOptions
}

// QueueMode names a queue discipline of the time-aware replay.
type QueueMode string

const (
	QueueFIFO QueueMode = "fifo"
	QueueDRF  QueueMode = "drf"
)

// UtilPoint is the cluster at one sample time.
type UtilPoint struct {
	T float64
	// Alloc is allocated GPU capacity in percent; QueuedGPUs the GPU
	// request of admitted jobs still waiting.
	Alloc, QueuedGPUs float64
}

// WaitStats summarises the queue waits (start - arrival, quota hold
// included) of one group of jobs, in seconds.
type WaitStats struct {
	Group          string
	Jobs, Placed   int
	P50, P99, Max  float64
	MeanGPUsPerJob float64
}

// TeamStats is one team's quota use over the arrival window.
type TeamStats struct {
	Team string
	// GuaranteeGPUs is the team's guarantee of whole GPUs (its GPU memory
	// guarantee for shares is not included).
	GuaranteeGPUs float64
	// MeanGPUs and PeakGPUs are GPUs running for the team (time-weighted
	// mean, peak); PeakBorrowedGPUs the most above its guarantee.
	MeanGPUs, PeakGPUs, PeakBorrowedGPUs float64
	// Held counts jobs that waited for quota; HoldMax the longest wait.
	Held    int
	HoldMax float64
	// WaitP50 and WaitP99 are the team's queue waits (seconds).
	WaitP50, WaitP99 float64
}

// TimedResult is the outcome of RunTimed.
type TimedResult struct {
	Policy string
	// Label names the run in tables (TimedConfig.Label).
	Label        string
	CapacityGPUs float64
	// Window is the arrival window [0, Window]; End the time the last job
	// left (or the replay stopped because nothing queued could ever fit).
	Window, End float64
	// Jobs counts submitted jobs; Unplaced those still waiting at End.
	Jobs, Placed, Unplaced int
	// Wait is over every job (unplaced ones count their wait until End).
	Wait WaitStats
	// Kinds has one entry per Job.Kind, sorted by name.
	Kinds []WaitStats
	// UtilMean is the time-averaged allocated GPU share (%) over the
	// arrival window; Util the samples.
	UtilMean float64
	Util     []UtilPoint
	// LostGPUHours is GPU capacity idle while admitted work waited for it:
	// the integral of min(idle GPUs, GPU request of queued jobs) over time,
	// in GPU-hours (capacity that fragmentation, CPU stranding or the lack
	// of a whole tier kept from the queue).
	LostGPUHours float64
	// GangPartial counts gangs found partly placed (must be 0; RunTimed
	// returns ErrPartialGang when it is not).
	GangPartial int
	// SmallMaxWait is the longest wait of a one-GPU job (OneGPU), seconds.
	SmallMaxWait float64
	Teams        []TeamStats
	// Queue is the queue discipline; Jain the time-averaged Jain's
	// fairness index of the teams' weighted GPU shares, over the samples
	// where at least two teams ran or waited (1: equal shares; 1/n: one
	// team holds everything); 0 without teams.
	Queue QueueMode
	Jain  float64
	// LargeGangIdleGPUHours is GPU capacity idle while a gang of at least
	// LargeGangGPUs GPUs waited for room: the integral of min(idle GPUs,
	// GPU request of such waiting gangs), in GPU-hours.
	LargeGangIdleGPUHours float64
	// Reserve is set when the replay ran with reservations; the fields
	// below count them.
	Reserve bool
	// Reserved counts jobs that were held for at least once; Released the
	// holds that reached MaxHold; Backfilled the pods placed on GPUs held
	// for another job.
	Reserved, Released, Backfilled int
	// HeldBreached counts pods placed on held GPUs that the claim does not
	// let in (must be 0; RunTimed fails with ErrHeldBreached otherwise).
	HeldBreached int
	// HeldIdleGPUHours is the integral of held GPUs that stood idle.
	HeldIdleGPUHours float64
	// Waits has one entry per job, in Jobs order.
	Waits []JobWait
	// Reclaim is the reclaim mode; Reclaims counts the reclaims,
	// Evictions the jobs they evicted, and LostWorkGPUHours the work the
	// evictions lost (GPUs x time since each job's last checkpoint).
	// ReclaimsWithoutRoom counts the reclaims not made because the job
	// would not fit with the victims gone (ReclaimOptions.QuotaOnly off).
	Reclaim             ReclaimMode
	Reclaims            int
	ReclaimsWithoutRoom int
	Evictions           []Eviction
	LostWorkGPUHours    float64
	// Deadlines counts the jobs that declare a deadline, DeadlinesMet those
	// that ended by it.
	Deadlines, DeadlinesMet int
	// LargeGangs counts gangs of at least LargeGangGPUs GPUs;
	// LargeGangWaitMean and LargeGangWaitMax are their waits (every
	// stretch queued, after an eviction too), seconds.
	LargeGangs                          int
	LargeGangWaitMean, LargeGangWaitMax float64
}

// JobWait is one job's outcome.
type JobWait struct {
	Kind string
	GPUs float64
	// Wait is start - arrival (unplaced: End - arrival), seconds; QuotaWait
	// the part of it the job waited for quota (its team's quota, or what it
	// may borrow, had no room), the rest it waited for room.
	Wait, QuotaWait float64
	// RoomBound is the least the job could have waited for room: until the
	// jobs running when it arrived, leaving at their real ends, free its
	// GPUs, counted over the whole cluster (no topology, no CPU), with
	// nothing else started and nothing preempted. No scheduler that does
	// not preempt can start it sooner.
	RoomBound float64
	Placed    bool
}

// LargeGangGPUs is the size from which a waiting gang counts in
// TimedResult.LargeGangIdleGPUHours (the 64-1024 GPU gangs).
const LargeGangGPUs = 64

// ErrPartialGang reports a gang that was found partly placed.
var ErrPartialGang = errors.New("gang partly placed")

// ErrHeldBreached reports a pod placed on GPUs held for another job that the
// reservation does not let in.
var ErrHeldBreached = errors.New("pod placed on GPUs held for another job")

// jobState is one job's progress.
type jobState struct {
	idx        int
	job        Job
	req        placement.Request
	key        string
	admitted   float64 // time admitted by quota (-1: not yet)
	start, end float64 // -1: not started
	uids       []string
	// quotaWait is how long it waited for quota; forQuota is set while it
	// does (the last queue pass said so).
	quotaWait float64
	forQuota  bool
	// roomBound is the least it could wait for room (see JobWait).
	roomBound float64
	// waited is the time it spent queued before its current run (or
	// until now), queuedSince when it last began to wait; done is the
	// work its checkpoints saved before an eviction, evicted the
	// evictions, reclaimedAt when it last reclaimed (-1: never).
	waited, queuedSince float64
	done                float64
	evicted             int
	runs                int
	reclaimedAt         float64
}

// departure heap: earliest end first, then job index.
type departures []*jobState

func (d departures) Len() int { return len(d) }
func (d departures) Less(a, b int) bool {
	if d[a].end != d[b].end {
		return d[a].end < d[b].end
	}
	return d[a].idx < d[b].idx
}
func (d departures) Swap(a, b int) { d[a], d[b] = d[b], d[a] }
func (d *departures) Push(x any)   { *d = append(*d, x.(*jobState)) }
func (d *departures) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// timed is the state of one RunTimed.
type timed struct {
	cfg      TimedConfig
	l        *ledger.Ledger
	snap     *ledger.Snapshot
	names    []string
	sel      *selector
	tiers    int
	capMilli int64

	allocMilli, queuedMilli int64
	// largeWaitMilli is the GPU request of waiting large gangs; heldIdle
	// the held GPUs that are idle (reservations).
	largeWaitMilli int64
	heldIdle       int
	rsv            *reservations
	// reclaimHolds are the ledger claims holding, for a job reclaim evicted
	// for, the room the evictions freed, by job name (timedreclaim.go).
	// hist is fair share's memory (TimedConfig.FairShareHalfLife).
	hist             queue.History
	reclaimHolds     map[string][]ledger.Claim
	reclaimHoldUntil map[string]float64
	usage            map[string]quota.Usage
	teamMilli        map[string]int64

	queue []*jobState // admitted, waiting; sorted by (priority desc, arrive, idx)
	held  []*jobState // waiting for quota, arrival order
	fresh []*jobState // admitted since the last pass
	gone  departures

	res      TimedResult
	now      float64
	sampleAt []float64
	sampled  int
	teamSum  map[string]float64
	teamPeak map[string]float64
	teamBorr map[string]float64
	teamHeld map[string]int
	teamHold map[string]float64

	jainSum float64
	jainN   int

	// lastIn and lastWs are the latest queue pass's input and workloads,
	// by key (reclaim only).
	lastIn queue.Input
	lastWs map[string]*queue.Workload
}

// RunTimed replays cfg in simulated time. It stops when every job has left,
// or when jobs still wait but nothing runs and nothing arrives (they can
// never fit; they count as unplaced).
func RunTimed(cfg TimedConfig) (TimedResult, error) {
	if len(cfg.Jobs) == 0 {
		return TimedResult{}, ErrNoPods
	}
	if cfg.Policy == nil {
		return TimedResult{}, errors.New("no policy")
	}
	nodes := Cluster(cfg.Nodes)
	t := &timed{cfg: cfg, l: newLedger(nodes), usage: map[string]quota.Usage{}, teamMilli: map[string]int64{},
		teamSum: map[string]float64{}, teamPeak: map[string]float64{}, teamBorr: map[string]float64{},
		teamHeld: map[string]int{}, teamHold: map[string]float64{}}
	for _, n := range nodes {
		t.capMilli += int64(len(n.GPUs)) * MilliPerGPU
		t.tiers = max(t.tiers, len(n.Tiers))
	}
	if t.capMilli == 0 {
		return TimedResult{}, ErrNoCapacity
	}
	t.snap = t.l.Snapshot()
	t.names = t.snap.Names()
	t.sel = newSelector(cfg.Policy, len(t.names))
	if cfg.Reserve != nil {
		if cfg.Queue != QueueDRF {
			return TimedResult{}, errors.New("reservations need the Rota queue (QueueDRF)")
		}
		t.rsv = newReservations(*cfg.Reserve, t.tiers)
	}
	switch cfg.Reclaim {
	case ReclaimOff:
	case ReclaimNewest, ReclaimLostWork:
		if cfg.Queue != QueueDRF || cfg.Quota == nil || cfg.Reserve != nil {
			return TimedResult{}, errors.New("reclaim needs the Rota queue (QueueDRF) with quota, and no reservations")
		}
	default:
		return TimedResult{}, fmt.Errorf("reclaim mode %q: want %q, %q or none", cfg.Reclaim, ReclaimNewest, ReclaimLostWork)
	}

	jobs := make([]*jobState, len(cfg.Jobs))
	for i, j := range cfg.Jobs {
		if j.Size < 1 {
			return TimedResult{}, fmt.Errorf("job %s: size %d: want at least 1", j.Name, j.Size)
		}
		if j.Declared < 0 || math.IsNaN(j.Declared) {
			return TimedResult{}, fmt.Errorf("job %s: declared runtime %v: want 0 (none) or more", j.Name, j.Declared)
		}
		r := j.Member.Request("")
		if cfg.Reserve != nil || (cfg.Reclaim != "" && cfg.Reclaim != ReclaimOff) {
			// Claims (reservations', reclaim's) match a pod to its job by
			// the gang key or the pod name.
			r.Job = j.Name
		}
		jobs[i] = &jobState{idx: i, job: j, req: r, key: shapeKey(r), admitted: -1, start: -1, end: -1,
			queuedSince: j.Arrive, reclaimedAt: -1}
		t.res.Window = max(t.res.Window, j.Arrive)
	}
	arrivals := slices.Clone(jobs)
	slices.SortStableFunc(arrivals, func(a, b *jobState) int { return cmp.Compare(a.job.Arrive, b.job.Arrive) })
	t.res = TimedResult{Policy: cfg.Policy.Name(), Label: cfg.Label, CapacityGPUs: float64(t.capMilli) / MilliPerGPU,
		Jobs: len(jobs), Window: t.res.Window}
	n := cmp.Or(cfg.Samples, 50)
	for k := range n {
		t.sampleAt = append(t.sampleAt, t.res.Window*float64(k)/float64(max(n-1, 1)))
	}

	ai := 0
	for ai < len(arrivals) || len(t.gone) > 0 {
		next := math.Inf(1)
		if ai < len(arrivals) {
			next = arrivals[ai].job.Arrive
		}
		if len(t.gone) > 0 {
			next = min(next, t.gone[0].end)
		}
		t.advance(next)
		// Departures first, then arrivals, then one scheduling pass.
		freed := false
		for len(t.gone) > 0 && t.gone[0].end <= next {
			t.release(heap.Pop(&t.gone).(*jobState))
			freed = true
		}
		for ai < len(arrivals) && arrivals[ai].job.Arrive <= next {
			arrivals[ai].roomBound = t.roomBound(arrivals[ai].job.gpuMilli())
			t.held = append(t.held, arrivals[ai])
			ai++
		}
		if cfg.Queue == QueueDRF {
			if err := t.queuePass(); err != nil {
				return t.res, err
			}
			continue
		}
		t.admit()
		if err := t.schedule(freed); err != nil {
			return t.res, err
		}
	}
	t.advance(t.now)
	t.finish(jobs)
	t.res.Queue = cmp.Or(cfg.Queue, QueueFIFO)
	t.res.Reserve = t.rsv != nil
	t.res.Reclaim = cfg.Reclaim
	if t.jainN > 0 {
		t.res.Jain = t.jainSum / float64(t.jainN)
	}
	if t.res.GangPartial > 0 {
		return t.res, fmt.Errorf("%d gangs: %w", t.res.GangPartial, ErrPartialGang)
	}
	if t.res.HeldBreached > 0 {
		return t.res, fmt.Errorf("%d pods: %w", t.res.HeldBreached, ErrHeldBreached)
	}
	return t.res, nil
}

// advance integrates the time-weighted measures up to to.
func (t *timed) advance(to float64) {
	for t.sampled < len(t.sampleAt) && t.sampleAt[t.sampled] <= to {
		t.res.Util = append(t.res.Util, UtilPoint{T: t.sampleAt[t.sampled],
			Alloc:      100 * float64(t.allocMilli) / float64(t.capMilli),
			QueuedGPUs: float64(t.queuedMilli) / MilliPerGPU})
		if j, ok := t.jain(); ok {
			t.jainSum += j
			t.jainN++
		}
		t.sampled++
	}
	dt := to - t.now
	if dt <= 0 {
		return
	}
	idle := float64(t.capMilli-t.allocMilli) / MilliPerGPU
	t.res.LostGPUHours += math.Min(idle, float64(t.queuedMilli)/MilliPerGPU) * dt / 3600
	t.res.LargeGangIdleGPUHours += math.Min(idle, float64(t.largeWaitMilli)/MilliPerGPU) * dt / 3600
	t.res.HeldIdleGPUHours += float64(t.heldIdle) * dt / 3600
	for _, js := range t.held {
		// The FIFO mode holds only jobs that wait for quota here.
		if js.forQuota || t.cfg.Queue != QueueDRF {
			js.quotaWait += dt
		}
	}
	if w := math.Min(to, t.res.Window) - t.now; w > 0 {
		t.res.UtilMean += 100 * float64(t.allocMilli) / float64(t.capMilli) * w
		for team, m := range t.teamMilli {
			t.teamSum[team] += float64(m) / MilliPerGPU * w
		}
	}
	t.now = to
}

// admit moves held jobs whose team quota has room into the queue, in
// arrival order (a job that does not fit does not block later ones).
func (t *timed) admit() {
	keep := t.held[:0]
	for _, js := range t.held {
		need := js.job.quotaNeed()
		if t.cfg.Quota != nil && js.job.Team != "" && !need.IsZero() {
			if d := t.cfg.Quota.Check(js.job.Team, t.usage, need); !d.Allowed {
				keep = append(keep, js)
				continue
			}
			u := t.usage[js.job.Team]
			u.Pending = u.Pending.Add(need)
			t.usage[js.job.Team] = u
		}
		if js.job.Arrive < t.now {
			t.teamHeld[js.job.Team]++
			t.teamHold[js.job.Team] = max(t.teamHold[js.job.Team], t.now-js.job.Arrive)
		}
		js.admitted = t.now
		t.queuedMilli += js.job.gpuMilli()
		t.fresh = append(t.fresh, js)
	}
	clear(t.held[len(keep):])
	t.held = keep
}

func queueOrder(a, b *jobState) int {
	if c := cmp.Compare(b.job.Priority, a.job.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.job.Arrive, b.job.Arrive); c != 0 {
		return c
	}
	return cmp.Compare(a.idx, b.idx)
}

// schedule is one pass over the queue. When nothing left since the last
// pass, only jobs admitted since then are tried: the others failed on a
// cluster that has only filled up since. Within a pass, a shape that did
// not fit at some gang size is not tried again at that size or larger.
func (t *timed) schedule(freed bool) error {
	try := t.fresh
	t.queue = append(t.queue, t.fresh...)
	t.fresh = nil
	slices.SortStableFunc(t.queue, queueOrder)
	if freed {
		try = t.queue
	} else {
		slices.SortStableFunc(try, queueOrder)
	}
	blocked := map[string]int{}
	placed := map[*jobState]bool{}
	for _, js := range try {
		if s, ok := blocked[js.key]; ok && js.job.Size >= s {
			continue
		}
		ok, err := t.place(js)
		if err != nil {
			return err
		}
		if !ok {
			blocked[js.key] = js.job.Size
			continue
		}
		placed[js] = true
	}
	if len(placed) > 0 {
		t.queue = slices.DeleteFunc(t.queue, func(js *jobState) bool { return placed[js] })
	}
	t.largeWaitMilli = 0
	for _, js := range t.queue {
		t.largeWaitMilli += largeGangMilli(js.job)
	}
	return nil
}

// roomBound is how long until the running jobs, leaving at their ends,
// leave need (thousandths of a GPU) free in the whole cluster.
func (t *timed) roomBound(need int64) float64 {
	free := t.capMilli - t.allocMilli
	if need <= free {
		return 0
	}
	running := slices.Clone([]*jobState(t.gone))
	slices.SortFunc(running, func(a, b *jobState) int { return cmp.Compare(a.end, b.end) })
	for _, js := range running {
		if free += js.job.gpuMilli(); free >= need {
			return js.end - t.now
		}
	}
	return 0 // larger than the cluster: it never fits
}

// largeGangMilli is the job's GPU request when it is a gang of at least
// LargeGangGPUs GPUs, else 0.
func largeGangMilli(j Job) int64 {
	if m := j.gpuMilli(); j.Size > 1 && m >= LargeGangGPUs*MilliPerGPU {
		return m
	}
	return 0
}

// place tries to start js now: one pod through the policy, a gang through
// PlanGang and ReserveAll (all members or none).
func (t *timed) place(js *jobState) (bool, error) {
	j := js.job
	uid := "j" + strconv.Itoa(js.idx)
	ends, aEnds, aEst := t.ends(j)
	if j.Size == 1 {
		r := js.req
		r.UID, r.Pod = uid, j.Name
		r.Ends = ends
		best, c := t.sel.pick(r, t.snap, t.names)
		if best < 0 {
			return false, nil
		}
		ni := t.snap.Node(t.names[best])
		a := c.Allocation(r, ni)
		a.Ends, a.EndsEstimated = aEnds, aEst
		t.countBackfill(a, ends, ni)
		if err := t.l.Reserve(a, time.Time{}); err != nil {
			return false, fmt.Errorf("job %s: reserve on %s: %w", j.Name, ni.Name(), err)
		}
		if err := t.l.Commit(uid); err != nil {
			return false, fmt.Errorf("job %s: commit on %s: %w", j.Name, ni.Name(), err)
		}
		js.uids = []string{uid}
	} else {
		g := placement.Gang{Name: j.Name, Member: js.req}
		g.Member.Ends = ends
		for m := range j.Size {
			g.UIDs = append(g.UIDs, uid+"-"+strconv.Itoa(m))
		}
		plan, reason := placement.PlanGang(g, t.snap, nil, t.tiers)
		if reason != nil {
			return false, nil
		}
		for i := range plan.Allocations {
			a := &plan.Allocations[i]
			a.Ends, a.EndsEstimated = aEnds, aEst
			t.countBackfill(*a, ends, t.snap.Node(a.Node))
		}
		if err := t.l.ReserveAll(plan.Allocations, time.Time{}); err != nil {
			return false, fmt.Errorf("gang %s: %w", j.Name, err)
		}
		for _, u := range g.UIDs {
			if err := t.l.Commit(u); err != nil {
				return false, fmt.Errorf("gang %s: %w", j.Name, err)
			}
		}
		// Invariant 2: every member holds its GPUs, or none does.
		held := 0
		for _, u := range g.UIDs {
			if a, ok := t.l.Get(u); ok && a.State == ledger.Committed {
				held++
			}
		}
		if held != j.Size {
			t.res.GangPartial++
		}
		js.uids = g.UIDs
	}
	t.snap = t.l.Snapshot()
	if t.cfg.Check {
		if errs := t.l.Check(); len(errs) > 0 {
			return false, fmt.Errorf("after job %s: %w: %w", j.Name, ErrViolation, errors.Join(errs...))
		}
	}
	js.start, js.end = t.now, t.now+j.runtime()-js.done
	js.waited += t.now - js.queuedSince
	js.runs++
	heap.Push(&t.gone, js)
	t.unholdReclaimed(j.Name)
	if t.rsv != nil {
		t.rsv.started(t, j.Name)
	}
	m := j.gpuMilli()
	t.allocMilli += m
	t.queuedMilli -= m
	if js.runs == 1 {
		t.res.Placed++
	}
	if need := j.quotaNeed(); j.Team != "" {
		u := t.usage[j.Team]
		if t.cfg.Quota != nil && !need.IsZero() && t.cfg.Queue != QueueDRF {
			u.Pending = u.Pending.Sub(need)
		}
		u.Running = u.Running.Add(need)
		t.usage[j.Team] = u
		t.teamMilli[j.Team] += m
		used := float64(t.teamMilli[j.Team]) / MilliPerGPU
		t.teamPeak[j.Team] = max(t.teamPeak[j.Team], used)
		if t.cfg.Quota != nil {
			if tm, ok := t.cfg.Quota.Team(j.Team); ok {
				t.teamBorr[j.Team] = max(t.teamBorr[j.Team], used-guaranteeGPUs(tm))
			}
		}
	}
	return true, nil
}

func guaranteeGPUs(tm quota.Team) float64 {
	return float64(tm.Guarantee().GPUs)
}

// release ends a running job.
func (t *timed) release(js *jobState) {
	for _, u := range js.uids {
		t.l.Release(u)
	}
	t.snap = t.l.Snapshot()
	j := js.job
	t.allocMilli -= j.gpuMilli()
	if j.Team != "" {
		u := t.usage[j.Team]
		u.Running = u.Running.Sub(j.quotaNeed())
		t.usage[j.Team] = u
		t.teamMilli[j.Team] -= j.gpuMilli()
	}
}

func (t *timed) finish(jobs []*jobState) {
	r := &t.res
	r.End = t.now
	if r.Window > 0 {
		r.UtilMean /= r.Window
	}
	wait := func(js *jobState) float64 {
		if js.start < 0 {
			return js.waited + r.End - js.queuedSince
		}
		return js.waited
	}
	var all []*jobState
	byKind := map[string][]*jobState{}
	for _, js := range jobs {
		all = append(all, js)
		byKind[js.job.Kind] = append(byKind[js.job.Kind], js)
		if js.start < 0 {
			r.Unplaced++
		}
		if js.job.OneGPU() {
			r.SmallMaxWait = max(r.SmallMaxWait, wait(js))
		}
		if d := js.job.Deadline; d > 0 {
			r.Deadlines++
			if js.start >= 0 && js.end <= d {
				r.DeadlinesMet++
			}
		}
		if largeGangMilli(js.job) > 0 {
			r.LargeGangs++
			r.LargeGangWaitMean += wait(js)
			r.LargeGangWaitMax = max(r.LargeGangWaitMax, wait(js))
		}
	}
	if r.LargeGangs > 0 {
		r.LargeGangWaitMean /= float64(r.LargeGangs)
	}
	r.Wait = waitStats("all", all, wait)
	r.Waits = make([]JobWait, len(jobs))
	for i, js := range jobs {
		r.Waits[i] = JobWait{Kind: js.job.Kind, GPUs: float64(js.job.gpuMilli()) / MilliPerGPU, Wait: wait(js), QuotaWait: js.quotaWait,
			RoomBound: js.roomBound, Placed: js.start >= 0}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		r.Kinds = append(r.Kinds, waitStats(k, byKind[k], wait))
	}
	var teams []string
	if t.cfg.Quota != nil {
		for name := range t.cfg.Quota.Teams {
			teams = append(teams, name)
		}
	}
	slices.Sort(teams)
	byTeam := map[string][]*jobState{}
	for _, js := range jobs {
		byTeam[js.job.Team] = append(byTeam[js.job.Team], js)
	}
	for _, name := range teams {
		tm, _ := t.cfg.Quota.Team(name)
		ws := waitStats(name, byTeam[name], wait)
		ts := TeamStats{Team: name, GuaranteeGPUs: guaranteeGPUs(tm), PeakGPUs: t.teamPeak[name],
			PeakBorrowedGPUs: max(t.teamBorr[name], 0), Held: t.teamHeld[name], HoldMax: t.teamHold[name],
			WaitP50: ws.P50, WaitP99: ws.P99}
		if r.Window > 0 {
			ts.MeanGPUs = t.teamSum[name] / r.Window
		}
		r.Teams = append(r.Teams, ts)
	}
}

func waitStats(group string, js []*jobState, wait func(*jobState) float64) WaitStats {
	s := WaitStats{Group: group, Jobs: len(js)}
	w := make([]float64, 0, len(js))
	var gpus float64
	for _, j := range js {
		w = append(w, wait(j))
		if j.start >= 0 {
			s.Placed++
		}
		gpus += float64(j.job.gpuMilli()) / MilliPerGPU
	}
	slices.Sort(w)
	if len(w) > 0 {
		s.P50, s.P99, s.Max = quantile(w, 0.5), quantile(w, 0.99), w[len(w)-1]
		s.MeanGPUsPerJob = gpus / float64(len(w))
	}
	return s
}

// quantile is the nearest-rank quantile of sorted v.
func quantile(v []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}
