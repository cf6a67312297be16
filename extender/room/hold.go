package room

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/reserve"
)

// Options configure New. Ledger, Node and Request are required.
type Options struct {
	Ledger *ledger.Ledger
	// Node looks a node up (the extender's informer cache).
	Node func(name string) (*corev1.Node, bool)
	// Request is what a pod asks for (the extender's one parse, dated and
	// narrowed to its models).
	Request func(*corev1.Pod) (placement.Request, error)
	// Gang is a pod's gang (nil: none); the extender's one parse.
	Gang func(*corev1.Pod) *podreq.GangRef
	// Policy scores nodes for a single pod (nil: the default policy);
	// PolicyFor, when set, is the policy of a node pool's nodes instead
	// (nodepool.Policies.For; "" the nodes of none).
	Policy    placement.Policy
	PolicyFor func(pool string) placement.Policy
	// Tiers is the number of topology tier labels (gang planning levels).
	Tiers int
	// Candidates is how many nodes HoldRoom names for a single pod
	// (Hold.Candidates): the held node and the next best that fit it now.
	// 0 or 1 names the held node only.
	Candidates int
}

// Planner plans and holds room in the ledger: the queue controller's
// admission holds (HoldRoom), the reservations' claims (SetClaims) and the
// gang planner's slots (PlanGang). Planning reads a ledger snapshot and
// reserves from it; Lock serializes these, so two plans never count the
// same free GPUs. It is safe for concurrent use.
type Planner struct {
	o  Options
	mu sync.Mutex
	// memo keeps recent holds' fits; guarded by mu.
	memo holdMemo
}

// New builds a Planner.
func New(o Options) (*Planner, error) {
	if o.Ledger == nil || o.Node == nil || o.Request == nil {
		return nil, errors.New("room: ledger, node lookup and request are required")
	}
	if o.Gang == nil {
		o.Gang = func(*corev1.Pod) *podreq.GangRef { return nil }
	}
	if o.Policy == nil {
		p, err := placement.NewPolicy(placement.DefaultPolicyName, nil)
		if err != nil {
			return nil, err
		}
		o.Policy = p
	}
	if o.PolicyFor == nil {
		def := o.Policy
		o.PolicyFor = func(string) placement.Policy { return def }
	}
	return &Planner{o: o}, nil
}

// Lock takes the planning lock: hold it from reading the ledger to
// reserving what was planned from that read (the gang planner counts a
// gang's members and plans it under it).
func (p *Planner) Lock() { p.mu.Lock() }

// Unlock releases the planning lock.
func (p *Planner) Unlock() { p.mu.Unlock() }

// Hold is the room the queue controller holds in the ledger for pods it is
// about to admit, until they bind or the hold lapses.
type Hold struct {
	// Allocations has one reservation per pod, in the order of the pods.
	Allocations []ledger.Allocation
	// Level and Where are a gang's planned domain (placement.GangPlan);
	// Level is placement.TierNode for a single pod.
	Level int
	Where string
	// Candidates, for a single pod, are the held node and then the other
	// nodes that fit it best as the hold was made (at most
	// Options.Candidates in all): where the queue controller may narrow
	// it to, so that kube-scheduler filters a handful of nodes and still
	// has somewhere to go when it rules the held node out.
	Candidates []string
}

// Scope narrows what queued pods may use: the GPU model of the quota
// account they are charged to (empty: any) and the node pool their team
// places on (quota.Config.PoolOf; empty: the nodes of none). Their own
// requests cannot say either: the pods are not admitted yet.
type Scope struct {
	Model, Pool string
}

func (s Scope) narrow(r *placement.Request) {
	if s.Model != "" {
		r.Models = []string{s.Model}
	}
	r.Pool = s.Pool
}

