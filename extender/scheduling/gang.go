package scheduling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	gocache "github.com/patrickmn/go-cache"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/placement"
	"github.com/rota-sched/rota/pkg/podreq"
)

// gangs plans gangs and tracks their plans.
//
// A gang is planned as a whole when one of its members is filtered and all
// its members exist (counted in the pod informer by the gang label or
// scheduler-plugins' pod-group label): placement.PlanGang over the
// snapshot picks the smallest topology tier that holds every member, and
// ledger.ReserveAll reserves one slot per member with the gang TTL. The
// plan lives as long as its slots, on the one clock the ledger's
// reservations use (the extender's, taken from the caller): Expire drops a
// plan whose time passed, with the slots that are still only reserved, and
// counts the expiry.
// A member filtered later passes only its slot's node; each member's bind
// extends its gang-mates' reservations and the plan.
//
// kube-scheduler retries a pod an extender rejected only on a cluster event
// (or after its unschedulable-pool flush, 5 minutes by default). So when a
// plan succeeds, the other members, rejected while the gang was incomplete,
// are "touched": the extender patches the RequeueAnnotation on each, the
// scheduler sees a Pod update and requeues it at once. When GPUs are
// released, one member of each gang that waits for room is touched so that
// planning runs again.
type gangs struct {
	e *Extender
	// Planning, and the waiting gangs' notes, are under the room planner's
	// lock (room.Planner.Lock), which the queue's holds take too.
	// plansMu guards plans (gang key -> plan); bind reads them without mu.
	plansMu sync.Mutex
	plans   map[string]*gangPlan
	// waiting is a lookup of gangs that wait (gang key -> *waitInfo), for
	// requeue touches; a wall-clock TTL forgets gangs nobody filters any
	// more.
	waiting *gocache.Cache
}

type gangPlan struct {
	key     string
	members []podRef
	uids    []string
	expires time.Time
}

type waitInfo struct {
	since     time.Time
	member    podRef
	noRoom    bool
	lastTouch time.Time
}

func newGangs(e *Extender) *gangs {
	return &gangs{e: e, plans: map[string]*gangPlan{}, waiting: gocache.New(10*time.Minute, time.Minute)}
}

func (g *gangs) waitingCount() int { return g.waiting.ItemCount() }

// expire drops the plans whose time passed at now and releases their slots
// that are still only reserved (the ledger's own expiry has usually taken
// them already: they share the deadline).
func (g *gangs) expire(ctx context.Context, now time.Time) {
	g.plansMu.Lock()
	var gone []*gangPlan
	for key, p := range g.plans {
		if !p.expires.After(now) {
			gone = append(gone, p)
			delete(g.plans, key)
		}
	}
	g.plansMu.Unlock()
	for _, p := range gone {
		g.e.metrics.GangPlans.WithLabelValues("expired").Inc()
		g.release(ctx, p)
	}
}

// release frees a dropped plan's slots that are still only reserved.
func (g *gangs) release(ctx context.Context, p *gangPlan) {
	key := p.key
	released := 0
	for _, uid := range p.uids {
		if a, ok := g.e.ledger.Get(uid); ok && a.State == ledger.Reserved && a.Gang == key {
			if _, ok := g.e.ledger.Release(uid); ok {
				released++
			}
		}
	}
	if released > 0 {
		g.e.metrics.Expired.WithLabelValues("gang").Add(float64(released))
	}
	klog.FromContext(ctx).V(2).Info("Gang plan expired", "gang", key, "released", released)
}

// planOf returns the gang's plan, if any.
func (g *gangs) planOf(key string) (*gangPlan, bool) {
	g.plansMu.Lock()
	defer g.plansMu.Unlock()
	p, ok := g.plans[key]
	return p, ok
}

// setPlan keeps (or renews) a plan until expires.
func (g *gangs) setPlan(p *gangPlan, expires time.Time) {
	g.plansMu.Lock()
	defer g.plansMu.Unlock()
	p.expires = expires
	g.plans[p.key] = p
}

