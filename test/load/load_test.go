//go:build load

// Package load measures scheduling throughput on a real control plane
// (etcd, kube-apiserver, kube-scheduler from .cache/k8s/bin) with Rota's
// binaries from bin/ (the e2e harness), on many simulated GPU nodes that
// publish their topology annotation directly (no device plugins, no lease
// renewal), in one run:
//
//   - plain: GPU-free pods, which kube-scheduler places without calling the
//     extender (its managedResources do not match them);
//   - rota: GPU pods (memory shares and whole GPUs) through the extender's
//     filter, prioritize and bind;
//
// on the same scheduler and nodes, and their ratio (DESIGN.md's target:
// Rota at least 0.8x the plain scheduler). Pods are created in bursts while
// kube-scheduler is stopped and the rate is taken from the first to the last
// bind, watched by an informer, so that pod creation (and the webhook) is
// not part of the figure. It also reports the extender's latency p50/p99
// by verb from its own rota_extender_request_duration_seconds histogram and
// the peak RSS (VmHWM) of rota-extender and rota-admission.
//
// Run: go test -tags load -timeout 30m -v ./test/load/ (after make build k8s-tools).
// ROTA_LOAD_NODES (default "1000,5000": the fleet grows between rounds; a
// round is skipped once ROTA_LOAD_BUDGET, default 20m, is spent) and
// ROTA_LOAD_PODS (default 5000 per phase) size it; ROTA_LOAD_PHASE_LIMIT (default 5m)
// bounds the wait for one phase's binds, and ROTA_LOAD_EXTENDER_ARGS adds
// rota-extender flags (e.g. "--kube-api-qps=1000 --kube-api-burst=2000").
//
// Two knobs measure Rota's queue (queue_test.go), as the chart runs it:
//
//   - ROTA_LOAD_QUEUEING=1 adds a phase rotaq after rota: the same GPU pods
//     with the chart's mutating webhook installed, so every pod is gated at
//     creation and the queue controller admits it. rota-extender is stopped
//     while the pods are created, so the whole phase is a backlog that the
//     queue drains (at most MaxAdmissionsPerPass a pass) while
//     kube-scheduler binds. It reports the API writes per admitted pod, the
//     queue controller's share of rota-extender's CPU (from CPU profiles,
//     kept in bin/load-profiles) and the time between admission passes.
//   - ROTA_LOAD_GATED=N (in the last round) runs the plain phase again
//     (plainb), then creates N GPU pods of a team whose quota is used up, so
//     that they stay queued, and runs the plain phase once more with them
//     present (plaing): kube-scheduler's pods/s with N queued pods against
//     without them, and the queue controller's passes with N queued. With
//     ROTA_LOAD_GATED_FOREIGN=1 it first adds N GPU-free pods held by a
//     gate that is not Rota's and runs the plain phase with them (plainf):
//     kube-scheduler's own cost of gated pods, apart from the queue's.
//
// kube-scheduler runs with its own defaults in the plain phases and with
// the chart's configuration (extender/config.SchedulerProfile, e.g.
// percentageOfNodesToScore) in the GPU phases; ROTA_LOAD_ROTA_PROFILE=0
// runs the GPU phases with kube-scheduler's defaults too.
//
// ROTA_LOAD_PROFILE_ROTA=1 keeps rota-extender's CPU profiles of the rota
// phase too (bin/load-profiles/rota-<nodes>-NN.pb.gz), and
// ROTA_LOAD_PROFILE_APISERVER=1 kube-apiserver's of every phase's first
// 10 s; both are for reading by hand (go tool pprof).
package load

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	extconfig "github.com/rota-sched/rota/extender/config"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
)

