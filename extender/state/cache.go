package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/ledger"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/topology"
)

// GangIndex is the pod indexer that maps a gang key (podreq.GangKey:
// "namespace/name", from the gang label or scheduler-plugins' pod-group
// label) to its pods.
const GangIndex = "rota-gang"

// NodeIndex is the pod indexer that maps a node name to the pods bound there.
const NodeIndex = "rota-node"

// IndexByNode is NodeIndex's function.
func IndexByNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// Options configure New.
type Options struct {
	Names contract.Names
	// Records signs the records this part writes and decides which it
	// believes (podreq.Records; the zero value signs and checks nothing).
	Records podreq.Records
	Tiers   topology.Labels
	Ledger  *ledger.Ledger
	// Nodes and Pods are not yet started informers (New sets their transform
	// and indexers, which client-go only allows before the start).
	Nodes cache.SharedIndexInformer
	Pods  cache.SharedIndexInformer
	// OnRelease, when set, is called from the pod handler after a pod that
	// finished or was deleted released its GPUs (the gang's other
	// reservations that the ledger released with it are listed too).
	OnRelease func(released []ledger.Allocation)
	// OnPodFailed, when set, is called with the node of every bound pod
	// asking for Rota resources that ends Failed (alerting on nodes that
	// fail many GPU pods).
	OnPodFailed func(node string)
	// Adjust, when set, may rewrite a node's topology before the ledger
	// takes it (remediation marks quarantined and recovering GPUs
	// unhealthy). It must return a new Node, never modify its argument.
	Adjust func(*topology.Node) *topology.Node
	// OnForgedAssignment, when set, is called (from the informer's handler)
	// for a bound pod whose assignment annotation is not believed (changed
	// after the ledger committed its GPUs, or not signed by Rota), with
	// what the pod's owner should read.
	OnForgedAssignment func(pod *corev1.Pod, message string)
	// MemoryUnitMiB is the cluster's gpu-memory unit; a node whose topology
	// publishes another takes no memory shares (0: not checked).
	MemoryUnitMiB contract.MiB
	// OnNodeProblem, when set, is told of a node problem the cache found
	// (a reason and a message for a Warning event on the Node).
	OnNodeProblem func(node *corev1.Node, reason, message string)
	// Now is the clock (admission holds lapse by it); nil means time.Now.
	Now func() time.Time
	// DefaultRuntime estimates the end of a running pod that declares no
	// maximum runtime, for reservations' expected starts (0: such a pod
	// counts as never ending).
	DefaultRuntime time.Duration
	// Parser, when set, is the process's one parse of pods' requests: the
	// cache tells it when a pod is gone (podreq.Parser.Forget).
	Parser *podreq.Parser
}

// Stats counts the problems the cache met; all counters only grow.
type Stats struct {
	// InvalidTopology counts node topology annotations that did not parse.
	InvalidTopology int64
	// InvalidAssignment counts pod assignment annotations that did not parse
	// or name another node than the pod is bound to.
	InvalidAssignment int64
	// RestoreConflicts counts assignments the ledger refused (GPU taken).
	RestoreConflicts int64
	// Unaccounted counts bound pods that ask for Rota resources but carry no
	// assignment (bound by another scheduler).
	Unaccounted int64
	// ForgedAssignment counts assignment annotations changed on a pod after
	// the extender committed its GPUs: written by someone other than Rota
	// (where the records policy is missing), and not believed.
	ForgedAssignment int64
	// UnitMismatch counts node topologies with another memory unit than
	// the cluster's (each change of such a node's annotation).
	UnitMismatch int64
}

