package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/evaluate"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/test/cluster"
	"github.com/rota-sched/rota/test/e2e/harness"
	"github.com/rota-sched/rota/test/evaluate/evalkit"
)

// The soak's cluster: the evaluation's small cluster (4 nodes of 8 GPUs,
// three teams and a shared pool), every node with a real device plugin,
// and two replicas of each Rota service, as the chart runs them.
const (
	plugins  = 4
	webhooks = 2
	// waveEvery is how often a new wave of the mixed scenario starts; its
	// arrivals span about a minute.
	waveEvery = 75 * time.Second
	// checkEvery is the invariant checker's period; sampleEvery the
	// processes' (heap, goroutines, open files).
	checkEvery  = 5 * time.Second
	sampleEvery = 20 * time.Second
	// drainTimeout bounds a quiet point's wait for the submitted jobs.
	drainTimeout = 8 * time.Minute
)

type soak struct {
	o     options
	logf  func(string, ...any)
	plan  Plan
	env   *harness.Env
	q     *quota.Config
	sc    evaluate.Scenario
	start time.Time
	wave  int

	// suspends holds the teams whose namespace queues Jobs suspended
	// (every other team's, from the first): the other teams' Jobs queue as
	// gated pods, so both ways are soaked at once.
	suspends map[string]bool

	mu      sync.Mutex
	jobs    map[string]*jobState
	res     *Result
	segment int // the segment running, for the records
}

type jobState struct {
	job       evaluate.Job
	ns        string
	segment   int
	accounted bool
	// refused is why the API server refused to create the Job (a
	// namespace that queues Jobs suspended refuses one that can never
	// run at creation, as it refuses such a gated pod).
	refused string
}

func run(ctx context.Context, o options, logf func(string, ...any)) (*Result, error) {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return nil, err
	}
	sc := evaluate.Mixed(o.seed, evaluate.Small)
	plan := NewPlan(o.seed, o.duration, sc.Cluster.Nodes, plugins, webhooks)
	if o.plan != "" {
		var err error
		if plan, err = LoadPlan(o.plan); err != nil {
			return nil, err
		}
		if plan.Nodes != sc.Cluster.Nodes || plan.Plugins != plugins || plan.Webhooks != webhooks {
			return nil, fmt.Errorf("plan %s is for %d nodes, %d plugins and %d webhooks; this soak runs %d, %d and %d",
				o.plan, plan.Nodes, plan.Plugins, plan.Webhooks, sc.Cluster.Nodes, plugins, webhooks)
		}
		sc = evaluate.Mixed(plan.Seed, evaluate.Small)
	}
	s := &soak{o: o, logf: logf, plan: plan, sc: sc, jobs: map[string]*jobState{},
		res: &Result{Seed: plan.Seed, Plan: plan, PodFailures: map[string]int{}}}
	raw, err := json.MarshalIndent(plan, "", "  ")
	if err != nil {
		return nil, err
	}
	planPath := filepath.Join(o.out, "plan.json")
	if err := os.WriteFile(planPath, raw, 0o644); err != nil {
		return nil, err
	}
	s.printPlan(planPath)

	dir, err := os.MkdirTemp("", "rota-soak-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		logf("control plane folder (kept): %s", dir)
	}
	defer func() {
		if s.env != nil {
			if err := s.env.Stop(); err != nil {
				logf("stopping: %v", err)
			}
		}
		if !o.keep {
			_ = os.RemoveAll(dir)
		}
	}()
	if err := s.setUp(ctx, dir); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { s.checkLoop(rctx) })
	loops.Go(func() { s.sampleLoop(rctx) })
	s.start = time.Now()
	s.res.Began = s.start
	for i, seg := range plan.Segments {
		if ctx.Err() != nil {
			break
		}
		s.mu.Lock()
		s.segment = i
		s.mu.Unlock()
		what := "clean"
		if seg.Upgrade {
			what = "the rolling upgrade to the next build and back"
		}
		if seg.Chaos {
			what = fmt.Sprintf("chaos, %d faults", len(s.faultsOf(i)))
		}
		logf("== segment %d/%d: %s of load (%s)", i+1, len(plan.Segments), seg.Length, what)
		segStart := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() { s.load(rctx, i, segStart.Add(seg.Length)) })
		wg.Go(func() { s.runFaults(rctx, i, segStart) })
		if seg.Upgrade {
			wg.Go(func() { s.upgrade(rctx) })
		}
		wg.Wait()
		s.quietPoint(rctx, i)
	}
	cancel()
	loops.Wait()
	s.res.Ended = time.Now()
	if ctx.Err() != nil {
		return s.res, ctx.Err()
	}
	s.res.judgeLeaks()
	if err := s.res.write(o.out); err != nil {
		return s.res, err
	}
	fmt.Print(s.res.Summary())
	logf("report: %s", filepath.Join(o.out, "report.md"))
	return s.res, nil
}

