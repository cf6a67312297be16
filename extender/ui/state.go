package ui

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/extender/nodepool"
	"github.com/rota-sched/rota/extender/scheduling"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// MiB is GPU memory in mebibytes.
type MiB = contract.MiB

// State is the GET /ui/api/state answer.
type State struct {
	Time   time.Time `json:"time"`
	Totals Totals    `json:"totals"`
	Nodes  []Node    `json:"nodes"`
	// Queue lists the waiting GPU pods, longest waiting first.
	Queue []Waiting `json:"queue"`
	// Namespaces is GPU use per namespace, most GPUs first.
	Namespaces []NamespaceUse `json:"namespaces"`
	// UsageNote says what Namespaces is (and is not).
	UsageNote string `json:"usageNote"`
	// Fragmentation holds the kept samples, oldest first; the last one is
	// taken now.
	Fragmentation []Sample `json:"fragmentation"`
	// SampleEvery is the interval between fragmentation samples.
	SampleEvery string `json:"sampleEvery"`
	// TeamQueues is each team's queue and admitted use, from the queue
	// controller (absent when it is off).
	TeamQueues *TeamQueues `json:"teamQueues,omitempty"`
	// Pools compares the node pools side by side (absent without pools).
	Pools []Pool `json:"pools,omitempty"`
}

// Pool is one node pool's row ("" the nodes of none): who owns it, the
// policy that places there, and how well it is used.
type Pool struct {
	Pool   string `json:"pool"`
	Owner  string `json:"owner,omitempty"`
	Policy string `json:"policy"`
	Nodes  int    `json:"nodes"`
	GPUs   int    `json:"gpus"`
	Busy   int    `json:"busy"`
	// Allocation is the share of the pool's GPU memory held, 0..1.
	Allocation     float64 `json:"allocation"`
	FragmentedGPUs float64 `json:"fragmentedGPUs"`
	// Queued and LongestWaitSeconds are the queued pods whose team places
	// on the pool, and the longest wait among them (the queue controller's
	// view; 0 without it).
	Queued             int     `json:"queued"`
	LongestWaitSeconds float64 `json:"longestWaitSeconds"`
}

