package remediation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/extender/state"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/remediation"
)

// Event reasons.
const (
	ReasonGPUFailure  = "GPUFailure"
	ReasonDryRun      = "RemediationDryRun"
	ReasonDeferred    = "RemediationDeferred"
	ReasonBlocked     = "RemediationBlocked"
	ReasonQuarantined = "Quarantined"
	ReasonReleased    = "QuarantineReleased"
)

// Options configure New.
type Options struct {
	Config Config
	Names  contract.Names
	Client kubernetes.Interface
	// Nodes is extender/state's Node informer, whose transform keeps what
	// the controller reads of a node (the quarantine annotation, the Ready
	// condition); the controller reads its store only.
	Nodes cache.SharedIndexInformer
	// GPUHealth returns a node's GPUs as extender/state parsed them from its
	// topology annotation (state.Cache.GPUHealth).
	GPUHealth func(node string) ([]state.GPUHealth, bool)
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
	cfg       Config
	names     contract.Names
	client    kubernetes.Interface
	nodes     cache.SharedIndexInformer
	gpuHealth func(string) ([]state.GPUHealth, bool)
	leases    cache.SharedIndexInformer
	pods      cache.SharedIndexInformer
	recorder  record.EventRecorder
	metrics   *Metrics
	reapply   func(string)
	now       func() time.Time

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
}

// New wires the controller onto the informers (start them afterwards).
func New(o Options) (*Controller, error) {
	if o.Client == nil || o.Nodes == nil || o.GPUHealth == nil || o.Pods == nil || o.Recorder == nil {
		return nil, errors.New("remediation: client, node and pod informers, GPU health and a recorder are required")
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if err := prepareInformers(o); err != nil {
		return nil, err
	}
	return newController(o), nil
}

func newController(o Options) *Controller {
	c := &Controller{
		cfg: o.Config, names: o.Names, client: o.Client, nodes: o.Nodes, gpuHealth: o.GPUHealth, leases: o.Leases, pods: o.Pods,
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
	return c
}

// prepareInformers sets the Lease informer's transform and the pod node
// index, which client-go allows only before the informers start.
func prepareInformers(o Options) error {
	if o.Leases != nil {
		if err := o.Leases.SetTransform(leaseTransform); err != nil {
			return fmt.Errorf("lease informer transform: %w", err)
		}
	}
	if _, ok := o.Pods.GetIndexer().GetIndexers()[state.NodeIndex]; !ok {
		if err := o.Pods.AddIndexers(cache.Indexers{state.NodeIndex: state.IndexByNode}); err != nil {
			return fmt.Errorf("pod node index: %w", err)
		}
	}
	return nil
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

// Sync runs one reconcile pass: faults, recovery, quarantine and releases.
func (c *Controller) Sync(ctx context.Context) {
	now := c.now()
	reapply, faults := c.observeNodes(ctx, now)
	reapply = append(reapply, c.settle(now)...)
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

// observeNodes acts on every node's release annotation, restores its
// quarantine and observes its health. It returns the nodes whose usability
// for placement changed and the open faults.
func (c *Controller) observeNodes(ctx context.Context, now time.Time) ([]string, []remediation.Fault) {
	var reapply []string
	var faults []remediation.Fault
	for _, obj := range c.nodes.GetStore().List() {
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
	return reapply, faults
}

// settle ends the quiet periods that are over and lets the rate limiter
// forget what it no longer needs; it returns the nodes whose usability for
// placement changed.
func (c *Controller) settle(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, t := range c.recovery.Settle(now) {
		out = append(out, t.Node)
	}
	c.planner.Limiter.Forget(now)
	return out
}

// Quarantined returns the quarantined targets.
func (c *Controller) Quarantined() []remediation.Target {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.quarantine.List()
}