const (
	namespace = "load"
	gpuModel  = "NVIDIA H100 80GB HBM3"
	gpusPer   = 8
	gpuMiB    = contract.MiB(80 * 1024)
	burst     = 500
	workers   = 16
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestSchedulingThroughput(t *testing.T) {
	sizes := []int{1000, 5000}
	if s := os.Getenv("ROTA_LOAD_NODES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("ROTA_LOAD_NODES=%q: want sizes like 1000,5000", s)
			}
			sizes = append(sizes, n)
		}
	}
	pods := envInt("ROTA_LOAD_PODS", 5000)
	budget := 20 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("ROTA_LOAD_BUDGET")); err == nil {
		budget = d
	}
	if err := harness.CheckBinaries(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), budget+10*time.Minute)
	defer cancel()
	extArgs := strings.Fields(os.Getenv("ROTA_LOAD_EXTENDER_ARGS"))
	// Only GPU pods reach the extender (managedResources), so that the
	// plain phase is kube-scheduler alone; the harness's default sends
	// every pod through it, as the chart's scheduler.gpuFreePods does.
	var schedOpts []extconfig.SchedulerOption
	if slices.Contains(extArgs, "--filter-best-only") {
		// Prioritize would score every passed node alike: leave it out.
		schedOpts = append(schedOpts, extconfig.WithFilterBestOnly())
	}
	schedCfg := extconfig.SchedulerConfig(harness.ExtenderURLPlaceholder, "{{.Kubeconfig}}", schedOpts...)
	// The plain phases run kube-scheduler with its own defaults; the GPU
	// phases with the chart's configuration (extender/config.SchedulerProfile:
	// percentageOfNodesToScore, the score plugins), less gpuFreePods, which
	// changes nothing for pods that all ask for GPUs.
	phaseSchedulers.plain, phaseSchedulers.gpu = schedCfg, schedCfg
	if os.Getenv("ROTA_LOAD_ROTA_PROFILE") != "0" {
		phaseSchedulers.gpu = extconfig.SchedulerProfile(harness.ExtenderURLPlaceholder, "{{.Kubeconfig}}",
			append([]extconfig.SchedulerOption{extconfig.WithGPUFreePods(false)}, schedOpts...)...)
	}
	queueing := os.Getenv("ROTA_LOAD_QUEUEING") == "1"
	gated := envInt("ROTA_LOAD_GATED", 0)
	profileRota := os.Getenv("ROTA_LOAD_PROFILE_ROTA") == "1"
	if (queueing || gated > 0 || profileRota) && !slices.Contains(extArgs, "--profiling") {
		// The queue's share of the extender's CPU comes from its profiles.
		extArgs = append(extArgs, "--profiling")
	}
	env, err := harness.Start(ctx, harness.Options{RemoveDir: os.Getenv("ROTA_KEEP_CLUSTER") != "1", Logf: t.Logf,
		ExtenderArgs: extArgs, SchedulerConfig: schedCfg, Quota: loadQuota})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Logf("stopping: %v", err)
		}
	}()
	for ns, team := range map[string]string{namespace: loadTeam, parkedNamespace: parkedTeam, probeNamespace: probeTeam} {
		if err := env.CreateNamespace(ctx, ns, team); err != nil {
			t.Fatal(err)
		}
	}
	w := newBindWatch(ctx, t, env)
	// Nodes without lease renewal: the cluster's own simulator renews every
	// node it created each 10s, which at this scale is load of its own.
	sim := cluster.NewNodeSimulator(env.Client)
	sim.KubeletVersion = env.Version

	var rounds []round
	have := 0
	for i, size := range sizes {
		if i > 0 && time.Since(began) > budget/3 {
			t.Logf("skipping %d nodes: %s of the %s budget spent", size, time.Since(began).Round(time.Second), budget)
			break
		}
		if size > have {
			took := addNodes(ctx, t, env, sim, have, size)
			t.Logf("%d nodes ready (%d added in %.1fs, %.0f nodes/s)", size, size-have, took.Seconds(), float64(size-have)/took.Seconds())
			have = size
		}
		r := round{nodes: size, pods: pods, extArgs: strings.Join(extArgs, " "), gpuScheduler: "the chart's profile"}
		if phaseSchedulers.gpu == phaseSchedulers.plain {
			r.gpuScheduler = "kube-scheduler's defaults"
		}
		before := scrape(ctx, t, env)
		r.plain = runPhase(ctx, t, env, w, fmt.Sprintf("plain-%d", size), pods, phaseOpts{})
		mid := scrape(ctx, t, env)
		r.rota = runPhase(ctx, t, env, w, fmt.Sprintf("rota-%d", size), pods, phaseOpts{gpu: true, profile: profileRota})
		after := scrape(ctx, t, env)
		if n := after.count("filter") - mid.count("filter"); n == 0 {
			t.Errorf("%d nodes: the extender answered no filter call for GPU pods", size)
		}
		if n := mid.count("filter") - before.count("filter"); n != 0 {
			t.Errorf("%d nodes: the extender answered %v filter calls for GPU-free pods; the plain phase is not plain", size, n)
		}
		r.latency = map[string][2]float64{}
		for _, verb := range []string{"filter", "prioritize", "bind"} {
			r.latency[verb] = [2]float64{after.quantile(mid, verb, 0.5), after.quantile(mid, verb, 0.99)}
		}
		r.extRSS, r.admRSS = vmHWM(env.Extender.PID()), vmHWM(env.Admission.PID())
		t.Log(r.String())
		if queueing {
			q := runQueued(ctx, t, env, w, size, pods, extArgs)
			r.queue = &q
			t.Log(r.queue.String(r))
		}
		last := i == len(sizes)-1 || time.Since(began) > budget/3
		if gated > 0 && last {
			g := runGated(ctx, t, env, w, size, pods, gated, extArgs)
			r.gated = &g
			t.Log(r.gated.String())
		}
		rounds = append(rounds, r)
	}
	for _, r := range rounds {
		fmt.Println("LOAD SUMMARY: " + r.String())
		if r.queue != nil {
			fmt.Println("LOAD SUMMARY (queue): " + r.queue.String(r))
		}
		if r.gated != nil {
			fmt.Println("LOAD SUMMARY (queued pods present): " + r.gated.String())
		}
	}
	if len(rounds) == 0 {
		t.Fatal("no round ran")
	}
}