// HoldRoom reserves room for pods that the queue admits together: a single
// pod on the node the policy ranks best, a gang's members in the smallest
// topology tier that holds them all (placement.PlanGang), each until
// expires, within scope. It holds everything or nothing; when it
// holds nothing the reason says why, in words.
//
// A held pod that kube-scheduler then filters passes only its held node
// (the extender's filter, HeldNode) and binds onto the held GPUs, so two admissions never count
// the same free GPUs and an admitted pod does not lose its room to one
// admitted later.
func (e *Planner) HoldRoom(pods []*corev1.Pod, scope Scope, expires time.Time) (Hold, string) {
	if len(pods) == 0 {
		return Hold{}, "nothing to hold"
	}
	req, err := e.o.Request(pods[0])
	if err != nil {
		return Hold{}, "invalid GPU request: " + err.Error()
	}
	scope.narrow(&req)
	e.mu.Lock()
	defer e.mu.Unlock()
	snap := e.o.Ledger.Snapshot()
	if snap.Len() == 0 {
		return Hold{}, "no GPU node is known yet"
	}
	if len(pods) == 1 {
		if h, reason, ok := e.holdBest(req, pods[0], snap, expires); ok {
			return h, reason
		}
	}
	at := e.eligibleAt(pods[0], snap)
	if len(at) == 0 {
		return Hold{}, fmt.Sprintf("none of the %d GPU nodes matches the pod's %s and tolerations", snap.Len(), AffinityTerms(pods[0]))
	}
	if len(pods) == 1 {
		return e.holdOne(req, snap, at, expires)
	}
	key := req.Job
	g := placement.Gang{Name: key, Member: req}
	for _, p := range pods {
		g.UIDs = append(g.UIDs, string(p.UID))
		g.Pods = append(g.Pods, p.Namespace+"/"+p.Name)
	}
	plan, reason, err := e.PlanGang(g, snap, namesAt(snap, at), nil, len(pods), expires)
	if reason != nil {
		return Hold{}, reason.Message()
	}
	if err != nil {
		return Hold{}, fmt.Sprintf("gang %s: holding its room failed: %v", key, err)
	}
	return Hold{Allocations: plan.Allocations, Level: plan.Level, Where: plan.Where}, ""
}

// holdBest is holdOne's answer found without reading every node's
// constraints: the node that fits with the highest score (the first by name
// among equals) over all nodes is the one holdOne picks whenever the pod
// may go there. ok is false when no node fits or the pod may not go to
// that one; holdOne then decides, with the reasons.
func (e *Planner) holdBest(req placement.Request, pod *corev1.Pod, snap *ledger.Snapshot, expires time.Time) (Hold, string, bool) {
	fits := e.memo.fits(req, snap, e.o.PolicyFor(req.Pool))
	best := -1
	for i := range fits {
		if f := &fits[i]; f.reason == nil && (best < 0 || f.score > fits[best].score) {
			best = i
		}
	}
	if best < 0 {
		return Hold{}, "", false
	}
	node, ok := e.o.Node(snap.Names()[best])
	if !ok || !mayGo(pod, newNodeMatch(pod), node) {
		return Hold{}, "", false
	}
	h, reason := e.holdAt(req, snap, best, fits[best].choice, expires)
	if reason == "" {
		m := newNodeMatch(pod)
		h.Candidates = e.candidates(snap, fits, best, nil, func(n *corev1.Node) bool { return mayGo(pod, m, n) })
	}
	return h, reason, true
}

// holdOne holds one pod on the best node: the highest policy score, the
// first by name among equals. candidates are positions in snap.Names, in
// order.
func (e *Planner) holdOne(req placement.Request, snap *ledger.Snapshot, candidates []int32, expires time.Time) (Hold, string) {
	names := snap.Names()
	fits := e.memo.fits(req, snap, e.o.PolicyFor(req.Pool))
	best := -1
	var tally placement.Tally
	for _, i := range candidates {
		f := &fits[i]
		if reason := f.reason; reason != nil {
			n := names[i]
			if reason.Node == "" {
				reason.Node = n
			}
			tally.Add(reason, n, reason.Message)
			continue
		}
		if best < 0 || f.score > fits[best].score {
			best = int(i)
		}
	}
	if best < 0 {
		return Hold{}, tally.Summary(len(candidates))
	}
	h, reason := e.holdAt(req, snap, best, fits[best].choice, expires)
	if reason == "" {
		h.Candidates = e.candidates(snap, fits, best, candidates, nil)
	}
	return h, reason
}