func (s *soak) printPlan(path string) {
	counts := s.plan.Counts()
	var parts []string
	for _, k := range Kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	s.logf("fault plan (seed %d, rerun with -plan %s): %d segments, %d faults: %s",
		s.plan.Seed, path, len(s.plan.Segments), len(s.plan.Faults), strings.Join(parts, ", "))
	for _, f := range s.plan.Faults {
		s.logf("   %s", f)
	}
}

// setUp starts the control plane with Rota as the chart runs it, the
// job and node lifecycle controllers, the nodes and the teams.
func (s *soak) setUp(ctx context.Context, dir string) error {
	doc := evalkit.RotaQuota(s.sc)
	q, err := quota.ParseYAML([]byte(doc))
	if err != nil {
		return err
	}
	s.q = &q
	began := time.Now()
	s.env, err = harness.Start(ctx, harness.Options{Dir: dir, Quota: doc, Queueing: true, Extenders: 2, Webhooks: webhooks,
		Profiling: true, ExtenderArgs: evalkit.ChartExtenderArgs, Logf: func(f string, a ...any) { s.logf("   "+f, a...) }})
	if err != nil {
		return err
	}
	// The job controller runs the Jobs; the node lifecycle controller
	// turns a node whose heartbeat stops NotReady and taints it.
	if err := s.env.StartControllerManager(ctx, "job", "node-lifecycle-controller"); err != nil {
		return err
	}
	if _, err := s.env.AddGPUNodes(ctx, evalkit.RotaNodes(s.sc, plugins)...); err != nil {
		return err
	}
	s.suspends = map[string]bool{}
	var suspended []string
	for i, t := range s.sc.Teams {
		if i%2 == 0 {
			s.suspends[t.Name] = true
			suspended = append(suspended, t.Name)
		}
	}
	if err := evalkit.CreateTeams(ctx, s.env.Client, s.sc, namespace, func(team string) map[string]string {
		l := map[string]string{s.env.Names.TeamLabel: team}
		if s.suspends[team] {
			l[s.env.Names.QueueingLabel] = contract.QueueingSuspend
		}
		return l
	}); err != nil {
		return err
	}
	sleeper := cluster.NewSleeper(s.env.Client, func(node string) bool { return s.env.GPUNode(node) != nil })
	if err := sleeper.Start(ctx); err != nil {
		return err
	}
	s.logf("cluster up in %s: %d nodes x %d GPUs (device plugins on %d), 2 extenders, %d webhooks, teams %v (Jobs queued suspended: %v; the others' pods gated)",
		time.Since(began).Round(time.Second), s.sc.Cluster.Nodes, s.sc.Cluster.GPUsPerNode, plugins, webhooks, teamNames(s.sc), suspended)
	return nil
}

func namespace(team string) string { return "team-" + team }

func teamNames(sc evaluate.Scenario) []string {
	var out []string
	for _, t := range sc.Teams {
		out = append(out, t.Name)
	}
	return out
}

func (s *soak) faultsOf(seg int) []Fault {
	var out []Fault
	for _, f := range s.plan.Faults {
		if f.Segment == seg {
			out = append(out, f)
		}
	}
	return out
}

// load submits waves of the mixed scenario until end.
func (s *soak) load(ctx context.Context, seg int, end time.Time) {
	for ctx.Err() == nil && time.Now().Before(end) {
		s.wave++
		wave := evaluate.Mixed(s.plan.Seed*1000+uint64(s.wave), evaluate.Small)
		began := time.Now()
		for _, j := range wave.Jobs {
			at := began.Add(j.Arrival)
			if at.After(end) {
				break
			}
			if !sleepUntil(ctx, at) {
				return
			}
			j.Name = fmt.Sprintf("w%d-%s", s.wave, j.Name)
			j.Runtime = max(5*time.Second, time.Duration(float64(j.Runtime)*s.o.scale)).Round(time.Second)
			s.submit(ctx, j, seg)
		}
		if !sleepUntil(ctx, minTime(began.Add(waveEvery), end)) {
			return
		}
	}
}

