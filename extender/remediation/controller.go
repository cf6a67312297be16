package remediation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/remediation"
	"github.com/rota-sched/rota/pkg/topology"
)

// Event reasons.
const (
	ReasonGPUFailure  = "GPUFailure"
	ReasonDryRun      = "RemediationDryRun"
	ReasonDeferred    = "RemediationDeferred"
	ReasonQuarantined = "Quarantined"
	ReasonReleased    = "QuarantineReleased"
)

// Options configure New.
type Options struct {
	Config Config
	Names  contract.Names
	Client kubernetes.Interface
	// Nodes is a not yet started Node informer of the controller's own
	// (extender/state's is trimmed to the topology); New sets its transform.
	Nodes cache.SharedIndexInformer
	// Leases is a not yet started informer on kube-node-lease; nil judges
	// nodes by their Ready condition only.
	Leases cache.SharedIndexInformer
	// Pods is extender/state's pod informer (trimmed, with the gang index),
	// not yet started; New adds state.NodeIndex unless the
	// state cache did.
	Pods     cache.SharedIndexInformer
	Recorder record.EventRecorder
	Metrics  *Metrics
	// Reapply re-converts a node's topology after Adjust's answer changed
	// (state.Cache.Reapply).
	Reapply func(node string)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Controller is the fault controller; see the package doc.
type Controller struct {
	cfg      Config
	names    contract.Names
	client   kubernetes.Interface
	nodes    cache.SharedIndexInformer
	leases   cache.SharedIndexInformer
	pods     cache.SharedIndexInformer
	recorder record.EventRecorder
	metrics  *Metrics
	reapply  func(string)
	now      func() time.Time

	mu         sync.Mutex
	planner    *remediation.Planner
	quarantine *remediation.Quarantine
	recovery   *remediation.Recovery
	faults     map[remediation.Target]remediation.Fault // open faults, by target
	handled    map[types.UID]remediation.Action         // final actions taken per pod
	reported   map[string]bool                          // dry-run: uid/action already reported
	// releaseSeen is, per node, the resourceVersion of the Node whose
	// release annotation was last acted on: the informer may still show
	// that version after the controller cleared the annotation, and in
	// dry-run the annotation is never cleared.
	releaseSeen map[string]string
	// gpuHealth caches each node's GPUs as last parsed from its topology
	// annotation, so a pass parses only the annotations that changed.
	gpuHealth map[string]parsedGPUs
	pass      uint64
}

// parsedGPUs is one node's topology annotation and the GPU observations
// read from it.
type parsedGPUs struct {
	raw  string
	gpus []gpuObs
	pass uint64 // the last pass that saw the node
}

// gpuObs is one GPU's health as the annotation states it.
type gpuObs struct {
	uuid    string
	healthy bool
	reason  string
}

// New wires the controller onto the informers (start them afterwards).
func New(o Options) (*Controller, error) {
	if o.Client == nil || o.Nodes == nil || o.Pods == nil || o.Recorder == nil {
		return nil, errors.New("remediation: client, node and pod informers and a recorder are required")
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg: o.Config, names: o.Names, client: o.Client, nodes: o.Nodes, leases: o.Leases, pods: o.Pods,
		recorder: o.Recorder, metrics: o.Metrics, reapply: o.Reapply, now: o.Now,
		planner: &remediation.Planner{Mode: o.Config.Mode, Limiter: remediation.NewLimiter(
			o.Config.EvictionsPerMinute, float64(o.Config.EvictionBurst),
			o.Config.NodeEvictionsPerMinute, float64(o.Config.NodeEvictionBurst))},
		quarantine: remediation.NewQuarantine(o.Config.QuarantineThreshold, o.Config.QuarantineWindow),
		recovery:   remediation.NewRecovery(o.Config.RecoveryQuiet),
		faults:     map[remediation.Target]remediation.Fault{},
		handled:    map[types.UID]remediation.Action{},
		reported:   map[string]bool{},

		releaseSeen: map[string]string{},
		gpuHealth:   map[string]parsedGPUs{},
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.reapply == nil {
		c.reapply = func(string) {}
	}
	if c.metrics == nil {
		c.metrics = NewMetrics(nil)
	}
	if err := o.Nodes.SetTransform(NodeTransform(o.Names)); err != nil {
		return nil, fmt.Errorf("node informer transform: %w", err)
	}
	if o.Leases != nil {
		if err := o.Leases.SetTransform(leaseTransform); err != nil {
			return nil, fmt.Errorf("lease informer transform: %w", err)
		}
	}
	if _, ok := o.Pods.GetIndexer().GetIndexers()[state.NodeIndex]; !ok {
		if err := o.Pods.AddIndexers(cache.Indexers{state.NodeIndex: state.IndexByNode}); err != nil {
			return nil, fmt.Errorf("pod node index: %w", err)
		}
	}
	return c, nil
}

// NodeTransform trims a node to what the controller reads: name, the
// topology and quarantine annotations, taints and the Ready condition.
func NodeTransform(names contract.Names) cache.TransformFunc {
	return func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}}
		for _, k := range []string{names.TopologyAnnotation, names.QuarantineAnnotation} {
			if v, ok := n.Annotations[k]; ok {
				if out.Annotations == nil {
					out.Annotations = map[string]string{}
				}
				out.Annotations[k] = v
			}
		}
		out.Spec.Taints = n.Spec.Taints
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				out.Status.Conditions = []corev1.NodeCondition{{Type: cond.Type, Status: cond.Status, Reason: cond.Reason}}
			}
		}
		return out, nil
	}
}