// candidates names the held node (position held) and the nodes that fit
// best after it, by score then position, Options.Candidates in all.
// among, when not nil, are the positions to choose from (in order); may,
// when not nil, says whether the pod may go to a node. One walk keeps the
// best few: may is asked only of a node that would join them.
func (e *Planner) candidates(snap *ledger.Snapshot, fits []nodeFit, held int, among []int32, may func(*corev1.Node) bool) []string {
	names := snap.Names()
	want := e.o.Candidates - 1 // besides the held node
	var best []int32           // by score, then position
	consider := func(i int32) {
		f := &fits[i]
		if int(i) == held || f.reason != nil || (len(best) == want && f.score <= fits[best[want-1]].score) {
			return
		}
		if may != nil {
			if node, ok := e.o.Node(names[i]); !ok || !may(node) {
				return
			}
		}
		at, _ := slices.BinarySearchFunc(best, f.score, func(b int32, score int64) int {
			return cmp.Compare(score, fits[b].score+1) // after every node of the same score
		})
		best = slices.Insert(best, at, i)
		if len(best) > want {
			best = best[:want]
		}
	}
	if want > 0 {
		if among != nil {
			for _, i := range among {
				consider(i)
			}
		} else {
			for i := range fits {
				consider(int32(i))
			}
		}
	}
	out := []string{names[held]}
	for _, i := range best {
		out = append(out, names[i])
	}
	return out
}

// holdAt reserves choice c on the node at position i of snap.Names.
func (e *Planner) holdAt(req placement.Request, snap *ledger.Snapshot, i int, c placement.Choice, expires time.Time) (Hold, string) {
	name := snap.Names()[i]
	a := c.Allocation(req, snap.At(i))
	if err := e.o.Ledger.Reserve(a, expires); err != nil {
		return Hold{}, fmt.Sprintf("holding room on node %s failed: %v", name, err)
	}
	a.State, a.Expires = ledger.Reserved, expires
	return Hold{Allocations: []ledger.Allocation{a}, Level: placement.TierNode, Where: name}, ""
}

// holdMemo keeps, for the few request shapes held most recently, each
// node's Fit and score as of the NodeInfo they were computed on. NodeInfos
// are immutable and replaced on every change, so an entry holds while the
// snapshot has the same NodeInfo at its position: a hold after a hold
// refits only the nodes that changed in between. Nodes with a
// reservation's claim are refitted every time (what they offer depends on
// the pod's job and end). The planning lock guards it.
type holdMemo struct {
	shapes []*shapeFits
	tick   uint64
}

// holdMemoShapes bounds the shapes kept (each costs about 100 bytes per
// node: 8 MB for all of them at 5,000 nodes). The queue admits in its own
// order, which cycles through the shapes waiting: with fewer entries than
// shapes in that cycle every hold evicts the shape the next one needs and
// refits every node.
const holdMemoShapes = 16

type shapeFits struct {
	req placement.Request // the shape (placement.Request.SameShape, ShareWithoutMPS)
	// policy scored the fits (a node pool's policy can change at a
	// configuration edit).
	policy placement.Policy
	snap   *ledger.Snapshot // positions are this snapshot's (ledger.Snapshot.SameNodes)
	nis    []*ledger.NodeInfo
	fits   []nodeFit
	used   uint64
}

// nodeFit is one node's Fit answer: reason nil and the choice with its
// score, or why the request does not fit.
type nodeFit struct {
	choice placement.Choice
	score  int64
	reason *placement.Reason
}

// fits returns each node's Fit answer for req, by position in snap.Names.
// The slice is the memo's: read it before the next call.
func (m *holdMemo) fits(req placement.Request, snap *ledger.Snapshot, policy placement.Policy) []nodeFit {
	m.tick++
	var sf *shapeFits
	for _, c := range m.shapes {
		if c.req.SameShape(req) && c.req.ShareWithoutMPS == req.ShareWithoutMPS && c.policy == policy {
			sf = c
			break
		}
	}
	if sf == nil {
		if len(m.shapes) < holdMemoShapes {
			sf = &shapeFits{}
			m.shapes = append(m.shapes, sf)
		} else {
			sf = m.shapes[0]
			for _, c := range m.shapes[1:] {
				if c.used < sf.used {
					sf = c
				}
			}
			*sf = shapeFits{nis: sf.nis[:0], fits: sf.fits[:0]}
		}
		sf.req, sf.policy = req, policy
		sf.req.Models = slices.Clone(req.Models)
	}
	sf.used = m.tick
	n := snap.Len()
	if !snap.SameNodes(sf.snap) || len(sf.nis) != n {
		sf.nis = append(sf.nis[:0], make([]*ledger.NodeInfo, n)...)
		sf.fits = append(sf.fits[:0], make([]nodeFit, n)...)
	}
	sf.snap = snap
	for i := range n {
		ni := snap.At(i)
		if ni == sf.nis[i] {
			continue
		}
		f := nodeFit{}
		f.choice, f.reason = placement.Fit(req, ni)
		if f.reason == nil {
			f.score = policy.Score(req, ni, f.choice)
		}
		sf.fits[i] = f
		sf.nis[i] = ni
		if ni.Claim != nil {
			sf.nis[i] = nil
		}
	}
	return sf.fits
}

