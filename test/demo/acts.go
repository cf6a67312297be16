package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// The training team's work on its dedicated leaf (8 H100 nodes, 64 GPUs):
// a sweep takes half of the leaf; the 64-GPU gang then waits for the
// whole leaf with a reservation; short evaluations that declare a runtime
// ending before the gang's expected start backfill the held GPUs, and one
// declaring 2 hours is refused them. Every pod sleeps for its runtime and
// declares a maximum runtime (example.com/max-runtime) a little longer.
type trainingPod struct {
	name     string
	count    int // pods
	gpus     int // whole GPUs per pod
	at       time.Duration
	sleep    time.Duration
	declares string
	gang     bool
}

const gangName = "llm-train"

var trainingWork = []trainingPod{
	{name: "sweep", count: 8, gpus: 4, at: time.Second, sleep: 45 * time.Second, declares: "60s"},
	{name: gangName, count: 8, gpus: 8, at: 8 * time.Second, sleep: 30 * time.Second, declares: "1m", gang: true},
	{name: "long-eval", count: 1, gpus: 4, at: 15 * time.Second, sleep: 20 * time.Second, declares: "2h"},
	{name: "quick-eval", count: 4, gpus: 4, at: 18 * time.Second, sleep: 12 * time.Second, declares: "20s"},
}

// Team interns (quota 2 GPUs, 16 GiB of shares) opens four notebooks of
// an 8 GiB share each: two fit the quota, two are queued.
const (
	notebooks     = 4
	notebookGiB   = 8
	notebookSleep = 20 * time.Second
)

// trainingEvents are the replay's events that submit the training work.
func (d *demo) trainingEvents(ctx context.Context) []event {
	var evs []event
	for _, w := range trainingWork {
		evs = append(evs, event{at: w.at, do: func() { d.submitTraining(ctx, w) }})
	}
	return evs
}

// sleepFor makes a pod's container sleep for its runtime and declare a
// maximum runtime.
func (d *demo) sleepFor(p *corev1.Pod, sleep time.Duration, declares string) {
	p.Spec.Containers[0].Command = []string{"sleep", fmt.Sprint(int(sleep.Seconds()))}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[d.env.Names.MaxRuntimeAnnotation] = declares
}

func (d *demo) submitTraining(ctx context.Context, w trainingPod) {
	what := fmt.Sprintf("%d pods x %d GPUs", w.count, w.gpus)
	if w.gang {
		what = fmt.Sprintf("a gang of %d pods x %d GPUs (%d GPUs, all or nothing)", w.count, w.gpus, w.count*w.gpus)
		d.steps.gangSubmitted(time.Now())
	}
	d.logf("team training submits %s/%s: %s, each runs %s and declares max-runtime %s", trainNS, w.name, what, w.sleep, w.declares)
	for i := range w.count {
		name := w.name
		if w.count > 1 {
			name = fmt.Sprintf("%s-%d", w.name, i)
		}
		b := harness.Pod(trainNS, name).GPUs(w.gpus).CPU("8").NodeSelector(poolLabel, trainNS)
		if w.gang {
			b.Gang(gangName, w.count)
		}
		p := b.Obj()
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{
			Key: dedicatedTaint, Operator: corev1.TolerationOpEqual, Value: trainNS, Effect: corev1.TaintEffectNoSchedule})
		d.sleepFor(p, w.sleep, w.declares)
		d.tracker.created(trainNS, name)
		if _, err := d.env.CreatePod(ctx, p); err != nil {
			d.deny(trainNS+"/"+name, err)
		}
	}
}

// submitInterns: team interns asks for more than its quota, and one intern
// writes a memory share in bytes (a request that can never run).
func (d *demo) submitInterns(ctx context.Context) {
	d.logf("team interns (quota 2 GPUs, 16 GiB) opens %d notebooks of a %d GiB share each, and one share written as 20Gi", notebooks, notebookGiB)
	for i := range notebooks {
		name := fmt.Sprintf("notebook-%d", i)
		p := harness.Pod(internNS, name).Memory(notebookGiB).Obj()
		d.sleepFor(p, notebookSleep, "1m")
		d.tracker.created(internNS, name)
		if _, err := d.env.CreatePod(ctx, p); err != nil {
			d.deny(internNS+"/"+name, err)
		}
	}
	p := harness.Pod(internNS, "bytes-share").Obj()
	q := resource.MustParse("20Gi")
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceName(d.env.Names.GPUMemory): q},
		Requests: corev1.ResourceList{corev1.ResourceName(d.env.Names.GPUMemory): q},
	}
	if _, err := d.env.CreatePod(ctx, p); err != nil {
		d.deny(internNS+"/bytes-share", err)
	}
}

