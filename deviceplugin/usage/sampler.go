// Package usage samples how much of its GPUs each pod on the node uses and
// marks pods that leave theirs idle.
//
// Every interval the Sampler asks NVML for each GPU's per-process
// utilization samples newer than the last it saw
// (nvmlDeviceGetProcessUtilization), maps each PID to its pod the way leak
// detection does (leak.ProcFS.Owner: the pod UID in /proc/<pid>/cgroup), and
// keeps, for every pod assigned the GPU, one point per interval: the SM
// utilization of its processes (0 when none ran). A pod's utilization on a
// GPU is the mean of its points over the window; a pod whose GPUs all stayed
// below the idle threshold for the idle period is idle. The Publisher writes
// what the Sampler found onto the pods (annotations and a condition), only
// when it changed.
package usage

import (
	"cmp"
	"slices"
	"time"

	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/leak"
	"github.com/rota-sched/rota/pkg/contract"
)

// Source is the NVML the Sampler reads (discovery.NVML, real or mock).
type Source interface {
	ProcessUtilization(uuid string, since uint64) ([]discovery.UtilizationSample, error)
	Processes(uuid string) ([]discovery.Process, error)
}

// Config configures sampling and idle tracking.
type Config struct {
	// Window is how far back a pod's utilization is averaged.
	Window time.Duration
	// IdleBelow is the utilization ratio (0..1) under which a pod's GPUs
	// count as unused.
	IdleBelow float64
	// IdleAfter is how long a pod's utilization must stay under IdleBelow
	// before the pod is idle; 0 turns idle tracking off.
	IdleAfter time.Duration
}

// State says where a pod stands against the idle threshold.
type State int

const (
	// Unknown: a GPU of the pod could not be sampled this time.
	Unknown State = iota
	// Busy: the utilization of some GPU of the pod is at or above IdleBelow.
	Busy
	// Below: under IdleBelow on every GPU, for less than IdleAfter so far.
	Below
	// Idle: under IdleBelow on every GPU for IdleAfter or longer.
	Idle
)

// GPU is a pod's use of one GPU.
type GPU struct {
	UUID string
	// SM is the mean SM utilization ratio (0..1) of the pod's processes over
	// the window.
	SM float64
	// UsedMiB is the GPU memory the pod's processes hold now.
	UsedMiB contract.MiB
}

// Pod is what the Sampler knows about one pod.
type Pod struct {
	UID string
	Pod string // namespace/name
	// GPUs are the pod's assigned GPUs, by UUID.
	GPUs []GPU
	// SM is the mean of the GPUs' SM; UsedMiB their sum.
	SM      float64
	UsedMiB contract.MiB
	State   State
	// BelowSince is when the pod went under IdleBelow (State Below or Idle).
	BelowSince time.Time
}

// Max is the highest SM ratio of the pod's GPUs.
func (p Pod) Max() float64 {
	m := 0.0
	for _, g := range p.GPUs {
		m = max(m, g.SM)
	}
	return m
}

type point struct {
	at time.Time
	sm float64
}

// Sampler keeps the pods' utilization points. It is not safe for concurrent
// use (one sampling loop).
type Sampler struct {
	cfg   Config
	src   Source
	owner func(pid uint32) leak.Owner

	since  map[string]uint64             // GPU -> newest sample timestamp seen
	points map[string]map[string][]point // pod UID -> GPU -> points in the window
	below  map[string]time.Time          // pod UID -> under IdleBelow since
}

// NewSampler reads src and finds process owners with owner
// (leak.ProcFS.Owner).
func NewSampler(cfg Config, src Source, owner func(pid uint32) leak.Owner) *Sampler {
	return &Sampler{cfg: cfg, src: src, owner: owner,
		since: map[string]uint64{}, points: map[string]map[string][]point{}, below: map[string]time.Time{}}
}

