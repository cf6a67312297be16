//go:build load

package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/test/e2e/harness"
)

// Teams of the run: the phases' GPU pods (quota that never runs out), the
// queued pods of ROTA_LOAD_GATED (a quota of one GPU, taken by the first of
// them, so the others wait for quota), and the probe: two pods of one GPU
// under a quota of one, so that one stays queued and the queue's positions
// for it say when each admission pass ran.
const (
	loadTeam        = "load"
	parkedTeam      = "parked"
	parkedNamespace = "load-parked"
	probeTeam       = "probe"
	probeNamespace  = "load-probe"
	loadQuota       = `teams:
  load: {gpus: 1000000, gpuMemoryGiB: 100000000, maxQueuedPods: 1000000}
  parked: {gpus: 1, maxQueuedPods: 1000000}
  probe: {gpus: 1}
unknownTeams: unlimited
`
)

// queueResult is the rotaq phase: the rota phase's pods with queueing on.
type queueResult struct {
	phase    phaseResult
	interval time.Duration
}

// gatedResult is the plain phase without (before) and with (with) n queued
// GPU pods present.
type gatedResult struct {
	n            int
	createRate   float64
	queuedBefore float64 // rota_queue_length for the parked team at plaing's start
	before, with phaseResult
	interval     time.Duration
	// suspended, with ROTA_LOAD_SUSPENDED=1: the n queued pods are
	// Jobs queued suspended (jobPods pods each), not gated pods.
	suspended bool
	// foreign, with ROTA_LOAD_GATED_FOREIGN=1: the plain phase with n
	// GPU-free pods held by a scheduling gate that is not Rota's (nothing
	// in Rota looks at them), run between before and with, so that
	// kube-scheduler's own cost of gated pods is told apart from the
	// queue's. with then has both sets present.
	foreign *phaseResult
}

const foreignNamespace = "load-foreign"

// queueInterval is --queue-interval from the extender's flags (default 1s).
func queueInterval(extArgs []string) time.Duration {
	d := time.Second
	for _, a := range extArgs {
		if v, ok := strings.CutPrefix(a, "--queue-interval="); ok {
			if p, err := time.ParseDuration(v); err == nil {
				d = p
			}
		}
	}
	return d
}