// submit creates j's Job, retrying while the API server is away (as a
// user's client would): a Job is never given up on.
func (s *soak) submit(ctx context.Context, j evaluate.Job, seg int) {
	ns := namespace(j.Team)
	// Gated teams' gangs carry Rota's gang label; suspended teams' are
	// read from the Job's shape (Indexed, completions equal to parallelism).
	obj := evalkit.Object(j, ns, evalkit.Shape{Shares: true, GangLabels: !s.suspends[j.Team]}, "soak", s.env.Names)
	// As jobs on a cluster with faults do, a pod that fails is retried a
	// few times; every failure is still counted by reason in the report.
	retries := int32(3)
	obj.Spec.BackoffLimit = &retries
	for try := 0; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := s.env.Client.BatchV1().Jobs(ns).Create(cctx, obj, metav1.CreateOptions{})
		cancel()
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		if apierrors.IsForbidden(err) {
			// A webhook's answer, not an outage (which fails the call
			// with an internal error): accounted, never retried.
			s.mu.Lock()
			s.jobs[j.Name] = &jobState{job: j, ns: ns, segment: seg, refused: err.Error()}
			s.res.Jobs.Submitted++
			s.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.res.CreateRetries++
		s.mu.Unlock()
		if try%10 == 0 {
			s.logf("   creating job %s/%s: %v (retrying)", ns, j.Name, err)
		}
		if !sleepUntil(ctx, time.Now().Add(2*time.Second)) {
			return
		}
	}
	s.mu.Lock()
	s.jobs[j.Name] = &jobState{job: j, ns: ns, segment: seg}
	s.res.Jobs.Submitted++
	s.mu.Unlock()
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// quietPoint stops the load's effects: it waits until every fault has
// healed (runFaults returned) and every submitted job has finished or
// waits with a reason, accounts for them, removes them, and measures every
// Rota process at rest.
func (s *soak) quietPoint(ctx context.Context, seg int) {
	began := time.Now()
	pending := s.drain(ctx)
	s.account(ctx, pending)
	if err := s.removeJobs(ctx); err != nil {
		s.res.addViolation(time.Since(s.start), "cleanup", err.Error())
	}
	// Let idle connections and finished goroutines go before measuring.
	sleepUntil(ctx, time.Now().Add(10*time.Second))
	qp := QuietPoint{Segment: seg, At: time.Since(s.start).Seconds()}
	for _, p := range s.processes() {
		if sm, err := s.sample(ctx, p); err == nil {
			qp.Samples = append(qp.Samples, sm)
		} else {
			qp.Missing = append(qp.Missing, p.name+": "+err.Error())
		}
	}
	s.mu.Lock()
	s.res.Quiet = append(s.res.Quiet, qp)
	s.mu.Unlock()
	var parts []string
	for _, sm := range qp.Samples {
		parts = append(parts, fmt.Sprintf("%s %.1fMiB/%dg/%dfd", sm.Process, sm.HeapMiB, sm.Goroutines, sm.FDs))
	}
	s.logf("   quiet point %d after %s: %s", seg+1, time.Since(began).Round(time.Second), strings.Join(parts, ", "))
	if len(qp.Missing) > 0 {
		s.logf("   not measured: %s", strings.Join(qp.Missing, "; "))
	}
}

// drain waits until every fitting job submitted so far has finished, and
// returns those that have not by drainTimeout.
func (s *soak) drain(ctx context.Context) map[string]string {
	deadline := time.Now().Add(drainTimeout)
	last := time.Now()
	for {
		left := s.unfinished(ctx)
		if len(left) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return left
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			s.logf("   draining: %d jobs unfinished, e.g. %s", len(left), firstOf(left))
		}
		sleepUntil(ctx, time.Now().Add(3*time.Second))
	}
}

func firstOf(m map[string]string) string {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		return k + " (" + m[k] + ")"
	}
	return ""
}

// unfinished lists the fitting jobs not yet accounted that have neither
// completed nor failed, with their state; it reads every team's Jobs.
func (s *soak) unfinished(ctx context.Context) map[string]string {
	jobs, err := s.listJobs(ctx)
	left := map[string]string{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, st := range s.jobs {
		if st.accounted || st.job.NeverFits || st.refused != "" {
			continue
		}
		if err != nil {
			left[name] = "jobs unreadable: " + err.Error()
			continue
		}
		j, ok := jobs[name]
		switch {
		case !ok:
			left[name] = "Job missing"
		case finished(j) == "":
			left[name] = fmt.Sprintf("%d active, %d succeeded, %d failed", j.Status.Active, j.Status.Succeeded, j.Status.Failed)
		}
	}
	return left
}

func (s *soak) listJobs(ctx context.Context) (map[string]*batchv1.Job, error) {
	out := map[string]*batchv1.Job{}
	for _, t := range s.sc.Teams {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		list, err := s.env.Client.BatchV1().Jobs(namespace(t.Name)).List(lctx, metav1.ListOptions{LabelSelector: evalkit.JobLabel})
		cancel()
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
}

// finished is "Complete" or "Failed" for a finished Job, else "".
func finished(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return string(c.Type)
		}
	}
	return ""
}