// Tick samples every GPU once at now. assigned are the live pods per GPU
// (handoff.Matcher.GPUPods); pods no longer assigned are forgotten. It
// returns the pods by UID order and the errors of the GPUs that could not be
// sampled (their pods come back Unknown, their idle clock unchanged).
func (s *Sampler) Tick(now time.Time, gpus []string, assigned map[string][]handoff.GPUPod) ([]Pod, map[string]error) {
	errs := map[string]error{}
	owners := map[uint32]string{} // PID -> pod UID, read once per tick
	podOf := func(pid uint32) string {
		uid, ok := owners[pid]
		if !ok {
			uid = s.owner(pid).PodUID
			owners[pid] = uid
		}
		return uid
	}
	pods := map[string]*Pod{}
	failed := map[string]bool{}
	for _, u := range gpus {
		holders := assigned[u]
		if len(holders) == 0 {
			continue
		}
		sm, used, err := s.sample(u, podOf)
		if err != nil {
			errs[u] = err
		}
		for _, h := range holders {
			p := pods[h.UID]
			if p == nil {
				p = &Pod{UID: h.UID, Pod: h.Pod}
				pods[h.UID] = p
			}
			if err != nil {
				failed[h.UID] = true
				p.GPUs = append(p.GPUs, GPU{UUID: u, SM: s.mean(h.UID, u, now)})
				continue
			}
			byGPU := s.points[h.UID]
			if byGPU == nil {
				byGPU = map[string][]point{}
				s.points[h.UID] = byGPU
			}
			byGPU[u] = append(byGPU[u], point{at: now, sm: min(sm[h.UID], 1)})
			p.GPUs = append(p.GPUs, GPU{UUID: u, SM: s.mean(h.UID, u, now), UsedMiB: used[h.UID]})
		}
	}
	for uid := range s.points {
		if pods[uid] == nil {
			delete(s.points, uid)
			delete(s.below, uid)
		}
	}
	out := make([]Pod, 0, len(pods))
	for uid, p := range pods {
		slices.SortFunc(p.GPUs, func(a, b GPU) int { return cmp.Compare(a.UUID, b.UUID) })
		for _, g := range p.GPUs {
			p.SM += g.SM
			p.UsedMiB += g.UsedMiB
		}
		p.SM /= float64(len(p.GPUs))
		p.State = s.state(uid, p.Max(), failed[uid], now)
		p.BelowSince = s.below[uid]
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Pod) int { return cmp.Compare(a.UID, b.UID) })
	return out, errs
}

// sample reads one GPU: the SM ratio and memory of each pod's processes
// (a PID's samples since the last read averaged, a pod's PIDs added up).
func (s *Sampler) sample(u string, podOf func(uint32) string) (map[string]float64, map[string]contract.MiB, error) {
	samples, err := s.src.ProcessUtilization(u, s.since[u])
	if err != nil {
		return nil, nil, err
	}
	type acc struct {
		sum float64
		n   int
	}
	byPID := map[uint32]acc{}
	for _, x := range samples {
		a := byPID[x.PID]
		a.sum += float64(x.SMPercent) / 100
		a.n++
		byPID[x.PID] = a
		s.since[u] = max(s.since[u], x.Micros)
	}
	sm := map[string]float64{}
	for pid, a := range byPID {
		if uid := podOf(pid); uid != "" {
			sm[uid] += a.sum / float64(a.n)
		}
	}
	used := map[string]contract.MiB{}
	if procs, err := s.src.Processes(u); err == nil { // memory is extra: a failed list leaves it 0
		for _, p := range procs {
			if uid := podOf(p.PID); uid != "" {
				used[uid] += p.UsedMiB
			}
		}
	}
	return sm, used, nil
}

// mean drops the pod's points on u older than the window and averages the rest.
func (s *Sampler) mean(uid, u string, now time.Time) float64 {
	ps := s.points[uid][u]
	cut := now.Add(-s.cfg.Window)
	i := 0
	for i < len(ps) && !ps[i].at.After(cut) {
		i++
	}
	ps = ps[i:]
	if len(ps) == 0 {
		return 0
	}
	if byGPU := s.points[uid]; byGPU != nil {
		byGPU[u] = ps
	}
	sum := 0.0
	for _, p := range ps {
		sum += p.sm
	}
	return sum / float64(len(ps))
}

// state advances the pod's idle clock with its highest GPU ratio.
func (s *Sampler) state(uid string, highest float64, failed bool, now time.Time) State {
	switch {
	case failed:
		return Unknown
	case highest >= s.cfg.IdleBelow:
		delete(s.below, uid)
		return Busy
	}
	since, ok := s.below[uid]
	if !ok {
		since = now
		s.below[uid] = now
	}
	if s.cfg.IdleAfter > 0 && now.Sub(since) >= s.cfg.IdleAfter {
		return Idle
	}
	return Below
}