// enableQueueing installs the mutating webhook (once) and the probe pods.
func enableQueueing(ctx context.Context, t *testing.T, env *harness.Env) {
	t.Helper()
	was, err := env.SetQueueing(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if was {
		return
	}
	for i := range 2 {
		p := harness.Pod(probeNamespace, fmt.Sprintf("probe-%d", i)).GPUs(1).CPU("100m").Obj()
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Mi")
		got, err := env.CreatePod(ctx, p)
		if apierrors.IsAlreadyExists(err) {
			continue // queueing was on in an earlier round
		}
		if err != nil {
			t.Fatal(err)
		}
		if !harness.HasQueueGate(got, env.Names.QueueGate) {
			t.Fatalf("queueing is on, but pod %s/%s was created without the queue gate %s", got.Namespace, got.Name, env.Names.QueueGate)
		}
	}
}

// runQueued runs the rota phase's pods with queueing on, as a backlog.
func runQueued(ctx context.Context, t *testing.T, env *harness.Env, w *bindWatch, size, pods int, extArgs []string) queueResult {
	t.Helper()
	enableQueueing(ctx, t, env)
	res := runPhase(ctx, t, env, w, fmt.Sprintf("rotaq-%d", size), pods, phaseOpts{gpu: true, backlog: true, profile: true})
	// The next round's rota phase runs with queueing off again.
	if _, err := env.SetQueueing(ctx, false); err != nil {
		t.Fatal(err)
	}
	return queueResult{phase: res, interval: queueInterval(extArgs)}
}

// runGated measures the plain phase without and then with n queued GPU
// pods present.
func runGated(ctx context.Context, t *testing.T, env *harness.Env, w *bindWatch, size, pods, n int, extArgs []string) gatedResult {
	t.Helper()
	enableQueueing(ctx, t, env)
	g := gatedResult{n: n, interval: queueInterval(extArgs), suspended: os.Getenv("ROTA_LOAD_SUSPENDED") == "1"}
	g.before = runPhase(ctx, t, env, w, fmt.Sprintf("plainb-%d", size), pods, phaseOpts{profile: true})
	if os.Getenv("ROTA_LOAD_GATED_FOREIGN") == "1" {
		if err := env.CreateNamespace(ctx, foreignNamespace, ""); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		createPods(ctx, t, "foreign-gated pods", n, func(i int) *corev1.Pod {
			p := harness.Pod(foreignNamespace, fmt.Sprintf("held-%05d", i)).CPU("100m").Obj()
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Mi")
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "rota.test/hold"}}
			return p
		}, env)
		t.Logf("%d GPU-free pods gated by rota.test/hold created at %.0f/s", n, float64(n)/time.Since(began).Seconds())
		f := runPhase(ctx, t, env, w, fmt.Sprintf("plainf-%d", size), pods, phaseOpts{profile: true})
		g.foreign = &f
	}
	parked := func(name string) *corev1.Pod {
		p := harness.Pod(parkedNamespace, name).GPUs(1).CPU("100m").Obj()
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Mi")
		return p
	}
	began := time.Now()
	if g.suspended {
		createSuspendedJobs(ctx, t, env, n, parked)
	} else {
		createPods(ctx, t, "queued pods", n, func(i int) *corev1.Pod { return parked(fmt.Sprintf("parked-%05d", i)) }, env)
	}
	g.createRate = float64(n) / time.Since(began).Seconds()
	// Wait until the queue holds them (all but the one its quota admits).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// A scrape may time out while the extender takes in the new
		// pods: try again until the deadline.
		m, err := env.ExtenderMetrics(ctx)
		if err == nil {
			g.queuedBefore = m[`rota_queue_length{team="`+parkedTeam+`"}`]
		}
		if g.queuedBefore >= float64(n-1) || time.Now().After(deadline) {
			if err != nil {
				t.Logf("scraping rota-extender: %v", err)
			}
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d queued pods created at %.0f/s; the queue holds %.0f of them", n, g.createRate, g.queuedBefore)
	// The API server and etcd are still digesting the burst of creations
	// (compaction, watch caches): let them settle, as they would in a
	// cluster where the queue filled over time, before the measured phase.
	settle := time.Duration(envInt("ROTA_LOAD_SETTLE_SECONDS", 15)) * time.Second
	time.Sleep(settle)
	g.with = runPhase(ctx, t, env, w, fmt.Sprintf("plaing-%d", size), pods, phaseOpts{profile: true})
	return g
}

// jobPods is how many pods each Job queued suspended of
// ROTA_LOAD_SUSPENDED runs at once.
const jobPods = 8

// createSuspendedJobs labels the parked namespace to queue Jobs suspended
// and creates n/jobPods Jobs of jobPods one-GPU pods each there, through
// rota-admission's webhook (each comes back suspended and marked).
func createSuspendedJobs(ctx context.Context, t *testing.T, env *harness.Env, n int, parked func(string) *corev1.Pod) {
	t.Helper()
	label := []byte(`{"metadata":{"labels":{"` + env.Names.QueueingLabel + `":"` + contract.QueueingSuspend + `"}}}`)
	if _, err := env.Client.CoreV1().Namespaces().Patch(ctx, parkedNamespace, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	job := func(i int) *batchv1.Job {
		p := parked("")
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: parkedNamespace, Name: fmt.Sprintf("parked-%05d", i)},
			Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](jobPods), Completions: ptr.To[int32](jobPods),
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: p.Labels}, Spec: p.Spec}}}
	}
	// rota-admission learns the label from its namespace informer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := env.Client.BatchV1().Jobs(parkedNamespace).Create(ctx, job(-1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && got.Spec.Suspend != nil && *got.Spec.Suspend {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jobs in %s are not created suspended (%v)", parkedNamespace, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	jobs := n / jobPods
	createEach(t, "Jobs queued suspended", jobs, func(i int) error {
		got, err := env.Client.BatchV1().Jobs(parkedNamespace).Create(ctx, job(i), metav1.CreateOptions{})
		if err == nil && (got.Spec.Suspend == nil || !*got.Spec.Suspend) {
			err = fmt.Errorf("job %s created unsuspended", got.Name)
		}
		return err
	})
	t.Logf("%d Jobs of %d pods created suspended in %s", jobs, jobPods, parkedNamespace)
}

