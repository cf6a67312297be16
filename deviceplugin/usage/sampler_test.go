package usage

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rota-sched/rota/deviceplugin/discovery"
	"github.com/rota-sched/rota/deviceplugin/handoff"
	"github.com/rota-sched/rota/deviceplugin/leak"
)

const (
	uidA = "0d3c5b7e-1111-4a2b-9c3d-aaaaaaaaaaaa"
	uidB = "0d3c5b7e-2222-4a2b-9c3d-bbbbbbbbbbbb"
)

// proc writes a fake /proc entry for a process of the pod uid ("" = host).
func proc(t *testing.T, root string, pid int, uid string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cg := "0::/user.slice"
	if uid != "" {
		cg = "0::/kubepods/burstable/pod" + uid + "/ctr"
	}
	for name, data := range map[string]string{"comm": "python", "cgroup": cg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type fixture struct {
	n        *discovery.NVML
	ev       *discovery.MockEvents
	u0, u1   string
	assigned map[string][]handoff.GPUPod
	t0       time.Time
}

// newFixture: pod A owns GPUs 0 and 1 whole (pids 100 on GPU 0, 101 on
// GPU 1), pod B shares GPU 1 (pid 200); pid 300 is a host process on GPU 0.
func newFixture(t *testing.T) (*fixture, *Sampler) {
	t.Helper()
	n, ev, err := discovery.OpenMock("dgxh100", discovery.MockOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	root := t.TempDir()
	proc(t, root, 100, uidA)
	proc(t, root, 101, uidA)
	proc(t, root, 200, uidB)
	proc(t, root, 300, "")
	f := &fixture{n: n, ev: ev, u0: n.GPUs()[0].UUID, u1: n.GPUs()[1].UUID, t0: time.Unix(1_000_000, 0)}
	f.assigned = map[string][]handoff.GPUPod{
		f.u0: {{UID: uidA, Pod: "ns/a", Whole: true}},
		f.u1: {{UID: uidA, Pod: "ns/a", Whole: true}, {UID: uidB, Pod: "ns/b", MemoryMiB: 10240}},
	}
	ev.SetProcesses(0, []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 8 << 30}, {Pid: 300, UsedGpuMemory: 1 << 30}}, nil)
	ev.SetProcesses(1, []nvml.ProcessInfo{{Pid: 101, UsedGpuMemory: 2 << 30}}, []nvml.ProcessInfo{{Pid: 200, UsedGpuMemory: 4 << 30}})
	s := NewSampler(Config{Window: time.Minute, IdleBelow: 0.05, IdleAfter: 10 * time.Minute}, n, leak.ProcFS{Root: root}.Owner)
	return f, s
}

// at is a sample at t0+d.
func (f *fixture) sample(pid uint32, d time.Duration, sm uint32) nvml.ProcessUtilizationSample {
	return nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: uint64(f.t0.Add(d).UnixMicro()), SmUtil: sm} //nolint:gosec // test times are after 1970
}

func (f *fixture) gpus() []string { return []string{f.u0, f.u1} }