func leaseTransform(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion},
		Spec: coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime}}, nil
}

// HasSynced reports whether the controller's informers have synced.
func (c *Controller) HasSynced() bool {
	return c.nodes.HasSynced() && c.pods.HasSynced() && (c.leases == nil || c.leases.HasSynced())
}

// Run reconciles every Interval until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.HasSynced) {
		return
	}
	logger.Info("Remediation controller running", "mode", c.cfg.Mode, "heartbeatTimeout", c.cfg.HeartbeatTimeout,
		"quarantineThreshold", c.cfg.QuarantineThreshold, "quarantineWindow", c.cfg.QuarantineWindow)
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Adjust marks the GPUs that must not take new work unhealthy: those
// quarantined and those (or whose node) still in their recovery quiet
// period or whose node is not Ready. In dry-run and off it changes nothing.
func (c *Controller) Adjust(n *topology.Node) *topology.Node {
	if c.cfg.Mode != remediation.On {
		return n
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	nodeOut := ""
	switch nt := remediation.NodeTarget(n.Name); {
	case c.quarantine.Has(nt):
		nodeOut = "node quarantined"
	case !c.recovery.Usable(nt, now):
		nodeOut = "node not ready or recovering"
	}
	var out *topology.Node
	for i, g := range n.GPUs {
		why := nodeOut
		if why == "" {
			gt := remediation.GPUTarget(n.Name, g.UUID)
			switch {
			case c.quarantine.Has(gt):
				why = "quarantined"
			case g.Healthy && !c.recovery.Usable(gt, now):
				why = "recovering"
			}
		}
		if why == "" || !g.Healthy {
			continue
		}
		if out == nil {
			cp := *n
			cp.GPUs = slices.Clone(n.GPUs)
			out = &cp
		}
		out.GPUs[i].Healthy, out.GPUs[i].Reason = false, why
	}
	if out == nil {
		return n
	}
	return out
}

// PodFailed counts a failed GPU pod against its node (state.Options.OnPodFailed).
func (c *Controller) PodFailed(ctx context.Context, node string) {
	now := c.now()
	c.mu.Lock()
	n, in := c.quarantine.Failure(remediation.NodeTarget(node), now, "GPU pods failed")
	c.mu.Unlock()
	if in {
		c.quarantined(ctx, remediation.NodeTarget(node), fmt.Sprintf("%d GPU pods failed within %s", n, c.cfg.QuarantineWindow))
	}
}

// Sync runs one reconcile pass: faults, recovery, quarantine and releases.
func (c *Controller) Sync(ctx context.Context) {
	now := c.now()
	var reapply []string
	var faults []remediation.Fault
	c.mu.Lock()
	c.pass++
	c.mu.Unlock()
	nodes := c.nodes.GetStore().List()
	for _, obj := range nodes {
		node, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		if c.release(ctx, node) {
			reapply = append(reapply, node.Name)
		}
		c.restoreQuarantine(ctx, node, now)
		fs, changed := c.observe(ctx, node, now)
		faults = append(faults, fs...)
		if changed {
			reapply = append(reapply, node.Name)
		}
	}
	c.mu.Lock()
	for _, t := range c.recovery.Settle(now) {
		reapply = append(reapply, t.Node)
	}
	c.planner.Limiter.Forget(now)
	if len(c.gpuHealth) > len(nodes) {
		for name, p := range c.gpuHealth {
			if p.pass != c.pass {
				delete(c.gpuHealth, name) // the node is gone
			}
		}
	}
	c.mu.Unlock()
	slices.Sort(reapply)
	for _, n := range slices.Compact(reapply) {
		c.reapply(n)
	}
	for _, f := range faults {
		c.remediate(ctx, f, now)
	}
	c.forgetGonePods()
	c.metrics.setQuarantined(c.Quarantined())
}

// Quarantined returns the quarantined targets.
func (c *Controller) Quarantined() []remediation.Target {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.quarantine.List()
}

// observe reads one node's health: Ready, Lease and each GPU. It returns
// the open faults and whether usability for placement changed.
func (c *Controller) observe(ctx context.Context, node *corev1.Node, now time.Time) ([]remediation.Fault, bool) {
	type obs struct {
		t      remediation.Target
		ok     bool
		cause  remediation.Cause
		detail string
	}
	nt := remediation.NodeTarget(node.Name)
	gpus := c.gpus(node)
	o := make([]obs, 1, 1+len(gpus))
	o[0] = obs{t: nt, ok: true}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status != corev1.ConditionTrue {
			o[0] = obs{t: nt, cause: remediation.NodeNotReady, detail: "Ready=" + string(cond.Status)}
		}
	}
	if o[0].ok && c.leases != nil {
		if obj, ok, _ := c.leases.GetStore().GetByKey(corev1.NamespaceNodeLease + "/" + node.Name); ok {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Spec.RenewTime != nil {
				if age := now.Sub(l.Spec.RenewTime.Time); age > c.cfg.HeartbeatTimeout {
					o[0] = obs{t: nt, cause: remediation.NodeHeartbeatLost,
						detail: fmt.Sprintf("lease renewed %s ago", age.Round(time.Second))}
				}
			}
		}
	}
	for _, g := range gpus {
		ob := obs{t: remediation.GPUTarget(node.Name, g.uuid), ok: g.healthy}
		if !ob.ok {
			ob.cause, ob.detail = remediation.GPUUnhealthy, g.reason
		}
		o = append(o, ob)
	}
	var faults []remediation.Fault
	var newQuarantine []remediation.Target
	changed := false
	logger := func() klog.Logger { return klog.LoggerWithValues(klog.FromContext(ctx), "node", klog.KObj(node)) }
	c.mu.Lock()
	for _, ob := range o {
		changed = c.recovery.Observe(ob.t, ob.ok, now) || changed
		f, open := c.faults[ob.t]
		switch {
		case ob.ok && open:
			delete(c.faults, ob.t)
			logger().Info("Recovered; takes new work after the quiet period unless quarantined",
				"target", ob.t.String(), "quiet", c.cfg.RecoveryQuiet, "down", now.Sub(f.Since).Round(time.Second))
		case !ob.ok:
			if !open || f.Cause != ob.cause {
				f = remediation.Fault{Target: ob.t, Cause: ob.cause, Detail: ob.detail, Since: now}
				c.faults[ob.t] = f
				c.metrics.Faults.WithLabelValues(string(ob.cause)).Inc()
				logger().Info("Fault", "target", ob.t.String(), "cause", ob.cause, "detail", ob.detail)
				if n, in := c.quarantine.Failure(ob.t, now, f.Message()); in {
					_ = n
					newQuarantine = append(newQuarantine, ob.t)
				}
			}
			faults = append(faults, f)
		}
	}
	c.mu.Unlock()
	for _, t := range newQuarantine {
		c.quarantined(ctx, t, fmt.Sprintf("%d failures within %s", c.cfg.QuarantineThreshold, c.cfg.QuarantineWindow))
		changed = true
	}
	return faults, changed
}