// steps watches the training and interns pods and prints each thing worth
// seeing once, as it happens: the gang's reservation and expected start,
// the long pod refused the held GPUs, each backfilled pod, the gang's
// start, the interns' queue and its admissions. What it saw goes into the
// report.
type steps struct {
	d    *demo
	quit chan struct{}
	done chan struct{}

	mu        sync.Mutex
	said      map[string]bool
	submitted time.Time // the gang's submission
	reserved  string    // the gang's condition when its room was first held
	refused   string    // long-eval's condition when it was refused the held GPUs
	backfill  []string  // pods admitted onto held GPUs, with their node
	started   time.Time // all the gang's members bound
	gangNodes map[string]int
	queued    []string // interns' pods seen queued, with their position
	admitted  []string // interns' pods admitted after queueing, with their wait
}

func newSteps(d *demo) *steps {
	return &steps{d: d, quit: make(chan struct{}), done: make(chan struct{}), said: map[string]bool{}}
}

func (s *steps) gangSubmitted(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.submitted = t
}

// once reports whether key is new (and remembers it).
func (s *steps) once(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.said[key] {
		return false
	}
	s.said[key] = true
	return true
}

// saw reports whether key was said.
func (s *steps) saw(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.said[key]
}

func (s *steps) watch(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		case <-t.C:
			s.look(ctx)
		}
	}
}

func (s *steps) stop() {
	close(s.quit)
	<-s.done
}

func (s *steps) queuedMsg(p *corev1.Pod) (msg string, ok bool) {
	if !harness.HasQueueGate(p, s.d.env.Names.QueueGate) {
		return "", false
	}
	for _, c := range p.Status.Conditions {
		if string(c.Type) == s.d.env.Names.QueuedCondition {
			return c.Message, true
		}
	}
	return "", true
}

func (s *steps) look(ctx context.Context) {
	d := s.d
	train, err := d.env.Pods(ctx, trainNS)
	if err != nil {
		return
	}
	byName := map[string]*corev1.Pod{}
	for i := range train {
		byName[train[i].Name] = &train[i]
	}
	head := byName[gangName+"-0"]
	headMsg, headQueued := "", false
	if head != nil {
		headMsg, headQueued = s.queuedMsg(head)
	}
	if headQueued && strings.Contains(headMsg, "room held") && s.once("reserved") {
		s.mu.Lock()
		s.reserved = headMsg
		s.mu.Unlock()
		d.logf("gang %s/%s waits for room; Rota holds its leaf for it. Its %s condition:\n           %s", trainNS, gangName, d.env.Names.QueuedCondition, headMsg)
	}
	if l := byName["long-eval"]; l != nil {
		if msg, q := s.queuedMsg(l); q && strings.Contains(msg, "GPU held for gang") && s.once("refused") {
			s.mu.Lock()
			s.refused = msg
			s.mu.Unlock()
			d.logf("training/long-eval (declares 2h) is refused the held GPUs:\n           %s", msg)
		}
		if l.Spec.NodeName != "" && s.once("long-bound") {
			d.logf("training/long-eval started on %s after the gang", l.Spec.NodeName)
		}
	}
	for i := range 4 {
		name := fmt.Sprintf("quick-eval-%d", i)
		p := byName[name]
		if p == nil || p.Spec.NodeName == "" || !s.saw("reserved") || !headQueued || !s.once("backfill "+name) {
			continue
		}
		s.mu.Lock()
		s.backfill = append(s.backfill, name+" on "+p.Spec.NodeName)
		s.mu.Unlock()
		d.logf("training/%s (declares 20s, ends before the gang's expected start) backfilled onto held GPUs of %s", name, p.Spec.NodeName)
	}
	s.lookGang(train)
	s.lookInterns(ctx)
}