func TestSamplerMapsProcessesToPods(t *testing.T) {
	f, s := newFixture(t)
	// Two samples of pid 100 since the last read average; the host process
	// counts for nobody; pod B's MPS client counts for B.
	f.ev.AddUtilization(0, f.sample(100, time.Second, 60), f.sample(100, 2*time.Second, 80), f.sample(300, time.Second, 90))
	f.ev.AddUtilization(1, f.sample(101, time.Second, 10), f.sample(200, time.Second, 30))
	got, errs := s.Tick(f.t0.Add(10*time.Second), f.gpus(), f.assigned)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	want := []Pod{
		{UID: uidA, Pod: "ns/a", GPUs: []GPU{{UUID: f.u0, SM: 0.7, UsedMiB: 8192}, {UUID: f.u1, SM: 0.1, UsedMiB: 2048}}, SM: 0.4, UsedMiB: 10240, State: Busy},
		{UID: uidB, Pod: "ns/b", GPUs: []GPU{{UUID: f.u1, SM: 0.3, UsedMiB: 4096}}, SM: 0.3, UsedMiB: 4096, State: Busy},
	}
	sortGPUs := cmpopts.SortSlices(func(a, b GPU) bool { return a.UUID < b.UUID })
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9), sortGPUs); diff != "" {
		t.Errorf("Tick() (-want +got):\n%s", diff)
	}

	// The next read asks only for newer samples: none on GPU 0, so pod A's
	// GPU 0 gets a 0 point and its window mean halves.
	f.ev.AddUtilization(1, f.sample(101, 15*time.Second, 10), f.sample(200, 15*time.Second, 30))
	got, _ = s.Tick(f.t0.Add(20*time.Second), f.gpus(), f.assigned)
	if g := got[0].GPUs; g[0].UUID != f.u0 && g[1].UUID != f.u0 {
		t.Fatalf("pod A GPUs %+v", g)
	}
	for _, g := range got[0].GPUs {
		if g.UUID == f.u0 && !approx(g.SM, 0.35) {
			t.Errorf("pod A on GPU 0: SM %v, want 0.35 (mean of 0.7 and 0)", g.SM)
		}
	}

	// Past the window only the newest points count.
	got, _ = s.Tick(f.t0.Add(75*time.Second), f.gpus(), f.assigned)
	for _, g := range got[0].GPUs {
		if g.UUID == f.u0 && g.SM != 0 {
			t.Errorf("pod A on GPU 0 after the window: SM %v, want 0", g.SM)
		}
	}

	// A pod no longer assigned is forgotten.
	delete(f.assigned, f.u1)
	got, _ = s.Tick(f.t0.Add(80*time.Second), f.gpus(), f.assigned)
	if len(got) != 1 || got[0].UID != uidA || len(got[0].GPUs) != 1 {
		t.Errorf("after pod B left: %+v", got)
	}
	if _, ok := s.points[uidB]; ok {
		t.Error("pod B's points kept")
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestSamplerIdle(t *testing.T) {
	f, s := newFixture(t)
	f.assigned = map[string][]handoff.GPUPod{f.u0: {{UID: uidA, Pod: "ns/a", Whole: true}}, f.u1: {{UID: uidA, Pod: "ns/a", Whole: true}}}
	state := func(d time.Duration) Pod {
		t.Helper()
		got, errs := s.Tick(f.t0.Add(d), f.gpus(), f.assigned)
		if len(errs) != 0 || len(got) != 1 {
			t.Fatalf("Tick(+%s) = %+v, %v", d, got, errs)
		}
		return got[0]
	}
	// Busy for a minute on GPU 1 only: a pod is busy when any GPU is.
	f.ev.AddUtilization(1, f.sample(101, time.Second, 50))
	if p := state(10 * time.Second); p.State != Busy {
		t.Fatalf("busy pod: %+v", p)
	}
	// No samples from then on: below once the window mean drops under 5%.
	var first time.Duration
	for d := 20 * time.Second; d <= 20*time.Minute; d += 10 * time.Second {
		p := state(d)
		if p.State == Busy {
			continue
		}
		if first == 0 {
			first = d
			if p.State != Below || !p.BelowSince.Equal(f.t0.Add(d)) {
				t.Fatalf("first below tick at +%s: %+v", d, p)
			}
		}
		if d-first < 10*time.Minute && p.State != Below {
			t.Fatalf("+%s (below since +%s): state %v, want Below", d, first, p.State)
		}
		if d-first >= 10*time.Minute {
			if p.State != Idle || !p.BelowSince.Equal(f.t0.Add(first)) {
				t.Fatalf("+%s: %+v, want Idle since +%s", d, p, first)
			}
			break
		}
	}
	if first == 0 || first > 70*time.Second {
		t.Fatalf("never below (first %s)", first)
	}
	// A lost GPU leaves the pod Unknown and its idle clock alone.
	f.ev.SetLost(0, true)
	if p, errs := s.Tick(f.t0.Add(21*time.Minute), f.gpus(), f.assigned); len(errs) != 1 || p[0].State != Unknown {
		t.Errorf("lost GPU: %+v, %v", p, errs)
	}
	f.ev.SetLost(0, false)
	if p := state(22 * time.Minute); p.State != Idle {
		t.Errorf("after the GPU came back: %+v, want still Idle", p)
	}
	// Busy again: 20% average on GPU 0 over the window.
	f.ev.AddUtilization(0, f.sample(100, 22*time.Minute+5*time.Second, 100))
	if p := state(22*time.Minute + 10*time.Second); p.State != Busy || !p.BelowSince.IsZero() {
		t.Errorf("busy again: %+v", p)
	}
}

func TestSamplerIdleOff(t *testing.T) {
	f, _ := newFixture(t)
	s := NewSampler(Config{Window: time.Minute, IdleBelow: 0.05}, f.n, leak.ProcFS{Root: t.TempDir()}.Owner)
	for d := time.Duration(0); d < 2*time.Hour; d += 10 * time.Minute {
		got, _ := s.Tick(f.t0.Add(d), f.gpus(), f.assigned)
		for _, p := range got {
			if p.State == Idle {
				t.Fatalf("IdleAfter 0 marked %s idle", p.Pod)
			}
		}
	}
}