// gpus returns the node's GPUs as its topology annotation states them
// (none without a valid annotation), parsing the annotation only when it
// changed since the last pass.
func (c *Controller) gpus(node *corev1.Node) []gpuObs {
	raw := node.Annotations[c.names.TopologyAnnotation]
	c.mu.Lock()
	p, ok := c.gpuHealth[node.Name]
	c.mu.Unlock()
	if !ok || p.raw != raw {
		p = parsedGPUs{raw: raw}
		if t, err := contract.ParseTopology([]byte(raw)); raw != "" && err == nil {
			for _, g := range t.GPUs {
				p.gpus = append(p.gpus, gpuObs{uuid: g.UUID, healthy: g.Health == contract.Healthy, reason: g.Reason})
			}
		}
	}
	c.mu.Lock()
	p.pass = c.pass
	c.gpuHealth[node.Name] = p
	c.mu.Unlock()
	return p.gpus
}

// podsFor lists the live pods a fault touches: on the node, or holding the GPU.
func (c *Controller) podsFor(f remediation.Fault) []remediation.Pod {
	objs, err := c.pods.GetIndexer().ByIndex(state.NodeIndex, f.Target.Node)
	if err != nil {
		return nil
	}
	var out []remediation.Pod
	for _, obj := range objs {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil || podreq.Terminal(p) {
			continue
		}
		if f.Target.Kind == remediation.KindGPU {
			as, err := podreq.Assignment(p, c.names)
			if err != nil || as == nil || !slices.Contains(as.UUIDs(), f.Target.GPU) {
				continue
			}
		}
		out = append(out, c.toPod(p))
	}
	slices.SortFunc(out, func(a, b remediation.Pod) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

func (c *Controller) toPod(p *corev1.Pod) remediation.Pod {
	return remediation.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName,
		Gang: podreq.GangKey(p, c.names), MarkOnly: p.Labels[c.names.RemediationLabel] == contract.RemediationMarkOnly}
}

func (c *Controller) members(gang string) []remediation.Pod {
	objs, err := c.pods.GetIndexer().ByIndex(state.GangIndex, gang)
	if err != nil {
		return nil
	}
	var out []remediation.Pod
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok && p.DeletionTimestamp == nil && !podreq.Terminal(p) {
			out = append(out, c.toPod(p))
		}
	}
	slices.SortFunc(out, func(a, b remediation.Pod) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// remediate plans and acts on one open fault's pods.
func (c *Controller) remediate(ctx context.Context, f remediation.Fault, now time.Time) {
	c.mu.Lock()
	var todo []remediation.Pod
	for _, p := range c.podsFor(f) {
		if a := c.handled[types.UID(p.UID)]; a != remediation.Delete && a != remediation.Mark {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		c.mu.Unlock()
		return
	}
	members := func(g string) []remediation.Pod {
		var out []remediation.Pod
		for _, m := range c.members(g) {
			if c.handled[types.UID(m.UID)] != remediation.Delete {
				out = append(out, m)
			}
		}
		return out
	}
	decisions := c.planner.Plan(f, todo, members, now)
	c.mu.Unlock()
	for _, d := range decisions {
		c.act(ctx, f, d, now)
	}
}

func (c *Controller) act(ctx context.Context, f remediation.Fault, d remediation.Decision, now time.Time) {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pod", klog.KRef(d.Pod.Namespace, d.Pod.Name),
		"node", d.Pod.Node, "action", d.Action, "cause", f.Cause)
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: d.Pod.Namespace, Name: d.Pod.Name, UID: types.UID(d.Pod.UID)}
	uid := types.UID(d.Pod.UID)
	grace := c.grace(d.Pod)
	if d.DryRun {
		k := d.Pod.UID + "/" + string(d.Action)
		c.mu.Lock()
		seen := c.reported[k]
		c.reported[k] = true
		c.mu.Unlock()
		if seen {
			return
		}
		c.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonDryRun, "Dry run: would %s: %s", verb(d.Action, grace), d.Reason)
		logger.Info("Dry run: remediation not applied", "reason", d.Reason)
		c.metrics.Actions.WithLabelValues(string(c.cfg.Mode), string(d.Action), string(f.Cause)).Inc()
		return
	}
	// Mark: event plus the pod condition (status subresource).
	c.mu.Lock()
	marked := c.handled[uid] == remediation.Deferred
	c.mu.Unlock()
	if !marked {
		c.recorder.Eventf(ref, corev1.EventTypeWarning, ReasonGPUFailure, "%s; %s", d.Reason, verb(d.Action, grace))
		if err := c.setCondition(ctx, d, f, now); err != nil {
			if apierrors.IsNotFound(err) {
				c.done(uid, remediation.Delete)
				return
			}
			logger.Error(err, "Setting the pod's failure condition failed")
		}
	}
	switch d.Action {
	case remediation.Mark:
		c.done(uid, remediation.Mark)
	case remediation.Deferred:
		if !marked {
			c.recorder.Eventf(ref, corev1.EventTypeNormal, ReasonDeferred, "Deletion deferred by the remediation rate limit; retried shortly")
		}
		c.done(uid, remediation.Deferred)
		c.metrics.RateLimited.Inc()
		logger.V(2).Info("Deletion deferred by the rate limit")
		return
	case remediation.Delete:
		secs := int64(grace / time.Second)
		err := c.client.CoreV1().Pods(d.Pod.Namespace).Delete(ctx, d.Pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &secs, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			logger.Error(err, "Deleting the pod failed; retried on the next pass")
			return
		}
		c.done(uid, remediation.Delete)
		c.metrics.FaultToDelete.Observe(c.now().Sub(f.Since).Seconds())
		logger.Info("Pod deleted for a fault", "reason", d.Reason, "grace", grace)
	}
	c.metrics.Actions.WithLabelValues(string(c.cfg.Mode), string(d.Action), string(f.Cause)).Inc()
}