// Cache feeds the ledger from the informers. It is safe for concurrent use.
type Cache struct {
	names       contract.Names
	tiers       topology.Labels
	ledger      *ledger.Ledger
	nodes       cache.SharedIndexInformer
	pods        cache.SharedIndexInformer
	onRelease   func([]ledger.Allocation)
	onPodFailed func(node string)
	onForged    func(pod *corev1.Pod, message string)
	adjust      func(*topology.Node) *topology.Node
	logger      klog.Logger

	nodeReg, podReg cache.ResourceEventHandlerRegistration

	mu      sync.Mutex
	nodeSig map[string]string // node name -> annotation + tier values last applied
	// closed: node -> pod UID -> pod key, the pods whose unsigned
	// assignment closed the node (closeFor).
	closed map[string]map[string]string
	now    func() time.Time
	// extraSynced: see AlsoWaitFor.
	extraSynced []cache.InformerSynced
	// defaultRuntime: see Options.DefaultRuntime.
	defaultRuntime time.Duration

	seenMu sync.Mutex
	seenRV string // highest pod resourceVersion the pod handler has finished with

	invalidTopology, invalidAssignment, restoreConflicts, unaccounted, forgedAssignment, unitMismatch atomic.Int64

	records       podreq.Records // which assignments and admission records to believe
	unitMiB       contract.MiB
	onNodeProblem func(node *corev1.Node, reason, message string)

	health gpuHealth // each node's parsed GPU health (topology.go)

	parser *podreq.Parser // see Options.Parser; may be nil
}

// New wires the handlers onto the informers. Start the informers afterwards;
// Ready reports when the ledger holds everything the initial lists held.
func New(ctx context.Context, o Options) (*Cache, error) {
	if o.Ledger == nil || o.Nodes == nil || o.Pods == nil {
		return nil, errors.New("state: ledger and both informers are required")
	}
	c := &Cache{
		names: o.Names, tiers: o.Tiers, ledger: o.Ledger, nodes: o.Nodes, pods: o.Pods,
		onRelease: o.OnRelease, onPodFailed: o.OnPodFailed, onForged: o.OnForgedAssignment, records: o.Records, unitMiB: o.MemoryUnitMiB, onNodeProblem: o.OnNodeProblem, adjust: o.Adjust, logger: klog.FromContext(ctx), nodeSig: map[string]string{},
		now: o.Now, defaultRuntime: o.DefaultRuntime, parser: o.Parser,
	}
	if c.now == nil {
		c.now = time.Now
	}
	if err := o.Nodes.SetTransform(nodeTransform(o.Names, o.Tiers)); err != nil {
		return nil, fmt.Errorf("node informer transform: %w", err)
	}
	if err := o.Pods.SetTransform(PodTransform(o.Names)); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	if err := o.Pods.AddIndexers(cache.Indexers{GangIndex: c.gangIndex, NodeIndex: IndexByNode}); err != nil {
		return nil, fmt.Errorf("pod gang index: %w", err)
	}
	var err error
	c.nodeReg, err = o.Nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.nodeChanged(obj) },
		UpdateFunc: func(_, obj any) { c.nodeChanged(obj) },
		DeleteFunc: c.nodeDeleted,
	})
	if err != nil {
		return nil, fmt.Errorf("node handler: %w", err)
	}
	c.podReg, err = o.Pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.podChanged(nil, obj) },
		UpdateFunc: c.podChanged,
		DeleteFunc: c.podDeleted,
	})
	if err != nil {
		return nil, fmt.Errorf("pod handler: %w", err)
	}
	return c, nil
}

// Ledger returns the ledger the cache feeds.
func (c *Cache) Ledger() *ledger.Ledger { return c.ledger }

// Ready reports whether both informers have synced and the handlers have
// applied their initial lists to the ledger (the ledger is rebuilt).
func (c *Cache) Ready() bool {
	for _, f := range c.synced() {
		if !f() {
			return false
		}
	}
	return true
}

// WaitReady blocks until Ready or ctx ends; it reports Ready.
func (c *Cache) WaitReady(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), c.synced()...)
}

// AlsoWaitFor makes Ready wait for more sources that adjust nodes (through
// Options.Adjust and Reapply) to have synced too. Call before the
// informers start.
func (c *Cache) AlsoWaitFor(synced ...cache.InformerSynced) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.extraSynced = append(c.extraSynced, synced...)
}

func (c *Cache) synced() []cache.InformerSynced {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]cache.InformerSynced{c.nodes.HasSynced, c.pods.HasSynced, c.nodeReg.HasSynced, c.podReg.HasSynced}, c.extraSynced...)
}

// Stats returns the problem counters.
func (c *Cache) Stats() Stats {
	return Stats{
		InvalidTopology: c.invalidTopology.Load(), InvalidAssignment: c.invalidAssignment.Load(),
		RestoreConflicts: c.restoreConflicts.Load(), Unaccounted: c.unaccounted.Load(),
		ForgedAssignment: c.forgedAssignment.Load(), UnitMismatch: c.unitMismatch.Load(),
	}
}

