package view

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/topology"
)

// DefaultInFlightTTL is how long an admitted pod is held before the
// informer shows it.
const DefaultInFlightTTL = 30 * time.Second

// Options configure a View.
type Options struct {
	Names contract.Names
	// MemoryUnitMiB is the size of one gpu-memory unit; 0 means
	// contract.DefaultMemoryUnitMiB.
	MemoryUnitMiB contract.MiB
	// InFlightTTL bounds how long an admission is held without the
	// informer showing the pod; 0 means DefaultInFlightTTL.
	InFlightTTL time.Duration
	// ConfigSource names where the quota configuration comes from, for
	// messages ("ConfigMap rota-system/rota-quota").
	ConfigSource string
	// SuspendJobsEverywhere queues top-level GPU Jobs suspended in every
	// namespace but those labelled QueueingGate (or where queueing is off
	// or Kueue's), not only in those labelled QueueingSuspend.
	SuspendJobsEverywhere bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// View is the webhook's usage view. Build it with New. It is safe for
// concurrent use.
type View struct {
	o Options

	mu      sync.Mutex
	cfg     *quota.Config // nil until a configuration is loaded
	pods    map[string]podRec
	buckets map[bucketKey]*bucket
	nsTeam  map[string]string // namespace -> its team label ("" when unlabelled)
	// nsQueueing holds the namespaces whose queueing label is one Rota
	// knows (off, kueue, suspend, gate), with the label's value.
	nsQueueing map[string]string
	gangs      map[string]*gang
	podRes     map[string]*podRes
	queue      []expiry // reservations in order of expiry (the TTL is constant)
	head       int      // first live entry of queue
	nodes      map[string]nodeEntry
	caps       Caps
	// modelCaps is caps per GPU model (as the device plugin names it);
	// poolCaps per node pool (the node-pool label's value, "" for none).
	modelCaps map[string]Caps
	poolCaps  map[string]Caps
}

// bucketKey groups pods that are always charged to the same team: one
// namespace and one value of the pod's own team label. Which team a bucket
// belongs to is decided when usage is read, so a relabelled namespace or a
// changed override setting takes effect at once.
type bucketKey struct{ ns, podTeam string }

type bucket struct {
	running, pending, reserved quota.Amount
	// queued is what the bucket's gated pods ask for; it never counts
	// against quota. queuedPods counts them, queuedRes the gated pods the
	// webhook accepted that the informer has not shown yet.
	queued                quota.Amount
	queuedPods, queuedRes int
	refs                  int
}

// podRec is a pod the informer shows that holds Rota resources.
type podRec struct {
	uid     string
	bucket  bucketKey
	amt     quota.Amount
	running bool
	// queued: the pod carries the queue gate (it is waiting in Rota's
	// queue and holds no quota).
	queued   bool
	gang     string
	gangSize int
}

// podRes is an admitted pod the informer has not shown yet. A queued one
// (a gated pod) holds a place under its team's queued-pod cap, no quota.
type podRes struct {
	uid     string
	bucket  bucketKey
	amt     quota.Amount
	queued  bool
	gang    string
	expires time.Time
}

// gang tracks one gang's members and the reservation of its unfilled slots.
type gang struct {
	size      int // 0: unknown (pod-group label without a size)
	perMember quota.Amount
	seen      int // members the informer shows
	reserved  int // members admitted, not yet shown
	res       *gangRes
}

// gangRes holds room for the members of a gang not yet admitted.
type gangRes struct {
	bucket  bucketKey
	expires time.Time
}

// extra is what the gang's reservation adds beyond its members' own use.
func (g *gang) extra() quota.Amount {
	if g.res == nil || g.size == 0 {
		return quota.Amount{}
	}
	return g.perMember.Times(int64(max(0, g.size-g.seen-g.reserved)))
}

func (g *gang) empty() bool { return g.seen == 0 && g.reserved == 0 && g.res == nil }

type expiry struct {
	key  string
	gang bool
	at   time.Time
}

// Caps is what the cluster's nodes offer, from their topology annotations.
// Zero values mean no node publishes a topology yet, and checks against
// them are skipped.
type Caps struct {
	Nodes           int
	MaxGPUs         int          // GPUs of the largest node
	MaxGPUMemoryMiB contract.MiB // memory of the largest GPU
	TotalGPUs       int
	TotalMemoryMiB  contract.MiB
}

type nodeEntry struct {
	annotation string
	// pool is the node's node-pool label.
	pool     string
	gpus     int
	maxMem   contract.MiB
	totalMem contract.MiB
	// models is the node's GPUs per model.
	models map[string]modelEntry
}

type modelEntry struct {
	gpus             int
	maxMem, totalMem contract.MiB
}

// New returns an empty view.
func New(o Options) *View {
	if o.MemoryUnitMiB <= 0 {
		o.MemoryUnitMiB = contract.DefaultMemoryUnitMiB
	}
	if o.InFlightTTL <= 0 {
		o.InFlightTTL = DefaultInFlightTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &View{
		o:          o,
		pods:       map[string]podRec{},
		buckets:    map[bucketKey]*bucket{},
		nsTeam:     map[string]string{},
		nsQueueing: map[string]string{},
		gangs:      map[string]*gang{},
		podRes:     map[string]*podRes{},
		nodes:      map[string]nodeEntry{},
	}
}

// SetConfig installs a new quota configuration; it applies to the next
// admission.
func (v *View) SetConfig(c quota.Config) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cfg = &c
}

// Config returns the current configuration and whether one is loaded.
func (v *View) Config() (quota.Config, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cfg == nil {
		return quota.Config{}, false
	}
	return *v.cfg, true
}

// Caps returns what the cluster's nodes offer.
func (v *View) Caps() Caps {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.caps
}

// MemoryUnitMiB is the memory unit the view converts memory shares with.
func (v *View) MemoryUnitMiB() contract.MiB { return v.o.MemoryUnitMiB }

// key is the namespace/name key of a pod.
func key(ns, name string) string { return ns + "/" + name }

// record reads what a pod holds. Pods that hold nothing (terminal, no Rota
// resource) return false. A pod whose request Rota cannot read (it predates
// the webhook) holds nothing either: the extender cannot place it.
func (v *View) record(pod *corev1.Pod) (podRec, bool) {
	if podreq.Terminal(pod) || !podreq.Wants(pod, v.o.Names) {
		return podRec{}, false
	}
	r, err := podreq.FromPod(pod, podreq.Options{Names: v.o.Names, MemoryUnitMiB: v.o.MemoryUnitMiB})
	if err != nil || r.GPUFree() {
		return podRec{}, false
	}
	rec := podRec{
		uid:     string(pod.UID),
		bucket:  bucketKey{ns: pod.Namespace, podTeam: pod.Labels[v.o.Names.TeamLabel]},
		amt:     quota.AmountOf(r.GPUs, r.MemoryUnits, v.o.MemoryUnitMiB),
		running: pod.Spec.NodeName != "",
	}
	rec.queued = !rec.running && Gated(pod, v.o.Names)
	if g, _ := podreq.GangOf(pod, v.o.Names); g != nil {
		rec.gang, rec.gangSize = g.Key, g.Size
	}
	return rec, true
}

// UpsertPod records a pod the informer added or updated.
func (v *View) UpsertPod(pod *corev1.Pod) {
	rec, holds := v.record(pod)
	k := key(pod.Namespace, pod.Name)
	v.mu.Lock()
	defer v.mu.Unlock()
	// The pod is visible now: its admission reservation has done its job.
	if r := v.podRes[k]; r != nil && (r.uid == "" || r.uid == string(pod.UID)) {
		v.dropPodRes(k)
	}
	old, had := v.pods[k]
	if had && holds && old == rec {
		return
	}
	if had {
		v.removePod(k, old)
	}
	if holds {
		v.addPod(k, rec)
	}
}

// DeletePod forgets a pod the informer deleted.
func (v *View) DeletePod(namespace, name string) {
	k := key(namespace, name)
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, had := v.pods[k]; had {
		v.removePod(k, old)
	}
}

func (v *View) bucket(k bucketKey) *bucket {
	b := v.buckets[k]
	if b == nil {
		b = &bucket{}
		v.buckets[k] = b
	}
	return b
}

func (v *View) release(k bucketKey, b *bucket) {
	if b.refs == 0 {
		delete(v.buckets, k)
	}
}

func (v *View) addPod(k string, rec podRec) {
	v.pods[k] = rec
	b := v.bucket(rec.bucket)
	b.refs++
	switch {
	case rec.running:
		b.running = b.running.Add(rec.amt)
	case rec.queued:
		b.queued = b.queued.Add(rec.amt)
		b.queuedPods++
	default:
		b.pending = b.pending.Add(rec.amt)
	}
	if rec.gang != "" {
		v.updateGang(rec.gang, rec.gangSize, rec.amt, func(g *gang) { g.seen++ })
	}
}

func (v *View) removePod(k string, rec podRec) {
	delete(v.pods, k)
	b := v.bucket(rec.bucket)
	b.refs--
	switch {
	case rec.running:
		b.running = b.running.Sub(rec.amt)
	case rec.queued:
		b.queued = b.queued.Sub(rec.amt)
		b.queuedPods--
	default:
		b.pending = b.pending.Sub(rec.amt)
	}
	v.release(rec.bucket, b)
	if rec.gang != "" {
		v.updateGang(rec.gang, rec.gangSize, rec.amt, func(g *gang) { g.seen-- })
	}
}

// updateGang applies f to a gang (creating it with the given shape when it
// has no members yet) and moves the change in its reservation's extra room
// into the bucket the reservation is charged to.
func (v *View) updateGang(k string, size int, perMember quota.Amount, f func(g *gang)) {
	g := v.gangs[k]
	if g == nil {
		g = &gang{size: size, perMember: perMember}
		v.gangs[k] = g
	}
	var before quota.Amount
	var beforeBucket bucketKey
	hadRes := g.res != nil
	if hadRes {
		before, beforeBucket = g.extra(), g.res.bucket
	}
	f(g)
	if hadRes {
		b := v.bucket(beforeBucket)
		b.reserved = b.reserved.Sub(before)
		b.refs--
		v.release(beforeBucket, b)
	}
	if g.res != nil {
		b := v.bucket(g.res.bucket)
		b.reserved = b.reserved.Add(g.extra())
		b.refs++
	}
	if g.empty() {
		delete(v.gangs, k)
	}
}

func (v *View) addPodRes(k string, r *podRes) {
	v.dropPodRes(k)
	v.podRes[k] = r
	b := v.bucket(r.bucket)
	b.refs++
	if r.queued {
		b.queuedRes++
	} else {
		b.reserved = b.reserved.Add(r.amt)
	}
	v.push(expiry{key: k, at: r.expires})
}

func (v *View) dropPodRes(k string) {
	r := v.podRes[k]
	if r == nil {
		return
	}
	delete(v.podRes, k)
	b := v.bucket(r.bucket)
	b.refs--
	if r.queued {
		b.queuedRes--
	} else {
		b.reserved = b.reserved.Sub(r.amt)
	}
	v.release(r.bucket, b)
	if r.gang != "" {
		v.updateGang(r.gang, 0, r.amt, func(g *gang) { g.reserved-- })
	}
}

func (v *View) push(e expiry) {
	// Compact the queue once most of it has been consumed.
	if v.head > 1024 && v.head > len(v.queue)/2 {
		v.queue = append(v.queue[:0], v.queue[v.head:]...)
		v.head = 0
	}
	v.queue = append(v.queue, e)
}

// expire ends the reservations whose time is up. Queue entries whose
// reservation was refreshed or already ended are skipped.
func (v *View) expire(now time.Time) {
	for v.head < len(v.queue) && !v.queue[v.head].at.After(now) {
		e := v.queue[v.head]
		v.queue[v.head] = expiry{}
		v.head++
		if e.gang {
			if g := v.gangs[e.key]; g != nil && g.res != nil && !g.res.expires.After(now) {
				v.updateGang(e.key, 0, quota.Amount{}, func(g *gang) { g.res = nil })
			}
			continue
		}
		if r := v.podRes[e.key]; r != nil && !r.expires.After(now) {
			v.dropPodRes(e.key)
		}
	}
	if v.head == len(v.queue) {
		v.queue, v.head = v.queue[:0], 0
	}
}

// Expire ends the reservations whose time is up (Admit does this too; call
// it from a timer so idle views do not hold expired reservations).
func (v *View) Expire() {
	now := v.o.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.expire(now)
}

// UpsertNamespace records a namespace's team label and queueing label.
func (v *View) UpsertNamespace(ns *corev1.Namespace) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nsTeam[ns.Name] = ns.Labels[v.o.Names.TeamLabel]
	switch mode := ns.Labels[v.o.Names.QueueingLabel]; mode {
	case contract.QueueingOff, contract.QueueingKueue, contract.QueueingSuspend, contract.QueueingGate:
		v.nsQueueing[ns.Name] = mode
	default:
		delete(v.nsQueueing, ns.Name)
	}
}