// writes keeps the write requests (POST, PUT, PATCH, APPLY, DELETE) of
// counts, by "VERB resource".
func writes(counts map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range counts {
		verb, _, _ := strings.Cut(k, " ")
		switch verb {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE":
			out[k] = v
		}
	}
	return out
}

// perPodDiff formats (a/na - b/nb) per key, where it is at least 0.01.
func perPodDiff(a map[string]float64, na int, b map[string]float64, nb int) string {
	if na == 0 || nb == 0 {
		return "n/a"
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	type kv struct {
		k string
		v float64
	}
	var ds []kv
	total := 0.0
	for k := range keys {
		d := a[k]/float64(na) - b[k]/float64(nb)
		total += d
		if d >= 0.01 || d <= -0.01 {
			ds = append(ds, kv{k, d})
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].v > ds[j].v })
	parts := []string{fmt.Sprintf("total %+.2f", total)}
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%s %+.2f", d.k, d.v))
	}
	return strings.Join(parts, ", ")
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func (q queueResult) String(r round) string {
	p := q.phase
	ext := func(ph phaseResult) float64 {
		if ph.bound == 0 {
			return 0
		}
		return ph.cpu["rota-extender"] * 1000 / float64(ph.bound)
	}
	return fmt.Sprintf("%d nodes, %d pods, queueing on (every GPU pod gated at creation, admitted by the queue from a backlog): "+
		"Rota %.1f pods/s (%d/%d bound in %.1fs) vs %.1f with queueing off vs plain %.1f: ratio to plain %.2f (%s the 0.8 target), to queueing off %.2f; "+
		"admission passes: %s (interval %s); rota-extender CPU per 1,000 pods %.2fs (queueing off %.2fs); %s; "+
		"API writes per admitted pod: %s; with queueing off: %s; the queue adds: %s; CPU per 1,000 pods: %s",
		r.nodes, p.total, p.rate, p.bound, p.total, p.span.Seconds(), r.rota.rate, r.plain.rate,
		ratio(p.rate, r.plain.rate), meets(ratio(p.rate, r.plain.rate), 0.8), ratio(p.rate, r.rota.rate),
		p.passes.String(q.interval), q.interval, ext(p), ext(r.rota), p.profile.String(p.bound),
		p.perPod(writes(p.requests), 1, 0.01, ""), r.rota.perPod(writes(r.rota.requests), 1, 0.01, ""),
		perPodDiff(writes(p.requests), p.bound, writes(r.rota.requests), r.rota.bound),
		p.perPod(p.cpu, 1000, 0, "s"))
}

func meets(ratio, target float64) string {
	if ratio >= target {
		return "meets"
	}
	return "MISSES"
}

func (g gatedResult) String() string {
	rt := ratio(g.with.rate, g.before.rate)
	foreign := ""
	if f := g.foreign; f != nil {
		foreign = fmt.Sprintf("with %d GPU-free pods gated by a gate that is not Rota's: plain scheduler %.1f pods/s (%d/%d in %.1fs), ratio %.2f to without; CPU per 1,000 pods: %s; %s; then with the queued GPU pods as well: ratio %.2f to the foreign-gated phase; ",
			g.n, f.rate, f.bound, f.total, f.span.Seconds(), ratio(f.rate, g.before.rate), f.perPod(f.cpu, 1000, 0, "s"), f.profile.perPass(f.passes),
			ratio(g.with.rate, f.rate))
	}
	kind, target := "GPU pods queued gated", 0.9
	if g.suspended {
		kind, target = fmt.Sprintf("GPU pods' worth queued as %d suspended Jobs of %d pods", g.n/jobPods, jobPods), 0.95
	}
	return foreign + fmt.Sprintf("%d %s (created at %.0f/s; %.0f in the queue): plain scheduler %.1f pods/s (%d/%d in %.1fs) vs %.1f without them (%d/%d in %.1fs): ratio %.2f (%s the %.2f target); "+
		"admission passes with them: %s, without: %s (interval %s); with them: %s; without: %s; "+
		"CPU per 1,000 pods with them: %s; without: %s; API writes per pod with them: %s; without: %s",
		g.n, kind, g.createRate, g.queuedBefore, g.with.rate, g.with.bound, g.with.total, g.with.span.Seconds(),
		g.before.rate, g.before.bound, g.before.total, g.before.span.Seconds(), rt, meets(rt, target), target,
		g.with.passes.String(g.interval), g.before.passes.String(g.interval), g.interval,
		g.with.profile.perPass(g.with.passes), g.before.profile.perPass(g.before.passes),
		g.with.perPod(g.with.cpu, 1000, 0, "s"), g.before.perPod(g.before.cpu, 1000, 0, "s"),
		g.with.perPod(writes(g.with.requests), 1, 0.01, ""), g.before.perPod(writes(g.before.requests), 1, 0.01, ""))
}