// Pod returns the cached (trimmed) pod, or false when the informer does not
// hold it (yet).
func (c *Cache) Pod(namespace, name string) (*corev1.Pod, bool) {
	obj, ok, err := c.pods.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

// Node returns the cached (trimmed: nodeTransform) node, or false when the
// informer does not hold it.
func (c *Cache) Node(name string) (*corev1.Node, bool) {
	obj, ok, err := c.nodes.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	node, ok := obj.(*corev1.Node)
	return node, ok
}

// NodeRequests is the CPU (millicores) and memory (MiB) the non-terminal
// pods the informer holds bound to node request (podreq.NodeResources
// each), as kube-scheduler's NodeResourcesFit counts them.
func (c *Cache) NodeRequests(node string) (cpuMilli int64, memoryMiB contract.MiB) {
	objs, err := c.pods.GetIndexer().ByIndex(NodeIndex, node)
	if err != nil {
		return 0, 0
	}
	for _, o := range objs {
		if pod, ok := o.(*corev1.Pod); ok && !podreq.Terminal(pod) {
			cpu, mem := podreq.NodeResources(pod)
			cpuMilli += cpu
			memoryMiB += mem
		}
	}
	return cpuMilli, memoryMiB
}

// GangMembers returns the cached pods of a gang (key "namespace/name"),
// terminal ones excluded.
func (c *Cache) GangMembers(key string) []*corev1.Pod {
	objs, err := c.pods.GetIndexer().ByIndex(GangIndex, key)
	if err != nil {
		return nil
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && !podreq.Terminal(p) {
			out = append(out, p)
		}
	}
	return out
}

// GangKeys returns the gang keys the informer knows, for metrics.
func (c *Cache) GangKeys() []string { return c.pods.GetIndexer().ListIndexFuncValues(GangIndex) }

func (c *Cache) gangIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if k := podreq.GangKey(pod, c.names); k != "" {
		return []string{k}, nil
	}
	return nil, nil
}

// nodeChanged applies a node's topology to the ledger when it changed.
func (c *Cache) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	raw, has := node.Annotations[c.names.TopologyAnnotation]
	cpu, mem := podreq.Allocatable(node)
	sig := ""
	if has {
		var b strings.Builder
		b.WriteString(raw)
		for _, k := range c.tiers.Tiers {
			b.WriteByte(0)
			b.WriteString(node.Labels[k])
		}
		b.WriteByte(0)
		b.WriteString(node.Labels[c.tiers.Pool])
		fmt.Fprintf(&b, "\x00%d\x00%d", cpu, mem)
		sig = b.String()
	}
	c.mu.Lock()
	old, known := c.nodeSig[node.Name]
	if known && old == sig {
		c.mu.Unlock()
		return
	}
	c.nodeSig[node.Name] = sig
	c.mu.Unlock()
	logger := klog.LoggerWithValues(c.logger, "node", klog.KObj(node))
	if !has {
		c.health.forget(node.Name)
		if known && old != "" {
			logger.V(2).Info("Node lost its GPU topology annotation; no new GPU work goes there")
			c.removeNode(node.Name)
		}
		return
	}
	t, err := contract.ParseTopology([]byte(raw))
	if err != nil {
		c.invalidTopology.Add(1)
		logger.Error(err, "Invalid GPU topology annotation; node gets no new GPU work until it is fixed",
			"annotation", c.names.TopologyAnnotation)
		c.health.forget(node.Name)
		c.removeNode(node.Name)
		return
	}
	c.health.set(node.Name, t.GPUs)
	n := topology.New(node.Name, node.Labels, c.tiers, t)
	n.Closed = c.closedWhy(node.Name)
	if c.unitMiB > 0 && n.MemoryUnitMiB != c.unitMiB {
		// Placement converts a share's units by the node's unit, quota by
		// the cluster's: the two would disagree on every share there.
		n.NoShares = fmt.Sprintf("its device plugin counts %s in %s units, the cluster in %s units (memoryUnitMiB); "+
			"set the same --memory-unit-mib on the node's device plugin", c.names.GPUMemory, n.MemoryUnitMiB, c.unitMiB)
		c.unitMismatch.Add(1)
		logger.Error(nil, "Node's memory unit is not the cluster's; it gets no memory shares until they agree",
			"nodeUnit", n.MemoryUnitMiB, "clusterUnit", c.unitMiB)
		if c.onNodeProblem != nil {
			c.onNodeProblem(node, "MemoryUnitMismatch", "Node takes no memory shares: "+n.NoShares)
		}
	}
	// A node that reports no allocatable CPU or memory is not tracked (0).
	n.CPUMilli, n.HostMemoryMiB = cpu, mem
	if c.adjust != nil {
		n = c.adjust(n)
	}
	fresh := !c.ledger.HasNode(node.Name)
	c.ledger.UpsertNode(n)
	if fresh {
		c.accountNode(node.Name)
	}
	logger.V(2).Info("Node GPU topology applied", "gpus", len(n.GPUs), "generation", t.Generation, "tiers", n.Tiers,
		"cpuMilli", n.CPUMilli, "memory", n.HostMemoryMiB)
}