// account records every job not yet accounted: completed, failed (a
// violation, with its pods' reasons), never fitting and queued with a
// reason, or lost: unfinished after the drain, or never fitting without a
// pod that says why it waits.
func (s *soak) account(ctx context.Context, unfinished map[string]string) {
	jobs, err := s.listJobs(ctx)
	if err != nil {
		s.res.addViolation(time.Since(s.start), "accounting", "reading the Jobs: "+err.Error())
		return
	}
	pods := map[string][]corev1.Pod{}
	for _, t := range s.sc.Teams {
		list, err := s.env.Client.CoreV1().Pods(namespace(t.Name)).List(ctx, metav1.ListOptions{LabelSelector: evalkit.JobLabel})
		if err != nil {
			s.res.addViolation(time.Since(s.start), "accounting", "reading the pods: "+err.Error())
			return
		}
		for _, p := range list.Items {
			pods[p.Labels[evalkit.JobLabel]] = append(pods[p.Labels[evalkit.JobLabel]], p)
		}
	}
	refused, err := s.refusals(ctx)
	if err != nil {
		s.res.addViolation(time.Since(s.start), "accounting", "reading the Jobs' events: "+err.Error())
		return
	}
	at := time.Since(s.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(s.jobs)) {
		st := s.jobs[name]
		if st.accounted {
			continue
		}
		st.accounted = true
		for _, p := range pods[name] {
			if p.Status.Phase == corev1.PodFailed {
				s.res.PodFailures[failureReason(&p)]++
			}
		}
		if why, ok := unfinished[name]; ok {
			s.res.Jobs.Lost++
			s.res.addViolationLocked(at, "job lost", fmt.Sprintf("%s/%s not finished %s after the load stopped: %s%s",
				st.ns, name, drainTimeout, why, podStates(pods[name])))
			continue
		}
		j := jobs[name]
		switch {
		case st.refused != "" && st.job.NeverFits:
			s.res.Jobs.Refused++
		case st.refused != "":
			s.res.Jobs.Failed++
			s.res.addViolationLocked(at, "job refused", fmt.Sprintf("%s/%s, which fits, was refused at creation: %s", st.ns, name, st.refused))
		case st.job.NeverFits:
			why := queuedWithoutReason(pods[name], s.env.Names.QueuedCondition)
			switch {
			case why == "":
				s.res.Jobs.QueuedWithReason++
			case refused[name] != "":
				s.res.Jobs.Refused++
			default:
				s.res.Jobs.Lost++
				s.res.addViolationLocked(at, "job lost", fmt.Sprintf("%s/%s can never fit and should wait or be refused with a reason: %s", st.ns, name, why))
			}
		case j == nil:
			s.res.Jobs.Lost++
			s.res.addViolationLocked(at, "job lost", fmt.Sprintf("%s/%s: the Job is gone", st.ns, name))
		case finished(j) == "Complete" && s.suspends[st.job.Team] && st.job.GPUs+st.job.MemoryGiB > 0 &&
			j.Annotations[s.env.Names.QueuedJobAnnotation] != "true":
			// The measure of both ways of queueing: a GPU Job of a team
			// that queues Jobs suspended must have waited suspended.
			s.res.Jobs.Failed++
			s.res.addViolationLocked(at, "job not queued suspended", fmt.Sprintf("%s/%s ran, but was not queued suspended", st.ns, name))
		case finished(j) == "Complete":
			s.res.Jobs.Completed++
			if j.Annotations[s.env.Names.QueuedJobAnnotation] == "true" {
				s.res.Jobs.CompletedSuspended++
			}
		default:
			s.res.Jobs.Failed++
			s.res.addViolationLocked(at, "job failed", fmt.Sprintf("%s/%s failed: %s%s", st.ns, name, jobFailure(j), podStates(pods[name])))
		}
	}
}