func (c *Controller) done(uid types.UID, a remediation.Action) {
	c.mu.Lock()
	c.handled[uid] = a
	c.mu.Unlock()
}

func verb(a remediation.Action, grace time.Duration) string {
	switch a {
	case remediation.Delete, remediation.Deferred:
		return fmt.Sprintf("deleting the pod (grace %s) so its controller recreates it elsewhere", grace)
	}
	return "marking the pod only (label " + contract.RemediationMarkOnly + " or a mark-only gang member)"
}

// grace is the deletion's grace period: the pod's checkpoint-grace
// annotation (capped), else the configured default.
func (c *Controller) grace(p remediation.Pod) time.Duration {
	g := c.cfg.GracePeriod
	obj, ok, _ := c.pods.GetIndexer().GetByKey(p.Key())
	if !ok {
		return g
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return g
	}
	if s := pod.Annotations[c.names.CheckpointGraceAnnotation]; s != "" {
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			g = min(d, c.cfg.MaxCheckpointGrace)
		}
	}
	return g
}

func (c *Controller) setCondition(ctx context.Context, d remediation.Decision, f remediation.Fault, now time.Time) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodConditionType(c.names.GPUFailureCondition), Status: corev1.ConditionTrue,
		Reason: string(f.Cause), Message: d.Reason, LastTransitionTime: metav1.NewTime(now),
	}}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Pods(d.Pod.Namespace).Patch(ctx, d.Pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	return err
}

// forgetGonePods drops bookkeeping of pods the informer no longer holds.
func (c *Controller) forgetGonePods() {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[types.UID]bool{}
	for _, obj := range c.pods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			live[p.UID] = true
		}
	}
	for uid := range c.handled {
		if !live[uid] {
			delete(c.handled, uid)
		}
	}
	for k := range c.reported {
		if uid, _, _ := strings.Cut(k, "/"); !live[types.UID(uid)] {
			delete(c.reported, k)
		}
	}
}
