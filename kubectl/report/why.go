package report

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// Why is the `why` report: everything that explains where a pod (or a gang)
// stands.
type Why struct {
	// Pod is the pod the report is about (for a gang: its first unplaced
	// member, else its first member); for a Job, "namespace/Job/name".
	Pod string `json:"pod"`
	// Kind is "Job" or "JobSet" when the report is about one; empty for a pod.
	Kind  string `json:"kind,omitempty"`
	Phase string `json:"phase"`
	// Summary is the answer in one sentence.
	Summary     string    `json:"summary"`
	SubmittedAt time.Time `json:"submittedAt"`
	Age         string    `json:"age"`
	// Request is what one pod asks for ("2 whole GPUs", "60 GiB on one GPU").
	Request string `json:"request"`
	// RequestError says why the request cannot be read.
	RequestError string    `json:"requestError,omitempty"`
	Team         string    `json:"team"`
	TeamSource   string    `json:"teamSource"`
	Quota        TeamQuota `json:"quota"`
	// Placed is where the pod runs, when it is bound.
	Placed *Placed       `json:"placed,omitempty"`
	Gang   *GangProgress `json:"gang,omitempty"`
	// Decisions are the newest refusals from events, newest first.
	Decisions []Decision `json:"decisions,omitempty"`
	// Extender is the extender's decision log for the pod (--extender-url);
	// the caller fetches and sets it.
	Extender *ExtenderLog `json:"extender,omitempty"`
	// Fit is the placement engine's view now; nil for bound pods.
	Fit *FitAnalysis `json:"fit,omitempty"`
	// Queued is set while the pod waits in Rota's queue (its gate is on):
	// the queue controller's Queued condition, position and what it waits
	// for. Live positions: kubectl rota queue --extender-url.
	Queued *QueuedPod `json:"queued,omitempty"`
	// Admitted is the pod's admission record, once the queue admitted it:
	// its team, when, how long it waited, where its GPUs were held and the
	// nodes it was narrowed to. (For a pod a controller owns, the Queued
	// and Admitted events are its controller's.)
	Admitted *contract.Admission `json:"admitted,omitempty"`
	// AdmissionError says why the admission record does not parse.
	AdmissionError string `json:"admissionError,omitempty"`
	// Notes are further things worth knowing.
	Notes []string `json:"notes,omitempty"`
}

// Placed is a bound pod's node and GPUs.
type Placed struct {
	Node  string `json:"node"`
	GPUs  []int  `json:"gpus,omitempty"`
	Whole bool   `json:"whole"`
	// MemoryMiB is the memory held on each GPU.
	MemoryMiB contract.MiB `json:"memoryMiB,omitempty"`
}

// GangProgress is how far a gang got.
type GangProgress struct {
	Name string `json:"name"`
	// Size is the declared member count (0: unknown, pod-group label
	// without a size annotation).
	Size    int `json:"size"`
	Created int `json:"created"`
	Placed  int `json:"placed"`
	Pending int `json:"pending"`
	// Missing members are declared but not created.
	Missing int          `json:"missing"`
	Nodes   []string     `json:"nodes,omitempty"`
	Members []GangMember `json:"members,omitempty"`
}

// GangMember is one member of a gang.
type GangMember struct {
	Pod   string `json:"pod"`
	Phase string `json:"phase"`
	Node  string `json:"node,omitempty"`
	GPUs  string `json:"gpus,omitempty"`
}

// ExtenderLog is rota-extender's GET /debug/pods/:namespace/:name answer,
// or why it could not be read.
type ExtenderLog struct {
	URL       string             `json:"url"`
	Error     string             `json:"error,omitempty"`
	Decisions []ExtenderDecision `json:"decisions,omitempty"`
}

// ExtenderDecision mirrors one entry of the extender's decision log
// (extender/scheduling.Decision's JSON).
type ExtenderDecision struct {
	Time     time.Time `json:"time"`
	Verb     string    `json:"verb"`
	Outcome  string    `json:"outcome"`
	Nodes    int       `json:"nodes,omitempty"`
	Fits     int       `json:"fits,omitempty"`
	Node     string    `json:"node,omitempty"`
	Gang     string    `json:"gang,omitempty"`
	Message  string    `json:"message,omitempty"`
	Duration string    `json:"duration,omitempty"`
	Reasons  []struct {
		Code        string `json:"code"`
		Resolvable  bool   `json:"resolvable"`
		Nodes       int    `json:"nodes"`
		ExampleNode string `json:"exampleNode,omitempty"`
		Example     string `json:"example"`
	} `json:"reasons,omitempty"`
}