// refusals maps each Job whose pods the API server refused to create
// because a webhook denied them (work that can never run is refused at
// creation) to the job controller's FailedCreate message.
func (s *soak) refusals(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, t := range s.sc.Teams {
		list, err := s.env.Client.CoreV1().Events(namespace(t.Name)).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Job,reason=FailedCreate"})
		if err != nil {
			return nil, err
		}
		for _, ev := range list.Items {
			if strings.Contains(ev.Message, "denied the request") {
				out[ev.InvolvedObject.Name] = ev.Message
			}
		}
	}
	return out, nil
}

func jobFailure(j *batchv1.Job) string {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobFailed {
			return c.Reason + ": " + c.Message
		}
	}
	return "no Failed condition"
}

func failureReason(p *corev1.Pod) string {
	if p.Status.Reason != "" {
		return p.Status.Reason
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return "DisruptionTarget/" + c.Reason
		}
	}
	return "Failed"
}

// podStates describes a job's pods for a violation's message.
func podStates(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "; no pods"
	}
	var parts []string
	for _, p := range pods {
		st := string(p.Status.Phase)
		if p.Spec.NodeName != "" {
			st += " on " + p.Spec.NodeName
		}
		if len(p.Spec.SchedulingGates) > 0 {
			st += " gated"
		}
		if p.Status.Reason != "" {
			st += " (" + p.Status.Reason + ": " + p.Status.Message + ")"
		}
		parts = append(parts, p.Name+" "+st)
	}
	return "; pods: " + strings.Join(parts, ", ")
}

// queuedWithoutReason returns "" when the never-fitting job has pods and
// each waits with a reason: Rota's Queued condition, or kube-scheduler's
// PodScheduled=False with a message.
func queuedWithoutReason(pods []corev1.Pod, queuedCondition string) string {
	live := 0
	for _, p := range pods {
		if podreq.Terminal(&p) {
			continue
		}
		live++
		if p.Spec.NodeName != "" {
			return fmt.Sprintf("pod %s is bound to %s", p.Name, p.Spec.NodeName)
		}
		reason := false
		for _, c := range p.Status.Conditions {
			if (string(c.Type) == queuedCondition || (c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse)) && c.Message != "" {
				reason = true
			}
		}
		if !reason {
			return fmt.Sprintf("pod %s waits with no condition saying why", p.Name)
		}
	}
	if live == 0 {
		return "it has no waiting pod" + podStates(pods)
	}
	return ""
}