// passTimes are when the queue controller's passes ran, as the probe's
// queue position says: each pass sets the queued probe's waiting time from
// its own clock, so two consecutive values differ by the time from one
// pass's start to the next (the pass itself plus the interval).
type passTimes struct {
	periods []float64 // seconds
	polls   int
}

func (p passTimes) String(interval time.Duration) string {
	if len(p.periods) == 0 {
		return fmt.Sprintf("none seen (%d polls)", p.polls)
	}
	s := slices.Clone(p.periods)
	sort.Float64s(s)
	q := func(f float64) float64 { return s[min(len(s)-1, int(f*float64(len(s))))] }
	iv := interval.Seconds()
	return fmt.Sprintf("%d, start to start p50 %.2fs p90 %.2fs max %.2fs (a pass itself about %.2fs p50, %.2fs max)",
		len(s)+1, q(0.5), q(0.9), s[len(s)-1], max(0, q(0.5)-iv), max(0, s[len(s)-1]-iv))
}

// cpuProfile is rota-extender's CPU profile over a phase: the total CPU
// sampled and the cumulative CPU of the queue controller's functions.
type cpuProfile struct {
	duration, total float64 // seconds
	cum             map[string]float64
	files           []string
}

// queueFuncs are the functions whose cumulative CPU the report names, by
// the suffix of their symbol.
var queueFuncs = []struct{ short, symbol string }{
	{"Pass", "extender/queue.(*Controller).Pass"},
	{"HoldRoom", "extender/scheduling.(*Extender).HoldRoom"},
	{"holdOne", "extender/scheduling.(*Extender).holdOne"},
	{"eligible", "extender/scheduling.(*Extender).eligible"},
	{"Plan", "pkg/queue.Plan"},
	{"ungate", "extender/queue.(*Controller).ungate"},
	{"report", "extender/queue.(*Controller).report"},
	{"condition", "extender/queue.(*Controller).condition"},
	{"FromPod", "pkg/podreq.FromPod"},
	{"reserve", "extender/queue.(*Controller).reserve"},
	{"filter", "extender/scheduling.(*Extender).Filter"},
	{"prioritize", "extender/scheduling.(*Extender).Prioritize"},
	{"bind", "extender/scheduling.(*Extender).Bind"},
}