// ErrNotFound is returned for a pod or gang the input does not hold.
type ErrNotFound struct{ What string }

func (e *ErrNotFound) Error() string { return e.What + " not found" }

// WhyPod explains pod namespace/name.
func (c *Cluster) WhyPod(namespace, name string) (Why, error) {
	p := c.pods[namespace+"/"+name]
	if p == nil {
		return Why{}, &ErrNotFound{What: fmt.Sprintf("pod %s/%s", namespace, name)}
	}
	return c.why(p, false), nil
}

// WhyGang explains gang name in namespace (members are found by the gang
// label or scheduler-plugins' pod-group label).
func (c *Cluster) WhyGang(namespace, name string) (Why, error) {
	members := c.gangMembers(namespace + "/" + name)
	if len(members) == 0 {
		return Why{}, &ErrNotFound{What: fmt.Sprintf("gang %s/%s (no pod with label %s=%s or %s=%s)",
			namespace, name, c.o.Names.GangLabel, name, c.o.Names.PodGroupLabel, name)}
	}
	rep := members[0]
	for _, m := range members {
		if m.Spec.NodeName == "" && !podreq.Terminal(m) {
			rep = m
			break
		}
	}
	return c.why(rep, true), nil
}

// gangMembers returns the gang's pods, by name: those with its key
// (podreq.GangKey, as the extender's gang index), a size annotation that
// does not parse included.
func (c *Cluster) gangMembers(key string) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range c.in.Pods {
		p := &c.in.Pods[i]
		if podreq.GangKey(p, c.o.Names) == key {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return naturalCompare(a.Name, b.Name) })
	return out
}