// removeNode forgets a node: its GPU pods' allocations wait as orphans for
// the node's return; its GPU-free pods are dropped, and accounted again
// from the informer if it returns (accountNode).
func (c *Cache) removeNode(name string) {
	for _, a := range c.ledger.RemoveNode(name) {
		if len(a.GPUs) == 0 {
			c.ledger.Release(a.PodUID)
		}
	}
}

// accountNode records the CPU and host memory of the GPU-free pods already
// bound to a node the ledger has just learned (their events came before
// the node's topology).
func (c *Cache) accountNode(name string) {
	objs, err := c.pods.GetIndexer().ByIndex(NodeIndex, name)
	if err != nil {
		return
	}
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		// Pods with an assignment came back with the node (orphans the
		// ledger applied on UpsertNode).
		if cl := podreq.Classify(pod, c.names); cl.Kind.CPUOnly() && cl.Allocation != nil {
			c.accountGPUFree(pod, *cl.Allocation, true)
		}
	}
}

// AccountGPUFree records the CPU and host memory of a pod bound (or being
// bound) to node that holds no GPU through Rota, when the ledger knows the
// node; it reports whether it recorded anything. The ledger never refuses
// CPU on a restore: kube-scheduler and the kubelet decide what fits.
func (c *Cache) AccountGPUFree(pod *corev1.Pod, node string) bool {
	a, ok := podreq.GPUFreeAllocation(pod, node, c.names)
	return ok && c.accountGPUFree(pod, a, false)
}

// accountGPUFree is AccountGPUFree with the pod's record
// (podreq.GPUFreeAllocation); cached says the pod came from the informer's
// store, so its absence there now means it was deleted.
func (c *Cache) accountGPUFree(pod *corev1.Pod, a ledger.Allocation, cached bool) bool {
	if !c.ledger.HasNode(a.Node) {
		return false
	}
	if err := c.ledger.Restore(a); err != nil {
		c.logger.Error(err, "Pod's CPU and memory not accounted", "pod", klog.KObj(pod), "node", a.Node)
		return false
	}
	// A delete that raced with this call has already released the pod:
	// undo (the store drops a pod before its delete handler runs).
	if cur, ok := c.Pod(pod.Namespace, pod.Name); (cached && !ok) || (ok && (cur.UID != pod.UID || podreq.Terminal(cur))) {
		c.ledger.Release(string(pod.UID))
		return false
	}
	return true
}

// Reapply converts the cached node's topology again (Options.Adjust's
// answer changed); a node the informer does not hold is left alone.
func (c *Cache) Reapply(name string) {
	obj, ok, err := c.nodes.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return
	}
	c.mu.Lock()
	delete(c.nodeSig, name)
	c.mu.Unlock()
	c.nodeChanged(obj)
}

func (c *Cache) nodeDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	delete(c.nodeSig, node.Name)
	c.mu.Unlock()
	c.health.forget(node.Name)
	c.removeNode(node.Name)
	c.logger.V(2).Info("Node deleted", "node", klog.KObj(node))
}