func (s *steps) lookGang(train []corev1.Pod) {
	nodes, bound := map[string]int{}, 0
	for _, p := range train {
		if strings.HasPrefix(p.Name, gangName+"-") && p.Spec.NodeName != "" {
			bound++
			nodes[p.Spec.NodeName]++
		}
	}
	if bound < 8 || !s.once("gang started") {
		return
	}
	s.mu.Lock()
	s.started, s.gangNodes = time.Now(), nodes
	waited := s.started.Sub(s.submitted)
	s.mu.Unlock()
	s.d.logf("gang %s/%s started whole: 8 pods on %s, %s after it was submitted", trainNS, gangName, fmtCounts(nodes), waited.Round(time.Second))
}

func (s *steps) lookInterns(ctx context.Context) {
	d := s.d
	pods, err := d.env.Pods(ctx, internNS)
	if err != nil {
		return
	}
	var waiting []string
	for i := range pods {
		p := &pods[i]
		if msg, q := s.queuedMsg(p); q && strings.HasPrefix(msg, "position") {
			waiting = append(waiting, p.Name)
			if s.once("queued " + p.Name) {
				s.mu.Lock()
				s.queued = append(s.queued, p.Name+": "+msg)
				s.mu.Unlock()
			}
		}
		if p.Spec.NodeName != "" && s.saw("queued "+p.Name) && s.once("admitted "+p.Name) {
			waited := time.Since(p.CreationTimestamp.Time).Round(time.Second)
			s.mu.Lock()
			s.admitted = append(s.admitted, fmt.Sprintf("%s after about %s", p.Name, waited))
			s.mu.Unlock()
			d.logf("interns/%s admitted from the queue as the team's earlier notebooks ended (about %s after its creation)", p.Name, waited)
		}
	}
	if len(waiting) > 0 && s.once("interns queue") {
		d.logf("team interns is over its quota: %s queued, not refused. `kubectl rota queue --team interns` says:", strings.Join(waiting, ", "))
		d.rotactl(ctx, "queue", "--team", "interns")
	}
}

// rotactl runs kubectl-rota against the demo's cluster and prints its
// output indented.
func (d *demo) rotactl(ctx context.Context, args ...string) {
	root, err := repoRoot()
	if err != nil {
		d.logf("kubectl rota: %v", err)
		return
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl-rota"), append(args, "--kubeconfig", d.env.Cluster.Kubeconfig, "--color", "never")...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("           " + l)
	}
	if err != nil {
		d.logf("kubectl rota %s: %v", strings.Join(args, " "), err)
	}
}

// summary is the report's account of the queue's steps.
func (s *steps) summary() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	if s.reserved == "" {
		out = append(out, "Gang training/llm-train: no reservation was seen (it never waited for room)")
	} else {
		out = append(out, "Gang training/llm-train waited for its leaf with room held: "+s.reserved)
	}
	if s.refused != "" {
		out = append(out, "Refused the held GPUs: training/long-eval: "+s.refused)
	}
	bf := slices.Clone(s.backfill)
	sort.Strings(bf)
	out = append(out, fmt.Sprintf("Backfilled onto held GPUs (declared runtimes ending before the expected start): %d pods: %s", len(bf), strings.Join(bf, ", ")))
	if s.started.IsZero() {
		out = append(out, "Gang training/llm-train did not start in the demo's time")
	} else {
		out = append(out, fmt.Sprintf("Gang training/llm-train started whole %s after submission, on %s", s.started.Sub(s.submitted).Round(time.Second), fmtCounts(s.gangNodes)))
	}
	for _, q := range s.queued {
		out = append(out, "Queued over quota: interns/"+q)
	}
	if len(s.admitted) > 0 {
		out = append(out, "Admitted from the queue: interns/"+strings.Join(s.admitted, ", interns/"))
	}
	return out
}

// settled reports whether the training and interns work has all run: the
// gang started and every pod of the two teams finished or running.
func (s *steps) settled(ctx context.Context) bool {
	s.mu.Lock()
	started := !s.started.IsZero()
	s.mu.Unlock()
	if !started {
		return false
	}
	for _, ns := range []string{trainNS, internNS} {
		pods, err := s.d.env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "" {
				return false
			}
		}
	}
	return true
}