// eligible lists the ledger's nodes that kube-scheduler could place pod on
// as far as its node selector, required node affinity and tolerations go
// (the checks bind repeats, checkNode), so that room is never held where the
// pod cannot go. Members of a gang share these (they ask the same).
func (e *Planner) eligible(pod *corev1.Pod, snap *ledger.Snapshot) []string {
	return namesAt(snap, e.eligibleAt(pod, snap))
}

// eligibleAt is eligible as positions in snap.Names, in order.
func (e *Planner) eligibleAt(pod *corev1.Pod, snap *ledger.Snapshot) []int32 {
	m := newNodeMatch(pod)
	out := make([]int32, 0, snap.Len())
	for i, n := range snap.Names() {
		if node, ok := e.o.Node(n); ok && mayGo(pod, m, node) {
			out = append(out, int32(i))
		}
	}
	return out
}

// nodeMatch is a pod's node selector and required node affinity, read
// once for many nodes.
type nodeMatch struct {
	// constrained is false for a pod with neither: it matches every node.
	constrained bool
	aff         nodeaffinity.RequiredNodeAffinity
}

func newNodeMatch(pod *corev1.Pod) nodeMatch {
	a := pod.Spec.Affinity
	if len(pod.Spec.NodeSelector) == 0 &&
		(a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil) {
		return nodeMatch{}
	}
	return nodeMatch{constrained: true, aff: nodeaffinity.GetRequiredNodeAffinity(pod)}
}

// mayGo reports whether pod may go to node as far as its node selector,
// required node affinity and tolerations go.
func mayGo(pod *corev1.Pod, m nodeMatch, node *corev1.Node) bool {
	if m.constrained {
		if match, err := m.aff.Match(node); err != nil || !match {
			return false
		}
	}
	if len(node.Spec.Taints) == 0 {
		return true
	}
	_, untolerated := Untolerated(pod, node)
	return !untolerated
}

// namesAt is the names of the nodes at positions at of snap.Names.
func namesAt(snap *ledger.Snapshot, at []int32) []string {
	names := snap.Names()
	out := make([]string, len(at))
	for j, i := range at {
		out[j] = names[i]
	}
	return out
}

// ReleaseHold frees what a hold reserved for pods that were not admitted
// after all (the admitting update failed). Pods that bound meanwhile keep
// their GPUs.
func (e *Planner) ReleaseHold(h Hold) {
	for _, a := range h.Allocations {
		if cur, ok := e.o.Ledger.Get(a.PodUID); ok && cur.State == ledger.Reserved {
			e.o.Ledger.Release(a.PodUID)
		}
	}
}

// HeldNode returns the node of a single pod's admission or bind hold.
func (e *Planner) HeldNode(pod *corev1.Pod) (string, bool) {
	a, ok := e.o.Ledger.Get(string(pod.UID))
	if !ok || a.State != ledger.Reserved || a.Gang != "" {
		return "", false
	}
	return a.Node, true
}

// ReservationJob describes a queued workload's pods for reservation
// planning (pkg/reserve): what each member asks for (narrowed to scope),
// the job's key, and the nodes its pods may run on.
func (e *Planner) ReservationJob(pods []*corev1.Pod, scope Scope) (reserve.Job, []string, error) {
	if len(pods) == 0 {
		return reserve.Job{}, nil, fmt.Errorf("no pods")
	}
	req, err := e.o.Request(pods[0])
	if err != nil {
		return reserve.Job{}, nil, err
	}
	scope.narrow(&req)
	ref := e.o.Gang(pods[0])
	job := reserve.Job{Key: req.Job, Gang: ref != nil, Member: req, Members: len(pods)}
	if ref != nil {
		job.Members = max(ref.Size, len(pods))
	}
	return job, e.eligible(pods[0], e.o.Ledger.Snapshot()), nil
}

// SetClaims replaces the reservations' holds in the ledger.
func (e *Planner) SetClaims(claims []ledger.Claim) { e.o.Ledger.SetClaims(claims) }

// Tiers is the number of topology tier labels.
func (e *Planner) Tiers() int { return e.o.Tiers }