// size returns the gang's member count: the gang-size annotation, else the
// PodGroup's minMember.
func (g *gangs) size(ctx context.Context, ref *podreq.GangRef) (int, error) {
	if ref.Size > 0 {
		return ref.Size, nil
	}
	if g.e.o.PodGroups == nil {
		return 0, fmt.Errorf("pod group %s: the PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is not installed, so the gang size is unknown; set annotation %s to the number of members",
			ref.Key, g.e.names.GangSizeAnnotation)
	}
	ns, name, _ := strings.Cut(ref.Key, "/")
	n, err := g.e.o.PodGroups.MinMember(ctx, ns, name)
	if err != nil {
		return 0, fmt.Errorf("pod group %s: %w", ref.Key, err)
	}
	if n < 1 {
		return 1, nil
	}
	return n, nil
}

// filter handles a gang member. It reports true when it decided (slot node
// only, or every node rejected); false lets the member be placed like a
// single pod (its gang already holds all the members it needs).
func (g *gangs) filter(ctx context.Context, pod *corev1.Pod, req placement.Request, ref *podreq.GangRef,
	names []string, snap *ledger.Snapshot, f *filterState) bool {
	key := ref.Key
	f.gang = key
	if g.slot(pod, key, names, f) {
		return true
	}
	size, err := g.size(ctx, ref)
	if err != nil {
		f.rejectAll(names, placement.GangIncomplete, false, err.Error())
		return true
	}
	g.e.room.Lock() // counting the members and planning them: one plan at a time
	defer g.e.room.Unlock()
	// Another member's filter may have planned the gang meanwhile.
	if g.slot(pod, key, names, f) {
		return true
	}
	// Count the members: bound ones and slot holders need nothing more.
	members := g.e.cache.GangMembers(key)
	if !slices.ContainsFunc(members, func(m *corev1.Pod) bool { return m.UID == pod.UID }) {
		members = append(members, pod) // the informer lags behind the scheduler
	}
	bound, holding := 0, 0
	var free []*corev1.Pod
	var boundOn []string
	for _, m := range members {
		switch {
		case m.Spec.NodeName != "":
			bound++
			boundOn = append(boundOn, m.Spec.NodeName)
		case g.held(m):
			holding++
		default:
			free = append(free, m)
		}
	}
	need := size - bound - holding
	if need <= 0 {
		return false
	}
	now := g.e.now()
	wi := g.wait(key, pod, now)
	if len(free) < need {
		exist := bound + holding + len(free)
		f.rejectAll(names, placement.GangIncomplete, false, fmt.Sprintf(
			"gang %s: %d of %d members exist; waiting for %d more before placing any", key, exist, size, size-exist))
		g.e.metrics.GangPlans.WithLabelValues("incomplete").Inc()
		return true
	}
	// This pod first, then the others by name: deterministic plans.
	slices.SortFunc(free, func(a, b *corev1.Pod) int {
		switch {
		case a.UID == pod.UID:
			return -1
		case b.UID == pod.UID:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	free = free[:need]
	gang := placement.Gang{Name: key, Member: req}
	refs := make([]podRef, 0, need)
	for _, m := range free {
		if m.UID != pod.UID {
			mr, err := g.e.request(m)
			if err != nil || !mr.SameShape(req) {
				f.rejectAll(names, placement.GangNoFit, false, fmt.Sprintf(
					"gang %s: member %s asks for other GPUs than %s; give every member the same GPU request",
					key, m.Name, pod.Name))
				g.e.metrics.GangPlans.WithLabelValues("nofit").Inc()
				return true
			}
		}
		gang.UIDs = append(gang.UIDs, string(m.UID))
		gang.Pods = append(gang.Pods, m.Namespace+"/"+m.Name)
		refs = append(refs, podRef{Namespace: m.Namespace, Name: m.Name, UID: m.UID})
	}
	expires := now.Add(g.e.o.GangTTL)
	plan, reason, err := g.e.room.PlanGang(gang, snap, names, boundOn, need+bound+holding, expires)
	if reason != nil {
		wi.noRoom = true
		f.rejectAll(names, reason.Code, reason.Resolvable, reason.Message())
		g.e.metrics.GangPlans.WithLabelValues("nofit").Inc()
		return true
	}
	if err != nil {
		f.rejectAll(names, placement.GangNoFit, true, fmt.Sprintf("gang %s: reserving its slots failed, will retry: %v", key, err))
		g.e.metrics.GangPlans.WithLabelValues("nofit").Inc()
		return true
	}
	g.setPlan(&gangPlan{key: key, members: refs, uids: gang.UIDs}, expires)
	g.waiting.Delete(key)
	g.e.metrics.GangPlans.WithLabelValues("planned").Inc()
	g.e.metrics.GangWait.Observe(now.Sub(wi.since).Seconds())
	klog.FromContext(ctx).V(4).Info("Gang planned", "gang", key, "members", need, "level", plan.Level,
		"where", plan.Where, "nodes", plan.Nodes())
	g.e.touch(ctx, refs[1:], "gang "+key+" planned")
	return g.slot(pod, key, names, f)
}

// held reports whether the pod holds a reservation or allocation.
func (g *gangs) held(pod *corev1.Pod) bool {
	_, ok := g.e.ledger.Get(string(pod.UID))
	return ok
}

// wait records that the gang waits (for the waiting gauge, the wait-time
// histogram and requeue touches).
func (g *gangs) wait(key string, pod *corev1.Pod, now time.Time) *waitInfo {
	if v, ok := g.waiting.Get(key); ok {
		if wi, ok := v.(*waitInfo); ok {
			g.waiting.SetDefault(key, wi)
			return wi
		}
	}
	wi := &waitInfo{since: now, member: podRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
	g.waiting.SetDefault(key, wi)
	return wi
}

// slot passes only the node of the pod's gang slot, if it holds one.
func (g *gangs) slot(pod *corev1.Pod, key string, names []string, f *filterState) bool {
	a, ok := g.e.ledger.Get(string(pod.UID))
	if !ok || a.State != ledger.Reserved || a.Gang != key {
		return false
	}
	elsewhere := fmt.Sprintf("gang %s: this member's reserved slot is on node %s", key, a.Node)
	for _, n := range names {
		if n == a.Node {
			f.passed = append(f.passed[:0], n)
			continue
		}
		f.rejectText(n, placement.GangSlot, false, elsewhere)
	}
	if len(f.passed) == 0 {
		f.note = fmt.Sprintf("gang %s: this member's reserved slot is on node %s, which kube-scheduler ruled out for the pod", key, a.Node)
	} else {
		f.note = "gang slot on " + a.Node
	}
	return true
}

// bound runs after a member bound: it extends the gang-mates' reservations
// and the plan, and forgets the plan once every member is committed.
func (g *gangs) bound(key string) {
	p, ok := g.planOf(key)
	if !ok {
		return
	}
	expires := g.e.now().Add(g.e.o.GangTTL)
	var mates []ledger.Allocation
	for _, uid := range p.uids {
		if a, ok := g.e.ledger.Get(uid); ok && a.State == ledger.Reserved {
			mates = append(mates, a)
		}
	}
	if len(mates) == 0 {
		g.plansMu.Lock()
		delete(g.plans, key)
		g.plansMu.Unlock()
		g.e.metrics.GangPlans.WithLabelValues("completed").Inc()
		return
	}
	// Renewing held reservations checks nothing new and cannot fail unless
	// one was released meanwhile; then the plan's expiry settles it.
	_ = g.e.ledger.ReserveAll(mates, expires)
	g.setPlan(p, expires)
}

// retryWaiting touches one member of each gang that waits for room,
// at most once per 5 seconds per gang.
func (g *gangs) retryWaiting() {
	g.e.room.Lock() // the waiting gangs' notes are kept under the planning lock
	defer g.e.room.Unlock()
	now := g.e.now()
	var refs []podRef
	for _, item := range g.waiting.Items() {
		wi, ok := item.Object.(*waitInfo)
		if !ok || !wi.noRoom || now.Sub(wi.lastTouch) < 5*time.Second {
			continue
		}
		wi.lastTouch = now
		refs = append(refs, wi.member)
	}
	g.e.touch(context.Background(), refs, "GPUs released")
}