type phaseResult struct {
	bound, total int
	rate         float64 // pods/s, first to last bind
	span         time.Duration
	createRate   float64
	// requests counts the API server's requests from kube-scheduler's start to
	// the phase's last bind, by "VERB resource[/subresource]".
	requests map[string]float64
	// cpu is the CPU seconds (user+system) each process used from
	// kube-scheduler's start to the phase's last bind; on a machine with few
	// cores the throughput is bounded by the sum.
	cpu map[string]float64
	// profile is rota-extender's CPU profile over the phase (phaseOpts.profile).
	profile *cpuProfile
	// passes are the queue controller's admission passes seen in the phase
	// (phaseOpts.profile, with queueing on).
	passes passTimes
}

// perPod formats counts per bound pod, times scale: the total first, then
// each key whose share is at least min, largest first.
func (p phaseResult) perPod(counts map[string]float64, scale, min float64, unit string) string {
	if p.bound == 0 {
		return "n/a"
	}
	per := func(v float64) string { return strconv.FormatFloat(v*scale/float64(p.bound), 'f', 2, 64) + unit }
	var total float64
	var keys []string
	for k, v := range counts {
		total += v
		if v*scale/float64(p.bound) >= min {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	parts := []string{"total " + per(total)}
	for _, k := range keys {
		parts = append(parts, k+" "+per(counts[k]))
	}
	return strings.Join(parts, ", ")
}

type round struct {
	nodes, pods    int
	extArgs        string
	gpuScheduler   string // the GPU phases' kube-scheduler configuration
	plain, rota    phaseResult
	queue          *queueResult
	gated          *gatedResult
	latency        map[string][2]float64 // verb -> p50, p99 seconds
	extRSS, admRSS int64                 // KiB
}

func (r round) String() string {
	ratio := 0.0
	if r.plain.rate > 0 {
		ratio = r.rota.rate / r.plain.rate
	}
	verdict := "meets"
	if ratio < 0.8 {
		verdict = "MISSES"
	}
	ms := func(s float64) string {
		if math.IsNaN(s) {
			return "n/a"
		}
		return strconv.FormatFloat(s*1000, 'f', 1, 64) + "ms"
	}
	args := r.extArgs
	if args == "" {
		args = "defaults"
	}
	return fmt.Sprintf("%d nodes x %d GPUs, %d pods per phase, rota-extender flags: %s, GPU phases' kube-scheduler configuration: %s: plain scheduler %.1f pods/s (%d/%d bound in %.1fs), with Rota's extender %.1f pods/s (%d/%d in %.1fs); ratio %.2f (%s the 0.8 target); extender filter p50 %s p99 %s, prioritize p50 %s p99 %s, bind p50 %s p99 %s; peak RSS rota-extender %.0f MiB, rota-admission %.0f MiB; pod creation %.0f/%.0f pods/s; CPU per 1,000 pods plain: %s; with Rota: %s; API requests per pod plain: %s; with Rota: %s",
		r.nodes, gpusPer, r.pods, args, r.gpuScheduler, r.plain.rate, r.plain.bound, r.plain.total, r.plain.span.Seconds(),
		r.rota.rate, r.rota.bound, r.rota.total, r.rota.span.Seconds(), ratio, verdict,
		ms(r.latency["filter"][0]), ms(r.latency["filter"][1]), ms(r.latency["prioritize"][0]), ms(r.latency["prioritize"][1]),
		ms(r.latency["bind"][0]), ms(r.latency["bind"][1]),
		float64(r.extRSS)/1024, float64(r.admRSS)/1024, r.plain.createRate, r.rota.createRate,
		r.plain.perPod(r.plain.cpu, 1000, 0, "s"), r.rota.perPod(r.rota.cpu, 1000, 0, "s"),
		r.plain.perPod(r.plain.requests, 1, 0.05, ""), r.rota.perPod(r.rota.requests, 1, 0.05, ""))
}

// addNodes creates nodes load-<from>..load-<to-1> with 8 H100 each, in
// parallel, each with its topology annotation written directly, and waits
// until the extender holds them all.
func addNodes(ctx context.Context, t *testing.T, env *harness.Env, sim *cluster.NodeSimulator, from, to int) time.Duration {
	t.Helper()
	began := time.Now()
	units := int64(gpusPer) * int64(gpuMiB/contract.DefaultMemoryUnitMiB)
	capacity := map[string]string{env.Names.GPU: strconv.Itoa(gpusPer), env.Names.GPUMemory: strconv.FormatInt(units, 10)}
	leafLabel := env.Names.Domain + "/leaf"
	work := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("load-%05d", i)
				leaf := fmt.Sprintf("leaf-%03d", i/32)
				if err := addNode(ctx, env, sim, name, leaf, leafLabel, capacity); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := from; i < to; i++ {
		select {
		case err := <-errs:
			close(work)
			wg.Wait()
			t.Fatal(err)
		case work <- i:
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	for {
		m := scrape(ctx, t, env)
		if m.samples["rota_extender_nodes"] >= float64(to) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the extender holds %v of %d nodes", m.samples["rota_extender_nodes"], to)
		case <-time.After(500 * time.Millisecond):
		}
	}
	return time.Since(began)
}

func addNode(ctx context.Context, env *harness.Env, sim *cluster.NodeSimulator, name, leaf, leafLabel string, capacity map[string]string) error {
	if _, err := sim.CreateNode(ctx, name, map[string]string{leafLabel: leaf}, capacity); err != nil {
		return err
	}
	doc := topology.FromSpec(topology.Spec{Name: name, Model: gpuModel, Count: gpusPer, MemoryMiB: gpuMiB,
		IslandSize: 4, NUMANodes: 2, UnitMiB: contract.DefaultMemoryUnitMiB}).Document()
	doc.Leaf = leaf
	data, err := doc.Marshal()
	if err != nil {
		return err
	}
	patch, err := jsonPatch(env.Names.TopologyAnnotation, string(data))
	if err != nil {
		return err
	}
	_, err = env.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func jsonPatch(key, value string) ([]byte, error) {
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%s:%s}}}`, strconv.Quote(key), strconv.Quote(value)), nil
}

// phaseSchedulers are kube-scheduler's configurations for the phases of
// GPU-free pods (plain) and of GPU pods (gpu); set once by the test.
var phaseSchedulers struct{ plain, gpu string }

// phaseOpts say what a phase creates and measures.
type phaseOpts struct {
	// gpu: the pods ask for GPUs (loadPod).
	gpu bool
	// backlog stops rota-extender while the pods are created and starts it
	// after kube-scheduler, so that the queue controller meets every pod of
	// the phase queued (with queueing on).
	backlog bool
	// profile takes rota-extender's CPU profile and the queue's passes over
	// the phase.
	profile bool
}

// runPhase stops kube-scheduler, creates n pods of the phase in bursts,
// starts kube-scheduler and waits for them to bind.
func runPhase(ctx context.Context, t *testing.T, env *harness.Env, w *bindWatch, phase string, n int, o phaseOpts) phaseResult {
	t.Helper()
	if err := env.Cluster.StopScheduler(); err != nil {
		t.Fatal(err)
	}
	if o.backlog {
		if err := env.Extender.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var owner *metav1.OwnerReference
	if o.gpu {
		owner = phaseJob(ctx, t, env, phase)
	}
	created := time.Now()
	createPods(ctx, t, phase, n, func(i int) *corev1.Pod { return loadPod(env, phase, i, o.gpu, owner) }, env)
	createRate := float64(n) / time.Since(created).Seconds()
	w.setExpect(phase, n)
	started := time.Now()
	cpu0, req0 := cpuTimes(env), apiRequests(ctx, t, env)
	sched := phaseSchedulers.plain
	if o.gpu {
		sched = phaseSchedulers.gpu
	}
	if err := env.SetSchedulerConfig(sched); err != nil {
		t.Fatal(err)
	}
	if err := env.Cluster.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	if o.backlog {
		if err := env.StartExtender(ctx); err != nil {
			t.Fatal(err)
		}
		// The extender's CPU counts from here: its start (informers
		// listing every node and pod) is not the queue's work.
		for k, v := range cpuTimes(env) {
			if k == "rota-extender" {
				cpu0[k] = v
			}
		}
	}
	var prof *profiler
	if o.profile {
		prof = startProfiler(ctx, t, env, phase)
	}
	apiProf := profileAPIServer(ctx, t, env, phase)
	limit := 5 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("ROTA_LOAD_PHASE_LIMIT")); err == nil {
		limit = d
	}
	res := w.wait(ctx, phase, limit)
	res.createRate = createRate
	// kube-scheduler was not running at the start: it counts from 0.
	res.cpu, res.requests = since(cpu0, cpuTimes(env)), since(req0, apiRequests(ctx, t, env))
	if prof != nil {
		res.profile, res.passes = prof.stop(ctx, t)
	}
	apiProf()
	if res.bound < n {
		t.Errorf("phase %s: %d of %d pods bound within %s of kube-scheduler's start", phase, res.bound, n, limit)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("phase %s: %d pods created at %.0f/s; %d bound at %.1f pods/s (first bind %.1fs after kube-scheduler started); load average %s",
		phase, n, createRate, res.bound, res.rate, w.first(phase).Sub(started).Seconds(), strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
	return res
}

// profileAPIServer keeps kube-apiserver's CPU profile of the phase's first
// 10 s (from kube-scheduler's start) in profileDir, with
// ROTA_LOAD_PROFILE_APISERVER=1, for reading by hand (go tool pprof): it is
// not in the summary. The returned func waits for it.
func profileAPIServer(ctx context.Context, t *testing.T, env *harness.Env, phase string) (wait func()) {
	t.Helper()
	if os.Getenv("ROTA_LOAD_PROFILE_APISERVER") != "1" {
		return func() {}
	}
	dir := profileDir()
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "10").
			Timeout(time.Minute).DoRaw(ctx)
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, phase+"-kube-apiserver.pb.gz"), raw, 0o644)
		}
		if err != nil {
			t.Logf("kube-apiserver CPU profile: %v", err)
		}
	}()
	return func() { <-done }
}

// createPods creates pods pod(0) .. pod(n-1) with workers in parallel, in
// bursts of burst.
func createPods(ctx context.Context, t *testing.T, what string, n int, pod func(i int) *corev1.Pod, env *harness.Env) {
	t.Helper()
	createEach(t, what, n, func(i int) error {
		_, err := env.CreatePod(ctx, pod(i))
		return err
	})
}

// createEach calls create for 0..n-1, workers at a time, in bursts.
func createEach(t *testing.T, what string, n int, create func(i int) error) {
	t.Helper()
	for start := 0; start < n; start += burst {
		var wg sync.WaitGroup
		idx := make(chan int)
		errs := make(chan error, 1)
		for range workers {
			wg.Go(func() {
				for i := range idx {
					if err := create(i); err != nil {
						select {
						case errs <- err:
						default:
						}
					}
				}
			})
		}
		for i := start; i < min(start+burst, n); i++ {
			idx <- i
		}
		close(idx)
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatalf("%s: %v", what, err)
		default:
		}
	}
}

// loadPod is pod i of a phase: GPU-free (100m CPU) or, for Rota, a mix of
// 10/20/40 GiB memory shares (60%) and 1 or 2 whole GPUs (40%).
// phaseJob creates a suspended Job that a phase's GPU pods name as their
// controller, as a training Job's pods do (no Job controller runs here: the
// pods are created directly). The queue orders them by the Job's creation
// and narrows them at admission, as it does a Job's pods (it narrows no
// bare pod).
func phaseJob(ctx context.Context, t *testing.T, env *harness.Env, phase string) *metav1.OwnerReference {
	t.Helper()
	suspend := true
	j, err := env.Client.BatchV1().Jobs(namespace).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: phase},
		Spec: batchv1.JobSpec{Suspend: &suspend, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "rota.test/none"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("phase %s: its Job: %v", phase, err)
	}
	yes := true
	return &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: j.Name, UID: j.UID, Controller: &yes}
}

func loadPod(env *harness.Env, phase string, i int, gpu bool, owner *metav1.OwnerReference) *corev1.Pod {
	b := harness.Pod(namespace, fmt.Sprintf("%s-%05d", phase, i)).Label("rota.test/phase", phase).CPU("100m")
	if gpu {
		switch i % 5 {
		case 0, 1, 2:
			b = b.Memory([]int64{10, 20, 40}[i%3])
		case 3:
			b = b.GPUs(1)
		default:
			b = b.GPUs(2)
		}
	}
	p := b.Obj()
	p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("64Mi")
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// bindWatch records when each pod of the namespace is first seen bound.
type bindWatch struct {
	mu     sync.Mutex
	bound  map[string]map[string]time.Time // phase -> pod -> time
	expect map[string]int
}

func newBindWatch(ctx context.Context, t *testing.T, env *harness.Env) *bindWatch {
	w := &bindWatch{bound: map[string]map[string]time.Time{}, expect: map[string]int{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.Client, 0, informers.WithNamespace(namespace))
	inf := f.Core().V1().Pods().Informer()
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		phase := p.Labels["rota.test/phase"]
		w.mu.Lock()
		defer w.mu.Unlock()
		m := w.bound[phase]
		if m == nil {
			m = map[string]time.Time{}
			w.bound[phase] = m
		}
		if _, ok := m[p.Name]; !ok {
			m[p.Name] = now
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	t.Cleanup(f.Shutdown)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return w
}

// setExpect sets how many pods of phase to wait for.
func (w *bindWatch) setExpect(phase string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expect[phase] = n
}

func (w *bindWatch) first(phase string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var f time.Time
	for _, at := range w.bound[phase] {
		if f.IsZero() || at.Before(f) {
			f = at
		}
	}
	return f
}

// wait waits until the phase's expected pods are bound (or limit passes)
// and returns the rate from first to last bind.
func (w *bindWatch) wait(ctx context.Context, phase string, limit time.Duration) phaseResult {
	deadline := time.Now().Add(limit)
	for {
		w.mu.Lock()
		n, want := len(w.bound[phase]), w.expect[phase]
		w.mu.Unlock()
		if n >= want || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	times := make([]time.Time, 0, len(w.bound[phase]))
	for _, at := range w.bound[phase] {
		times = append(times, at)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	r := phaseResult{bound: len(times), total: w.expect[phase]}
	switch {
	case len(times) > 1 && len(times) >= r.total:
		r.span = times[len(times)-1].Sub(times[0])
		r.rate = float64(len(times)-1) / r.span.Seconds()
	case len(times) > 0:
		// Not all bound: the rate over the whole wait, not just the
		// stretch in which binds happened.
		r.span = time.Since(times[0])
		r.rate = float64(len(times)) / r.span.Seconds()
	}
	return r
}

// metrics is one scrape of rota-extender's /metrics.
type metrics struct {
	samples map[string]float64
	buckets map[string]map[float64]float64 // verb -> le -> cumulative count
}

var bucketRE = regexp.MustCompile(`^rota_extender_request_duration_seconds_bucket\{(.*)\}$`)
var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

func scrape(ctx context.Context, t *testing.T, env *harness.Env) metrics {
	t.Helper()
	samples, err := env.ExtenderMetrics(ctx)
	if err != nil {
		t.Fatalf("scraping rota-extender: %v", err)
	}
	m := metrics{samples: samples, buckets: map[string]map[float64]float64{}}
	for name, v := range samples {
		if sm := bucketRE.FindStringSubmatch(name); sm != nil {
			var verb string
			le := math.NaN()
			for _, l := range labelRE.FindAllStringSubmatch(sm[1], -1) {
				switch l[1] {
				case "verb":
					verb = l[2]
				case "le":
					le, _ = strconv.ParseFloat(l[2], 64) // "+Inf" parses as +Inf
				}
			}
			if verb != "" && !math.IsNaN(le) {
				if m.buckets[verb] == nil {
					m.buckets[verb] = map[float64]float64{}
				}
				m.buckets[verb][le] = v
			}
		}
	}
	return m
}

// count is the number of calls of verb observed.
func (m metrics) count(verb string) float64 { return m.buckets[verb][math.Inf(1)] }

// quantile estimates the q-quantile of verb's latency over the calls
// between base and m, interpolating linearly inside a bucket as
// Prometheus's histogram_quantile does.
func (m metrics) quantile(base metrics, verb string, q float64) float64 {
	type b struct{ le, n float64 }
	var bs []b
	for le, n := range m.buckets[verb] {
		bs = append(bs, b{le, n - base.buckets[verb][le]})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].n
	prevLe, prevN := 0.0, 0.0
	for _, x := range bs {
		if x.n >= rank {
			if math.IsInf(x.le, 1) {
				return prevLe
			}
			if x.n == prevN {
				return x.le
			}
			return prevLe + (x.le-prevLe)*(rank-prevN)/(x.n-prevN)
		}
		prevLe, prevN = x.le, x.n
	}
	return prevLe
}

// vmHWM returns a process's peak resident set size in KiB (0 if unknown).
// apiRequests scrapes the API server's apiserver_request_total, summed by
// verb and resource (watch events are not requests and are not counted).
func apiRequests(ctx context.Context, t *testing.T, env *harness.Env) map[string]float64 {
	t.Helper()
	raw, err := env.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("scraping kube-apiserver: %v", err)
	}
	samples, err := harness.ParseSamples(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("scraping kube-apiserver: %v", err)
	}
	out := map[string]float64{}
	for name, v := range samples {
		if !strings.HasPrefix(name, "apiserver_request_total{") {
			continue
		}
		l := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(name, -1) {
			l[m[1]] = m[2]
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

// since returns after minus before, key by key.
func since(before, after map[string]float64) map[string]float64 {
	for k, v := range before {
		after[k] -= v
	}
	return after
}

// cpuTimes returns the CPU seconds used so far by each process of the run.
func cpuTimes(env *harness.Env) map[string]float64 {
	pids := env.Cluster.PIDs()
	pids["rota-extender"], pids["rota-admission"] = env.Extender.PID(), env.Admission.PID()
	out := map[string]float64{}
	for name, pid := range pids {
		if d, ok := cluster.CPUTime(pid); ok {
			out[name] = d.Seconds()
		}
	}
	return out
}

func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}