// DeleteNamespace forgets a namespace.
func (v *View) DeleteNamespace(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.nsTeam, name)
	delete(v.nsQueueing, name)
}

// NamespaceKnown reports whether the view has seen the namespace.
func (v *View) NamespaceKnown(name string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.nsTeam[name]
	return ok
}

// UpsertNode records a node's GPUs from its topology annotation. A missing
// or unreadable annotation counts as no GPUs; the parse error is returned
// for the caller to log.
func (v *View) UpsertNode(node *corev1.Node) error {
	ann, has := node.Annotations[v.o.Names.TopologyAnnotation]
	pool := node.Labels[topology.PoolLabel(v.o.Names)]
	v.mu.Lock()
	if e, ok := v.nodes[node.Name]; ok && e.annotation == ann && e.pool == pool {
		v.mu.Unlock()
		return nil // heartbeats and status updates: nothing changed
	}
	v.mu.Unlock()
	e := nodeEntry{annotation: ann, pool: pool}
	var err error
	if has {
		var t contract.Topology
		if t, err = contract.ParseTopology([]byte(ann)); err == nil {
			e.gpus = len(t.GPUs)
			e.models = map[string]modelEntry{}
			for _, g := range t.GPUs {
				e.maxMem = max(e.maxMem, g.MemoryMiB)
				e.totalMem += g.MemoryMiB
				m := e.models[g.Model]
				m.gpus++
				m.maxMem = max(m.maxMem, g.MemoryMiB)
				m.totalMem += g.MemoryMiB
				e.models[g.Model] = m
			}
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.nodes[node.Name] = e
	v.recomputeCaps()
	return err
}

// DeleteNode forgets a node.
func (v *View) DeleteNode(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.nodes[name]; ok {
		delete(v.nodes, name)
		v.recomputeCaps()
	}
}

func (v *View) recomputeCaps() {
	var c Caps
	models, pools := map[string]Caps{}, map[string]Caps{}
	for _, e := range v.nodes {
		if e.gpus == 0 {
			continue
		}
		c.add(e.gpus, e.maxMem, e.totalMem)
		pc := pools[e.pool]
		pc.add(e.gpus, e.maxMem, e.totalMem)
		pools[e.pool] = pc
		for name, m := range e.models {
			mc := models[name]
			mc.add(m.gpus, m.maxMem, m.totalMem)
			models[name] = mc
		}
	}
	v.caps, v.modelCaps, v.poolCaps = c, models, pools
}

// add counts one node of gpus GPUs, the largest with maxMem.
func (c *Caps) add(gpus int, maxMem, totalMem contract.MiB) {
	c.Nodes++
	c.MaxGPUs = max(c.MaxGPUs, gpus)
	c.MaxGPUMemoryMiB = max(c.MaxGPUMemoryMiB, maxMem)
	c.TotalGPUs += gpus
	c.TotalMemoryMiB += totalMem
}

// teamOf is the team a bucket is charged to under cfg: none in a namespace
// Kueue queues (its ClusterQueues are the quota there).
func (v *View) teamOf(cfg *quota.Config, k bucketKey) string {
	if v.nsQueueing[k.ns] == contract.QueueingKueue {
		return ""
	}
	if cfg != nil && cfg.AllowPodTeamOverride && k.podTeam != "" {
		return k.podTeam
	}
	return v.nsTeam[k.ns]
}

// usage sums the buckets per team: admitted use, running and pending
// (reservations count as pending). Queued (gated) pods are not use.
func (v *View) usage(cfg *quota.Config) map[string]quota.Usage {
	out := make(map[string]quota.Usage, len(v.buckets))
	for k, b := range v.buckets {
		t := v.teamOf(cfg, k)
		u := out[t]
		u.Running = u.Running.Add(b.running)
		u.Pending = u.Pending.Add(b.pending).Add(b.reserved)
		out[t] = u
	}
	return out
}

// Usage returns every team's use (the key "" holds pods of unlabelled
// namespaces) and the current configuration, for metrics.
func (v *View) Usage() (map[string]quota.Usage, quota.Config, bool) {
	now := v.o.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.expire(now)
	var cfg quota.Config
	if v.cfg != nil {
		cfg = *v.cfg
	}
	return v.usage(v.cfg), cfg, v.cfg != nil
}

// Reservations returns how many admitted pods and gangs are held, for
// metrics and tests.
func (v *View) Reservations() (pods, gangs int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, g := range v.gangs {
		if g.res != nil {
			gangs++
		}
	}
	return len(v.podRes), gangs
}