func (c *Cluster) why(p *corev1.Pod, listMembers bool) Why {
	w := Why{Pod: podKey(p), Phase: podPhase(p), SubmittedAt: p.CreationTimestamp.UTC(), Age: c.age(p.CreationTimestamp.Time),
		Team: c.teamOf(p), TeamSource: c.teamSource(p)}
	w.Quota = c.teamQuota(w.Team)
	if adm, err := podreq.AdmissionOf(p, c.o.Names); err != nil {
		w.AdmissionError = err.Error()
	} else {
		w.Admitted = adm
	}
	if podreq.KueueQueues(c.nsLabels[p.Namespace], c.o.Names) && w.Admitted == nil {
		// Kueue queues the namespace: its ClusterQueue is the quota.
		w.Quota = TeamQuota{Team: w.Team, State: StateNotCharged, Note: fmt.Sprintf(
			"namespace %s is labelled %s=%s: Kueue's ClusterQueue is its quota, not Rota's", p.Namespace, c.o.Names.QueueingLabel, contract.QueueingKueue)}
	}
	wants := podreq.Wants(p, c.o.Names)
	r, reqErr := podreq.FromPod(p, podreq.Options{Names: c.o.Names, MemoryUnitMiB: c.o.MemoryUnitMiB})
	switch {
	case !wants:
		w.Request = "no Rota resource"
	case reqErr != nil:
		w.Request, w.RequestError = "invalid", reqErr.Error()
	default:
		w.Request = r.Describe(c.o.MemoryUnitMiB)
		// The team's node pool bounds where it may go, as in the extender.
		r.Pool = c.quota.PoolOf(w.Team)
	}
	if a, ok := c.allocs[string(p.UID)]; ok {
		pl := &Placed{Node: a.Node, Whole: a.Whole}
		for _, g := range a.GPUs {
			pl.GPUs = append(pl.GPUs, g.Index)
			pl.MemoryMiB = g.MemoryMiB
		}
		w.Placed = pl
	}
	pods := []*corev1.Pod{p}
	var unplaced []*corev1.Pod
	if ref, _ := podreq.GangOf(p, c.o.Names); ref != nil {
		members := c.gangMembers(ref.Key)
		gp := &GangProgress{Name: ref.Key, Size: ref.Size, Created: len(members)}
		for _, m := range members {
			gm := GangMember{Pod: m.Name, Phase: podPhase(m), Node: m.Spec.NodeName}
			if a, ok := c.allocs[string(m.UID)]; ok {
				idx := make([]int, len(a.GPUs))
				for i, g := range a.GPUs {
					idx[i] = g.Index
				}
				gm.GPUs = joinInts(idx)
			}
			switch {
			case podreq.Terminal(m):
			case m.Spec.NodeName != "":
				gp.Placed++
				if !slices.Contains(gp.Nodes, m.Spec.NodeName) {
					gp.Nodes = append(gp.Nodes, m.Spec.NodeName)
				}
			default:
				gp.Pending++
				unplaced = append(unplaced, m)
			}
			if listMembers {
				gp.Members = append(gp.Members, gm)
			}
		}
		slices.Sort(gp.Nodes)
		if gp.Size == 0 {
			gp.Size = gp.Created
		}
		gp.Missing = max(gp.Size-gp.Created, 0)
		w.Gang = gp
		pods = members
	}
	w.Decisions = c.decisions(pods)

	// Where it stands, and what would make it fit, on the nodes the
	// scheduler could give this pod.
	defer c.forPod(p)()
	switch {
	case podreq.Terminal(p):
		w.Summary = "finished (" + w.Phase + "); it holds no GPUs"
	case !wants:
		w.Summary = "asks for no GPU; Rota never holds it back (with every pod sent to the extender it only ranks the nodes by the GPUs its CPU would strand)"
	case reqErr != nil:
		w.Summary = "its GPU request is invalid, so the extender refuses every node: " + reqErr.Error()
	case podreq.Queued(p, c.o.Names):
		qp := QueuedPod{Pod: w.Pod, Team: w.Team}
		if cond := QueuedCondition(p, c.o.Names.QueuedCondition); cond != nil {
			qp.Reason, qp.Message = cond.Reason, cond.Message
		}
		w.Queued = &qp
		w.Summary = "queued (team " + w.Team + "): " + qp.Message
		if qp.Message == "" {
			w.Summary = "queued (team " + w.Team + "); the queue controller has not written its position yet"
		}
	case p.Spec.NodeName == "" && len(p.Spec.SchedulingGates) > 0:
		w.Summary = gatedElsewhere(p)
	case w.Gang != nil && (p.Spec.NodeName == "" || len(unplaced) > 0):
		c.whyGang(&w, r, unplaced)
	case p.Spec.NodeName != "":
		w.Summary = "bound to " + p.Spec.NodeName
		if w.Placed != nil {
			w.Summary = "bound to " + describePlacedOn(w.Placed)
		} else {
			w.Summary += ", but it has no GPU assignment Rota accounts (see notes)"
			w.Notes = append(w.Notes, c.problems[p.Spec.NodeName]...)
		}
	default:
		fa := c.fitPod(r)
		w.Fit = &fa
		if fa.FitsNow {
			w.Summary = "waiting for the scheduler: it fits now on " + fa.Where
			w.Notes = append(w.Notes, c.staleNote(w.Decisions))
		} else {
			w.Summary = "waiting for GPUs: " + firstOr(fa.Hints, "no node fits")
		}
	}
	if p.Spec.NodeName == "" && !podreq.Terminal(p) && wants && len(w.Decisions) == 0 && len(p.Spec.SchedulingGates) == 0 {
		w.Notes = append(w.Notes, "no FailedScheduling event: the scheduler has not tried this pod yet, or its events expired (the API server keeps them for 1h by default)")
	}
	if p.Spec.SchedulerName != "" && p.Spec.SchedulerName != corev1.DefaultSchedulerName && p.Spec.NodeName == "" {
		w.Notes = append(w.Notes, fmt.Sprintf("the pod asks for scheduler %q; Rota's extender serves the scheduler it is configured in", p.Spec.SchedulerName))
	}
	if s := w.Quota.State; s == StateAtQuota || s == StateOverQuota {
		w.Notes = append(w.Notes, fmt.Sprintf("team %s is %s: %s (pods already admitted, like this one, keep their place)", w.Team, s, w.Quota.Note))
	}
	w.Notes = slices.DeleteFunc(w.Notes, func(s string) bool { return s == "" })
	return w
}