// podChanged keeps the pod's committed allocation in step with its
// assignment annotation, binding and phase.
func (c *Cache) podChanged(oldObj, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	defer c.seen(pod.ResourceVersion)
	var old *corev1.Pod
	if oldObj != nil {
		old, _ = oldObj.(*corev1.Pod)
	}
	if old != nil && old.UID != pod.UID {
		c.release(old.UID)
		old = nil
	}
	if old != nil && old.Spec.NodeName == pod.Spec.NodeName && old.Status.Phase == pod.Status.Phase &&
		old.Annotations[c.names.AssignmentAnnotation] == pod.Annotations[c.names.AssignmentAnnotation] &&
		old.Annotations[c.names.AdmissionAnnotation] == pod.Annotations[c.names.AdmissionAnnotation] &&
		old.Annotations[c.names.IdleSinceAnnotation] == pod.Annotations[c.names.IdleSinceAnnotation] {
		return // nothing the ledger reads changed
	}
	cl := podreq.Classify(pod, c.names)
	switch cl.Kind {
	case podreq.KindTerminal:
		c.failed(old, pod)
		c.release(pod.UID)
		return
	case podreq.KindUnbound:
		// The queue controller's admission hold is restored from its
		// record (a restart, or a takeover by another replica).
		c.restoreHold(pod)
		return
	}
	logger := klog.LoggerWithValues(c.logger, "pod", klog.KObj(pod), "node", cl.Node)
	if c.forged(pod, cl, logger) {
		return
	}
	switch cl.Kind {
	case podreq.KindInvalid:
		c.invalidAssignment.Add(1)
		logger.Error(cl.Err, cl.Kind.Message())
		return
	case podreq.KindUnaccounted:
		c.unaccounted.Add(1)
		logger.Info(cl.Kind.Message())
	case podreq.KindWrongNode:
		c.invalidAssignment.Add(1)
		logger.Error(nil, cl.Kind.Message(), "assignedNode", cl.Assignment.Node)
		return
	}
	if cl.Allocation == nil {
		return // a bound pod that takes nothing
	}
	if cl.Kind.CPUOnly() {
		c.accountGPUFree(pod, *cl.Allocation, true)
		return
	}
	if held, ok := c.ledger.Get(string(pod.UID)); (!ok || held.State != ledger.Committed) && !c.records.AssignmentBelieved(pod, *cl.Assignment) {
		c.closeFor(pod, cl, logger)
		return
	}
	a := *cl.Allocation
	c.setEnds(&a, pod)
	a.Stop, _ = podreq.StopFacts(pod, c.names) // an unreadable declaration counts as not made
	if err := c.ledger.Restore(a); err != nil {
		c.restoreConflicts.Add(1)
		logger.Error(err, "GPU assignment conflicts with the ledger; not accounted")
		return
	}
	logger.V(5).Info("Pod GPU assignment restored", "gpus", cl.Assignment.UUIDs())
}

// closeFor closes the node of a bound pod whose assignment Rota did not
// sign (Options.Records), seen before the ledger committed its GPUs (at a
// start, or from a pod bound elsewhere): which GPUs the pod holds is
// unknown, so the node takes no new GPU work until the pod ends. Its CPU
// and memory are still counted.
func (c *Cache) closeFor(pod *corev1.Pod, cl podreq.Classification, logger klog.Logger) {
	c.forgedAssignment.Add(1)
	key := pod.Namespace + "/" + pod.Name
	logger.Error(nil, "GPU assignment not signed by Rota: it was written or changed outside Rota and is not believed; the node takes no new GPU work while the pod runs",
		"annotation", cl.Assignment.UUIDs())
	if a, ok := podreq.GPUFreeAllocation(pod, cl.Node, c.names); ok {
		c.accountGPUFree(pod, a, true)
	}
	c.mu.Lock()
	if c.closed == nil {
		c.closed = map[string]map[string]string{}
	}
	if c.closed[cl.Node] == nil {
		c.closed[cl.Node] = map[string]string{}
	}
	_, seen := c.closed[cl.Node][string(pod.UID)]
	c.closed[cl.Node][string(pod.UID)] = key
	c.mu.Unlock()
	if seen {
		return
	}
	if c.onForged != nil {
		c.onForged(pod, fmt.Sprintf("Annotation %s does not carry Rota's signature for this pod: it was written or changed outside Rota and is not believed; "+
			"node %s takes no new GPU work until the pod ends", c.names.AssignmentAnnotation, cl.Node))
	}
	c.Reapply(cl.Node)
}