func (c *cpuProfile) String(bound int) string {
	if c == nil || c.total == 0 {
		return "no CPU profile"
	}
	parts := []string{fmt.Sprintf("rota-extender CPU profile %.1fs of CPU in %.1fs", c.total, c.duration)}
	for _, f := range queueFuncs {
		if v, ok := c.cum[f.short]; ok {
			s := fmt.Sprintf("%s %.2fs (%.0f%%)", f.short, v, 100*v/c.total)
			if bound > 0 && f.short == "Pass" {
				s += fmt.Sprintf(", %.2fs per 1,000 pods", v*1000/float64(bound))
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ", ")
}

// perPass is the queue's CPU per pass over the profile.
func (c *cpuProfile) perPass(p passTimes) string {
	s := c.String(0)
	if c == nil || len(p.periods) == 0 || c.duration == 0 {
		return s
	}
	sort.Float64s(p.periods)
	per := p.periods[len(p.periods)/2]
	return fmt.Sprintf("%s; Pass CPU about %.0f ms a pass", s, 1000*c.cum["Pass"]/(c.duration/per))
}

// profiler takes consecutive CPU profiles of rota-extender and polls the
// probe's queue position until stopped.
type profiler struct {
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	files []string
	err   error
	pass  passTimes
}

func profileDir() string {
	if d := os.Getenv("ROTA_LOAD_PROFILE_DIR"); d != "" {
		return d
	}
	d, _ := filepath.Abs(filepath.Join("..", "..", "bin", "load-profiles"))
	return d
}

func startProfiler(ctx context.Context, t *testing.T, env *harness.Env, phase string) *profiler {
	t.Helper()
	dir := profileDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, phase+"-*.pb.gz")) // an earlier run's
	for _, f := range old {
		os.Remove(f)
	}
	p := &profiler{done: make(chan struct{})}
	p.wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-p.done:
				return
			default:
			}
			file := filepath.Join(dir, fmt.Sprintf("%s-%02d.pb.gz", phase, i))
			if err := fetch(ctx, env.ExtenderURL+"/debug/pprof/profile?seconds=5", file, 30*time.Second); err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			p.files = append(p.files, file)
			p.mu.Unlock()
		}
	})
	p.wg.Go(func() {
		last := -1.0
		for {
			select {
			case <-p.done:
				return
			case <-time.After(400 * time.Millisecond):
			}
			v, ok := probeWaiting(ctx, env)
			p.mu.Lock()
			p.pass.polls++
			if ok {
				if last >= 0 && v > last {
					p.pass.periods = append(p.pass.periods, v-last)
				}
				last = v
			}
			p.mu.Unlock()
		}
	})
	return p
}

func (p *profiler) stop(ctx context.Context, t *testing.T) (*cpuProfile, passTimes) {
	t.Helper()
	close(p.done)
	p.wg.Wait()
	if p.err != nil {
		t.Logf("CPU profile: %v", p.err)
	}
	if len(p.files) == 0 {
		return nil, p.pass
	}
	prof, err := readProfiles(ctx, p.files)
	if err != nil {
		t.Logf("reading CPU profiles: %v", err)
		return nil, p.pass
	}
	return prof, p.pass
}

// fetch GETs url into file.
func fetch(ctx context.Context, url, file string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// probeWaiting is the queued probe pod's waiting time as of the last pass.
func probeWaiting(ctx context.Context, env *harness.Env) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.ExtenderURL+"/debug/queue?team="+probeTeam, nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var v contract.QueueView
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&v) != nil || len(v.Pods) == 0 {
		return 0, false
	}
	return v.Pods[0].Waiting, true
}

// readProfiles merges CPU profiles with go tool pprof and reads the total
// and the queue functions' cumulative CPU from its -top output.
func readProfiles(ctx context.Context, files []string) (*cpuProfile, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("reading CPU profiles needs the go command on PATH: %w", err)
	}
	args := append([]string{"tool", "pprof", "-top", "-cum", "-nodecount=100000"}, files...)
	out, err := exec.CommandContext(ctx, goBin, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof: %w", err)
	}
	c := &cpuProfile{cum: map[string]float64{}, files: files}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "Duration: "); ok {
			// Duration: 10.01s, Total samples = 2.50s (24.97%)
			d, tot, _ := strings.Cut(rest, ", Total samples = ")
			c.duration = pprofSeconds(d)
			tot, _, _ = strings.Cut(tot, " ")
			c.total = pprofSeconds(tot)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		for _, q := range queueFuncs {
			if strings.HasSuffix(f[5], q.symbol) {
				c.cum[q.short] += pprofSeconds(f[3])
			}
		}
	}
	if c.total == 0 {
		return nil, fmt.Errorf("go tool pprof printed no total:\n%s", out)
	}
	return c, nil
}

// pprofSeconds reads pprof's durations: 120ms, 1.50s, 2.10mins, 1.2hrs.
func pprofSeconds(s string) float64 {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"ms", 1e-3}, {"us", 1e-6}, {"mins", 60}, {"hrs", 3600}, {"s", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0
			}
			return f * u.scale
		}
	}
	return 0
}