// pools builds the pools' rows from snap: the configured pools (an empty
// one with zeros), any pool a node is labelled with, and the nodes of
// none (placement.PoolsUse); nil when nothing is pooled.
func pools(snap *ledger.Snapshot, w placement.Workload, np *nodepool.Policies, view *contract.QueueView) []Pool {
	var conf []nodepool.Pool
	def := placement.DefaultPolicyName
	if np != nil {
		conf, def = np.Pools(), np.Default().Name()
	}
	names := []string{""} // the nodes of none, a row even when empty
	for _, c := range conf {
		names = append(names, c.Name)
	}
	use := placement.PoolsUse(snap, w, names)
	out := make([]Pool, 0, len(use))
	at := map[string]int{}
	for _, u := range use {
		p := Pool{Pool: u.Pool, Policy: def, Nodes: u.Nodes, GPUs: u.GPUs, Busy: u.Busy,
			Allocation: round2(u.Allocation()), FragmentedGPUs: round2(u.FragmentedGPUs)}
		if i := slices.IndexFunc(conf, func(c nodepool.Pool) bool { return c.Name == u.Pool }); i >= 0 {
			p.Owner, p.Policy = conf[i].Owner, conf[i].Policy
		} else if u.Pool != "" { // labelled, not configured: no one's
			p.Policy = "none: not configured, takes no GPU pods"
		}
		at[u.Pool] = len(out)
		out = append(out, p)
	}
	if view != nil && np != nil && len(out) > 0 {
		for _, q := range view.Pods {
			if i, ok := at[np.PoolOf(q.Team)]; ok {
				out[i].Queued++
				out[i].LongestWaitSeconds = max(out[i].LongestWaitSeconds, q.Waiting)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// TeamQueues is the queue controller's view (contract.QueueView) by team.
type TeamQueues struct {
	// Leader is false on a standby replica, whose queue controller does not
	// run: its teams are then empty.
	Leader bool        `json:"leader"`
	Teams  []TeamQueue `json:"teams"`
	// Groups is the quota tree, parents first (empty without groups).
	Groups []contract.QueueGroup `json:"groups,omitempty"`
}

// TeamQueue is one team's admitted use and queued pods, in queue order.
type TeamQueue struct {
	contract.QueueTeam
	Pods []contract.QueuePosition `json:"pods"`
}

// teamQueues groups the view's positions under their teams (a team with
// queued pods but no admitted use included), teams by name, pods by
// position.
func teamQueues(v contract.QueueView) *TeamQueues {
	by := map[string]*TeamQueue{}
	for _, t := range v.Teams {
		by[t.Team] = &TeamQueue{QueueTeam: t, Pods: []contract.QueuePosition{}}
	}
	for _, p := range v.Pods {
		tq := by[p.Team]
		if tq == nil {
			tq = &TeamQueue{QueueTeam: contract.QueueTeam{Team: p.Team}, Pods: []contract.QueuePosition{}}
			by[p.Team] = tq
		}
		tq.Pods = append(tq.Pods, p)
	}
	out := &TeamQueues{Leader: v.Leader, Teams: make([]TeamQueue, 0, len(by)), Groups: v.Groups}
	for _, tq := range by {
		slices.SortStableFunc(tq.Pods, func(a, b contract.QueuePosition) int {
			if c := cmp.Compare(a.Position, b.Position); c != 0 {
				return c
			}
			return cmp.Compare(a.Pod, b.Pod)
		})
		out.Teams = append(out.Teams, *tq)
	}
	slices.SortFunc(out.Teams, func(a, b TeamQueue) int { return cmp.Compare(a.Team, b.Team) })
	return out
}

// Totals sums the GPU map.
type Totals struct {
	Nodes     int `json:"nodes"`
	GPUs      int `json:"gpus"`
	Busy      int `json:"busy"`
	Unhealthy int `json:"unhealthy"`
	MemoryMiB MiB `json:"memoryMiB"`
	UsedMiB   MiB `json:"usedMiB"`
	Waiting   int `json:"waiting"`
}

// Node is one row of the GPU map.
type Node struct {
	Name  string   `json:"name"`
	Tiers []string `json:"tiers,omitempty"`
	GPUs  []GPU    `json:"gpus"`
}

// Use values of GPU.Use, which the page colours.
const (
	UseIdle      = "idle"
	UseShared    = "shared"
	UseWhole     = "whole"
	UseReserved  = "reserved" // only reservations, nothing committed yet
	UseUnhealthy = "unhealthy"
)

// GPU is one cell of the GPU map.
type GPU struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid"`
	Model     string `json:"model"`
	MemoryMiB MiB    `json:"memoryMiB"`
	UsedMiB   MiB    `json:"usedMiB"`
	Healthy   bool   `json:"healthy"`
	// Reason says why the GPU is unhealthy.
	Reason string   `json:"reason,omitempty"`
	Use    string   `json:"use"`
	Pods   []GPUPod `json:"pods,omitempty"`
}

// GPUPod is a pod's hold on one GPU.
type GPUPod struct {
	Pod       string `json:"pod"`
	MemoryMiB MiB    `json:"memoryMiB"`
	Whole     bool   `json:"whole"`
	State     string `json:"state"`
	Gang      string `json:"gang,omitempty"`
}

// Waiting is a GPU pod that waits for a node.
type Waiting struct {
	Pod     string    `json:"pod"`
	Request string    `json:"request"`
	Gang    string    `json:"gang,omitempty"`
	Since   time.Time `json:"since"`
	// WaitingSeconds is how long the pod has waited at State.Time.
	WaitingSeconds float64 `json:"waitingSeconds"`
	// Reason is the newest explained decision of the extender's log
	// (noDecision when the log holds none for the pod).
	Reason   string    `json:"reason"`
	Verb     string    `json:"verb,omitempty"`
	Outcome  string    `json:"outcome,omitempty"`
	ReasonAt time.Time `json:"reasonAt,omitzero"`
}

// NamespaceUse is the GPU use of one namespace.
type NamespaceUse struct {
	Namespace string `json:"namespace"`
	// GPUs counts GPU capacity held: whole GPUs count 1, shares their part
	// of the GPU's memory.
	GPUs      float64 `json:"gpus"`
	WholeGPUs int     `json:"wholeGPUs"`
	MemoryMiB MiB     `json:"memoryMiB"`
	Pods      int     `json:"pods"`
	Waiting   int     `json:"waiting"`
}

// usageNote is State.UsageNote.
const usageNote = "GPU use per namespace, held and committed. Each team's admitted use against its quota is in " +
	"the team queues above (on the leader, with the queue on) and in kubectl rota top teams."

// noDecision is Waiting.Reason for a pod the decision log holds nothing
// about: kube-scheduler asks the extender only about the nodes its own
// filters (CPU, selectors, whole-GPU counts) let through.
const noDecision = "no extender decision yet: kube-scheduler may have ruled out every node itself (see the pod's events, or kubectl rota why)"

// nodes builds the GPU map and the per-namespace use from one snapshot.
func nodes(snap *ledger.Snapshot) ([]Node, Totals, map[string]*NamespaceUse) {
	var tot Totals
	use := map[string]*NamespaceUse{}
	out := make([]Node, 0, snap.Len())
	for _, name := range snap.Names() {
		ni := snap.Node(name)
		n := Node{Name: name, Tiers: ni.Node.Tiers, GPUs: make([]GPU, len(ni.Node.GPUs))}
		slot := make(map[int]int, len(ni.Node.GPUs))
		for s, g := range ni.Node.GPUs {
			slot[g.Index] = s
			n.GPUs[s] = GPU{Index: g.Index, UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
				UsedMiB: ni.Use[s].UsedMiB, Healthy: g.Healthy, Reason: g.Reason}
		}
		// Allocations in a stable order: by pod name.
		allocs := make([]*ledger.Allocation, 0, len(ni.Allocs))
		for _, a := range ni.Allocs {
			if len(a.GPUs) > 0 { // CPU-only pods hold no GPU to show
				allocs = append(allocs, a)
			}
		}
		slices.SortFunc(allocs, func(a, b *ledger.Allocation) int { return cmp.Compare(a.Pod, b.Pod) })
		for _, a := range allocs {
			ns, _, _ := strings.Cut(a.Pod, "/")
			nu := use[ns]
			if nu == nil {
				nu = &NamespaceUse{Namespace: ns}
				use[ns] = nu
			}
			nu.Pods++
			for _, sh := range a.GPUs {
				s, ok := slot[sh.Index]
				if !ok {
					continue
				}
				g := &n.GPUs[s]
				mem := sh.MemoryMiB
				if a.Whole {
					mem = g.MemoryMiB
					nu.WholeGPUs++
					nu.GPUs++
				} else if g.MemoryMiB > 0 {
					nu.GPUs += float64(mem) / float64(g.MemoryMiB)
				}
				nu.MemoryMiB += mem
				g.Pods = append(g.Pods, GPUPod{Pod: a.Pod, MemoryMiB: mem, Whole: a.Whole, State: a.State.String(), Gang: a.Gang})
			}
		}
		for s := range n.GPUs {
			g := &n.GPUs[s]
			g.Use = gpuUse(g, ni.Use[s])
			tot.GPUs++
			tot.MemoryMiB += g.MemoryMiB
			tot.UsedMiB += g.UsedMiB
			if len(g.Pods) > 0 {
				tot.Busy++
			}
			if !g.Healthy {
				tot.Unhealthy++
			}
		}
		out = append(out, n)
	}
	tot.Nodes = len(out)
	return out, tot, use
}

func gpuUse(g *GPU, u ledger.GPUUse) string {
	switch {
	case !g.Healthy:
		return UseUnhealthy
	case len(g.Pods) == 0:
		return UseIdle
	case !slices.ContainsFunc(g.Pods, func(p GPUPod) bool { return p.State != ledger.Reserved.String() }):
		return UseReserved
	case u.Exclusive:
		return UseWhole
	}
	return UseShared
}

// sample measures fragmentation and free capacity in one snapshot.
func sample(snap *ledger.Snapshot, w placement.Workload, now time.Time) Sample {
	s := Sample{Time: now}
	for _, name := range snap.Names() {
		ni := snap.Node(name)
		s.FragmentedGPUs += w.NodeFragmentation(ni)
		for i, g := range ni.Node.GPUs {
			if g.MemoryMiB > 0 {
				s.FreeGPUs += float64(ni.FreeMiB(i)) / float64(g.MemoryMiB)
			}
		}
	}
	s.FragmentedGPUs = round2(s.FragmentedGPUs)
	s.FreeGPUs = round2(s.FreeGPUs)
	return s
}

func round2(f float64) float64 { return float64(int64(f*100+0.5)) / 100 }

// waiting builds the queue: pods asking for Rota resources without a node
// (as state.Cache.Pending counts them), longest waiting first.
func waiting(pods []*corev1.Pod, names contract.Names, parser *podreq.Parser, decisions func(namespace, name string) []scheduling.Decision,
	now time.Time) []Waiting {
	out := []Waiting{}
	for _, p := range pods {
		if p.Spec.NodeName != "" || p.DeletionTimestamp != nil || podreq.Terminal(p) || !podreq.Wants(p, names) {
			continue
		}
		w := Waiting{Pod: p.Namespace + "/" + p.Name, Since: p.CreationTimestamp.Time, Reason: noDecision}
		if !w.Since.IsZero() {
			w.WaitingSeconds = now.Sub(w.Since).Round(time.Second).Seconds()
		}
		if r := parser.Of(p); r.Err != nil {
			w.Request = "invalid request: " + r.Err.Error()
		} else {
			w.Request = r.Request.Describe(parser.MemoryUnit())
		}
		if g := pGang(p, names); g != "" {
			w.Gang = g
		}
		if decisions != nil {
			reason(&w, decisions(p.Namespace, p.Name))
		}
		if w.Reason == noDecision {
			schedulerReason(&w, p)
		}
		out = append(out, w)
	}
	slices.SortStableFunc(out, func(a, b Waiting) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.Pod, b.Pod)
	})
	return out
}

func pGang(p *corev1.Pod, names contract.Names) string {
	if n := p.Labels[names.GangLabel]; n != "" {
		return n
	}
	return p.Labels[names.PodGroupLabel]
}

// schedulerReason fills the reason of a pod the extender was never asked
// about from kube-scheduler's PodScheduled=False condition, when it has one.
func schedulerReason(w *Waiting, p *corev1.Pod) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			w.Reason, w.Verb, w.Outcome = "kube-scheduler: "+c.Message, "kube-scheduler", c.Reason
			w.ReasonAt = c.LastTransitionTime.Time
		}
	}
}

// reason fills the waiting pod's reason from its decisions (oldest first):
// the newest one that explains itself, else the newest one's outcome.
func reason(w *Waiting, ds []scheduling.Decision) {
	if len(ds) == 0 {
		return
	}
	d := ds[len(ds)-1]
	for i := len(ds) - 1; i >= 0; i-- {
		if ds[i].Message != "" {
			d = ds[i]
			break
		}
	}
	w.Verb, w.Outcome, w.ReasonAt = d.Verb, d.Outcome, d.Time
	switch {
	case d.Message != "":
		w.Reason = d.Message
	case len(d.Reasons) > 0:
		w.Reason = fmt.Sprintf("%d nodes: %s", d.Reasons[0].Nodes, d.Reasons[0].Example)
	default:
		w.Reason = d.Verb + ": " + d.Outcome
	}
}