// reopen forgets a pod that closed its node (closeFor), and opens the node
// again when no such pod is left on it.
func (c *Cache) reopen(uid string) {
	c.mu.Lock()
	node := ""
	for n, pods := range c.closed {
		if _, ok := pods[uid]; ok {
			delete(pods, uid)
			node = n
			if len(pods) == 0 {
				delete(c.closed, n)
			}
			break
		}
	}
	c.mu.Unlock()
	if node != "" {
		c.Reapply(node)
	}
}

// closedWhy says why a node takes no new GPU work ("" when it does).
func (c *Cache) closedWhy(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	pods := c.closed[node]
	if len(pods) == 0 {
		return ""
	}
	names := slices.Sorted(maps.Values(pods))
	return fmt.Sprintf("it runs %s, whose GPU assignment Rota did not sign (changed outside Rota), so which GPUs are free is not known until it ends",
		strings.Join(names, ", "))
}

// forged reports (and counts, logs and hands to Options.OnForgedAssignment)
// a bound pod whose assignment annotation no longer says what the ledger
// committed for it: changed, garbled or removed. Only the extender writes
// the assignment, once, with the Binding, and the ledger committed those
// GPUs then (or read them at start), so a different record was written by
// someone else. The ledger keeps the GPUs it committed: they are never
// handed to the next pod.
func (c *Cache) forged(pod *corev1.Pod, cl podreq.Classification, logger klog.Logger) bool {
	held, ok := c.ledger.Get(string(pod.UID))
	if !ok || held.State != ledger.Committed || len(held.GPUs) == 0 {
		return false
	}
	if cl.Kind == podreq.KindAllocated && cl.Allocation != nil && SameGPUs(held, *cl.Allocation) {
		return false
	}
	c.forgedAssignment.Add(1)
	var says []string
	if cl.Assignment != nil {
		says = cl.Assignment.UUIDs()
	}
	logger.Error(nil, "GPU assignment annotation changed after the extender committed the pod's GPUs; the change is not Rota's and is not believed",
		"committed", gpuUUIDs(held), "annotation", says, "kind", cl.Kind.String())
	if c.onForged != nil {
		c.onForged(pod, fmt.Sprintf("Annotation %s was changed or removed by someone other than Rota; it is not believed: the pod holds %s on node %s, as the extender committed at bind",
			c.names.AssignmentAnnotation, strings.Join(gpuUUIDs(held), ","), held.Node))
	}
	return true
}

// restoreHold reserves again the room the queue controller held for an
// admitted, unbound pod, as its admission record says, until the hold
// lapses. A hold the ledger cannot take any more (the GPUs went to another
// pod, the node is gone) is dropped: the pod stays admitted and goes where
// it fits.
func (c *Cache) restoreHold(pod *corev1.Pod) {
	adm, unbelieved := c.records.Admission(pod, c.names)
	if unbelieved != nil {
		c.logger.V(2).Info("Admission record not signed by Rota; its hold is not restored", "pod", klog.KObj(pod))
		return
	}
	// A gang's holds are reserved together or not at all (the ledger never
	// holds part of a gang): the queue controller re-holds them as a whole.
	if adm == nil || adm.Hold == nil || adm.Hold.Gang != "" || len(pod.Spec.SchedulingGates) > 0 {
		return
	}
	if _, held := c.ledger.Get(string(pod.UID)); held {
		return
	}
	if !adm.HoldUntil.After(c.now()) {
		return
	}
	a := podreq.ToAllocation(pod, *adm.Hold, c.names)
	a.Ends = podreq.DeclaredEnd(pod, c.names, c.now())
	if err := c.ledger.Reserve(a, adm.HoldUntil); err != nil {
		c.logger.V(2).Info("Admission hold no longer fits; the admitted pod goes where it fits", "pod", klog.KObj(pod),
			"node", adm.Hold.Node, "reason", err.Error())
		return
	}
	c.logger.V(4).Info("Admission hold restored", "pod", klog.KObj(pod), "node", adm.Hold.Node)
}