// removeJobs deletes the accounted Jobs and their pods, so that every
// quiet point measures the processes with the same objects in the API.
func (s *soak) removeJobs(ctx context.Context) error {
	orphan := metav1.DeletePropagationOrphan
	s.mu.Lock()
	var del []*jobState
	for _, st := range s.jobs {
		if st.accounted {
			del = append(del, st)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, st := range del {
		err := s.env.Client.BatchV1().Jobs(st.ns).Delete(ctx, st.job.Name, metav1.DeleteOptions{PropagationPolicy: &orphan})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, t := range s.sc.Teams {
		err := s.env.Client.CoreV1().Pods(namespace(t.Name)).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: evalkit.JobLabel})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Pods keep the job controller's finalizer until it lets them go.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := 0
		for _, t := range s.sc.Teams {
			list, err := s.env.Client.CoreV1().Pods(namespace(t.Name)).List(ctx, metav1.ListOptions{LabelSelector: evalkit.JobLabel})
			if err != nil {
				return err
			}
			left += len(list.Items)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d pods of removed jobs still exist after 2 minutes", left)
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
	s.mu.Lock()
	for _, st := range del {
		delete(s.jobs, st.job.Name)
	}
	s.mu.Unlock()
	return nil
}

// partialGangGrace is how long a gang may stay partly bound: kube-scheduler
// binds a gang's members one by one, and when the extender leader or
// kube-scheduler dies between two binds the rest wait for the new leader
// and the scheduler's backoff; the extender's gang plan holds their slots
// for its gang TTL (2 min, the chart's). Longer is a broken gang.
const partialGangGrace = 2*time.Minute + 30*time.Second

// checkLoop runs the invariant checker every checkEvery. A single reading
// of the API is one consistent snapshot, so any violation in it counts at
// once, except a gang partly bound, which counts once it has stayed so for
// partialGangGrace.
func (s *soak) checkLoop(ctx context.Context) {
	partialSince := map[string]time.Time{}
	every(ctx, checkEvery, func() {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		vs, err := s.env.CheckInvariants(cctx, s.q)
		cancel()
		s.mu.Lock()
		s.res.Checks.Run++
		if err != nil {
			s.res.Checks.Unavailable++
			s.mu.Unlock()
			return
		}
		at := time.Since(s.start)
		now := time.Now()
		partial := map[string]bool{}
		for _, v := range vs {
			if v.Kind != "PartialGang" {
				s.res.addViolationLocked(at, "invariant "+string(v.Kind), v.Object+": "+v.Message)
				continue
			}
			partial[v.Object] = true
			since, seen := partialSince[v.Object]
			if !seen {
				partialSince[v.Object], since = now, now
				s.res.Checks.Transient++
			}
			d := now.Sub(since)
			s.res.Checks.LongestPartialGang = max(s.res.Checks.LongestPartialGang, d.Round(time.Second).Seconds())
			if d > partialGangGrace {
				s.res.addViolationLocked(at, "invariant PartialGang", fmt.Sprintf("%s: %s, for %s", v.Object, v.Message, d.Round(time.Second)))
			}
		}
		for k := range partialSince {
			if !partial[k] {
				delete(partialSince, k)
			}
		}
		s.mu.Unlock()
	})
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// sampleLoop measures every Rota process every sampleEvery.
func (s *soak) sampleLoop(ctx context.Context) {
	every(ctx, sampleEvery, func() {
		for _, p := range s.processes() {
			if sm, err := s.sample(ctx, p); err == nil {
				s.mu.Lock()
				s.res.Samples = append(s.res.Samples, sm)
				s.mu.Unlock()
			}
		}
	})
}

// Result is what a soak found.
type Result struct {
	Seed         uint64
	Plan         Plan
	Began, Ended time.Time
	Faults       []FaultRecord
	Rolls        []Roll
	Jobs         struct{ Submitted, Completed, CompletedSuspended, Failed, QueuedWithReason, Refused, Lost int }
	Checks       struct {
		Run, Unavailable int
		// Transient counts gangs seen partly bound; LongestPartialGang is
		// the longest any stayed so, in seconds.
		Transient          int
		LongestPartialGang float64
	}
	Violations []Violation
	// CreateRetries counts Job creations retried (API server away).
	CreateRetries int
	PodFailures   map[string]int
	Quiet         []QuietPoint
	Samples       []Sample
	Leaks         []string
	Processes     []ProcessVerdict
}

// Violation is one thing that went wrong, at a time from the start.
type Violation struct {
	AtSeconds float64
	What      string
	Detail    string
}

// maxViolations bounds how many violations are kept (the count goes on).
const maxViolations = 200

func (r *Result) addViolation(at time.Duration, what, detail string) {
	r.Violations = append(r.Violations, Violation{AtSeconds: math.Round(at.Seconds()), What: what, Detail: detail})
}

func (r *Result) addViolationLocked(at time.Duration, what, detail string) {
	if len(r.Violations) < maxViolations {
		r.addViolation(at, what, detail)
		return
	}
	r.Violations[maxViolations-1].Detail = fmt.Sprintf("(and more: the first %d are kept)", maxViolations)
}

// Passed reports whether nothing broke, nothing was lost, every fault was
// injected and healed, and nothing leaked.
func (r *Result) Passed() bool {
	return len(r.Violations) == 0 && len(r.Leaks) == 0 && r.faultErrors() == 0 && r.Jobs.Submitted > 0
}

func (r *Result) faultErrors() int {
	n := 0
	for _, f := range r.Faults {
		if f.Err != "" {
			n++
		}
	}
	for _, rl := range r.Rolls {
		if rl.Err != "" {
			n++
		}
	}
	if len(r.Rolls) == 0 && r.Plan.hasUpgrade() {
		n++ // the upgrade never ran
	}
	return n
}

// FailureSummary says in a line why the soak failed.
func (r *Result) FailureSummary() string {
	var parts []string
	if n := len(r.Violations); n > 0 {
		parts = append(parts, fmt.Sprintf("%d violations, first: %s: %s", n, r.Violations[0].What, r.Violations[0].Detail))
	}
	if n := len(r.Leaks); n > 0 {
		parts = append(parts, fmt.Sprintf("%d leaks, first: %s", n, r.Leaks[0]))
	}
	if n := r.faultErrors(); n > 0 {
		parts = append(parts, fmt.Sprintf("%d faults or upgrade steps not done or not healed", n))
	}
	if r.Jobs.Submitted == 0 {
		parts = append(parts, "no job was submitted")
	}
	return strings.Join(parts, "; ")
}