// whyGang fills the summary and fit analysis of a gang that is not fully placed.
func (c *Cluster) whyGang(w *Why, member placement.Request, unplaced []*corev1.Pod) {
	gp := w.Gang
	uids := make([]string, 0, len(unplaced)+gp.Missing)
	pods := make([]string, 0, cap(uids))
	for _, m := range unplaced {
		uids, pods = append(uids, string(m.UID)), append(pods, podKey(m))
	}
	// Members not created yet need room too.
	for i := range gp.Missing {
		uids, pods = append(uids, fmt.Sprintf("missing-member-%d", i)), append(pods, "")
	}
	fa := c.fitGang(gp, member, uids, pods)
	w.Fit = &fa
	progress := fmt.Sprintf("gang %s has %d of %d members placed", gp.Name, gp.Placed, gp.Size)
	state := "waiting for GPUs: "
	if w.Placed != nil {
		state = "bound to " + describePlacedOn(w.Placed) + ", but "
	}
	switch {
	case fa.FitsNow:
		if w.Placed == nil {
			state = "waiting for the scheduler: "
		}
		w.Summary = fmt.Sprintf("%s%s; the other %d fit now (%s)", state, progress, len(uids), fa.Where)
		w.Notes = append(w.Notes, c.staleNote(w.Decisions))
	case gp.Missing > 0 && fa.Where != "":
		if w.Placed == nil {
			state = "waiting for members: "
		}
		w.Summary = fmt.Sprintf("%s%s; %d are not created yet", state, progress, gp.Missing)
	default:
		w.Summary = fmt.Sprintf("%s%s; the other %d do not fit together", state, progress, len(uids))
	}
}

// staleNote explains a refusal event that no longer matches the cluster.
func (c *Cluster) staleNote(ds []Decision) string {
	if len(ds) == 0 {
		return ""
	}
	return fmt.Sprintf("the last refusal is %s old and the cluster has changed since; kube-scheduler retries unschedulable pods within 5 minutes, sooner when a pod or node changes",
		ds[0].Age)
}

func describePlacedOn(p *Placed) string { return p.Node + " with " + describePlaced(p) }

func describePlaced(p *Placed) string {
	if p.Whole {
		if len(p.GPUs) == 1 {
			return "GPU " + joinInts(p.GPUs) + " (whole)"
		}
		return "GPUs " + joinInts(p.GPUs) + " (whole)"
	}
	return fmt.Sprintf("%s on GPU %s", p.MemoryMiB, joinInts(p.GPUs))
}

func firstOr(xs []string, def string) string {
	if len(xs) == 0 {
		return def
	}
	return xs[0]
}

// naturalCompare orders "w-2" before "w-10".
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da != "" && db != "" {
			if len(da) != len(db) {
				return len(da) - len(db)
			}
			if c := strings.Compare(da, db); c != 0 {
				return c
			}
			a, b = a[len(da):], b[len(db):]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digitPrefix(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// gatedElsewhere explains a pod held by scheduling gates that are not
// Rota's: kube-scheduler does not look at it until their owners remove
// them, so Rota has not either.
func gatedElsewhere(p *corev1.Pod) string {
	gates := make([]string, len(p.Spec.SchedulingGates))
	for i, g := range p.Spec.SchedulingGates {
		gates[i] = g.Name
	}
	switch {
	case slices.Contains(gates, podreq.KueueAdmissionGate):
		return fmt.Sprintf("held by Kueue (scheduling gate %s): Kueue admits it when its LocalQueue's ClusterQueue has quota for it "+
			"(kubectl get workloads -n %s shows its Workload and why it waits); once Kueue lets it go, Rota places its GPUs", podreq.KueueAdmissionGate, p.Namespace)
	case slices.Contains(gates, podreq.KueueTopologyGate):
		return fmt.Sprintf("admitted by Kueue, which is choosing its nodes (topology-aware scheduling, scheduling gate %s); "+
			"Rota places its GPUs on the nodes Kueue picks", podreq.KueueTopologyGate)
	}
	return fmt.Sprintf("held by scheduling gate(s) %s, which are not Rota's: kube-scheduler does not consider the pod until their owner removes them",
		strings.Join(gates, ", "))
}