// setEnds sets when a bound pod is expected to end (reservations plan by
// it): its start plus its declared runtime, else plus DefaultRuntime as an
// estimate. A pod that has not started yet keeps the end it was first given.
func (c *Cache) setEnds(a *ledger.Allocation, pod *corev1.Pod) {
	if pod.Status.StartTime == nil {
		if old, ok := c.ledger.Get(a.PodUID); ok && !old.Ends.IsZero() {
			a.Ends, a.EndsEstimated = old.Ends, old.EndsEstimated
			return
		}
	}
	a.Ends, a.EndsEstimated = podreq.Ends(pod, c.names, c.now(), c.defaultRuntime)
}

func (c *Cache) podDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	defer c.seen(pod.ResourceVersion)
	c.failed(nil, pod)
	c.release(pod.UID)
	if c.parser != nil {
		c.parser.Forget(pod.UID)
	}
}

// seen records that the pod handler has finished with an event at rv.
func (c *Cache) seen(rv string) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if cmp, err := resourceversion.CompareResourceVersion(rv, c.seenRV); c.seenRV == "" || (err == nil && cmp > 0) {
		c.seenRV = rv
	}
}

// PodsSeen reports whether the pod handler has applied every pod event up
// to resourceVersion rv. The watch delivers a resource's events in
// resourceVersion order, so once the handler has finished with any pod at
// rv or later, the ledger holds every binding written before rv. A replica
// taking over the lease writes its own Pod and waits here for that write
// before its first decision (extender/app), so it never decides on a
// ledger that misses the old leader's last binds.
func (c *Cache) PodsSeen(rv string) bool {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	cmp, err := resourceversion.CompareResourceVersion(c.seenRV, rv)
	return err == nil && cmp >= 0
}

// failed reports a GPU pod that turned Failed on its node, once: only
// while the ledger still holds its GPUs (the caller releases them next). A
// pod informer that watches only non-terminal pods sees the turn as a
// delete carrying the Failed pod.
func (c *Cache) failed(old, pod *corev1.Pod) {
	if c.onPodFailed == nil || pod.Status.Phase != corev1.PodFailed || pod.Spec.NodeName == "" ||
		(old != nil && old.Status.Phase == corev1.PodFailed) || !podreq.Wants(pod, c.names) {
		return
	}
	if _, held := c.ledger.Get(string(pod.UID)); !held {
		return
	}
	c.onPodFailed(pod.Spec.NodeName)
}

// Pending counts the pods asking for Rota resources that wait for a node,
// and how long the oldest has waited at now.
func (c *Cache) Pending(now time.Time) (int, time.Duration) {
	n, oldest := 0, time.Duration(0)
	for _, obj := range c.pods.GetStore().List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || podreq.Terminal(pod) || !podreq.Wants(pod, c.names) {
			continue
		}
		n++
		if !pod.CreationTimestamp.IsZero() {
			oldest = max(oldest, now.Sub(pod.CreationTimestamp.Time))
		}
	}
	return n, oldest
}

func (c *Cache) release(uid any) {
	id := fmt.Sprint(uid)
	c.reopen(id)
	a, ok := c.ledger.Release(id)
	if !ok {
		return
	}
	if len(a.GPUs) == 0 {
		return // CPU and memory only: no GPU came free
	}
	c.logger.V(4).Info("Pod released its GPUs", "pod", a.Pod, "node", a.Node, "state", a.State.String())
	if c.onRelease != nil {
		c.onRelease([]ledger.Allocation{a})
	}
}

// SameGPUs reports whether two allocations hold the same GPUs: the same
// node, whole or shared alike, and the same GPUs with the same memory.
func SameGPUs(a, b ledger.Allocation) bool {
	if a.Node != b.Node || a.Whole != b.Whole || len(a.GPUs) != len(b.GPUs) {
		return false
	}
	key := func(x ledger.Allocation) []string {
		out := make([]string, len(x.GPUs))
		for i, g := range x.GPUs {
			out[i] = fmt.Sprintf("%s/%d", g.UUID, g.MemoryMiB)
		}
		slices.Sort(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

func gpuUUIDs(a ledger.Allocation) []string {
	out := make([]string, len(a.GPUs))
	for i, g := range a.GPUs {
		out[i] = g.UUID
	}
	return out
}
