// Package dra keeps the extender off nodes whose GPUs Dynamic Resource
// Allocation manages (pkg/dra says which): it watches ResourceSlices and
// DeviceClasses and answers, per node, why the node takes no GPU work from
// Rota. The extender closes such a node in its ledger (topology.Node.Closed),
// so filter, the queue and `kubectl rota why` all give the same reason.
package dra

import (
	"context"
	"fmt"
	"slices"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	pkgdra "github.com/rota-sched/rota/pkg/dra"
)

// GroupVersion is the DRA API the watch reads.
var GroupVersion = resourcev1.SchemeGroupVersion.String()

// nodeIndex indexes ResourceSlices by spec.nodeName.
const nodeIndex = "node"

// Watch answers which nodes DRA manages. Its methods are safe for
// concurrent use.
type Watch struct {
	rules   pkgdra.Rules
	slices  cache.SharedIndexInformer
	classes cache.SharedIndexInformer
	logger  klog.Logger
	opened  func(node string)

	sliceReg, classReg cache.ResourceEventHandlerRegistration

	mu   sync.Mutex
	last map[string]string // node -> reason last reported ("" forgotten)
}

// Served reports whether the API server serves resource.k8s.io/v1 with
// ResourceSlices and DeviceClasses.
func Served(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(GroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovery of %s: %w", GroupVersion, err)
	}
	var have int
	for _, r := range list.APIResources {
		if r.Name == "resourceslices" || r.Name == "deviceclasses" {
			have++
		}
	}
	return have == 2, nil
}

// New wires the watch onto factory's ResourceSlice and DeviceClass
// informers (start the factory afterwards). changed is called, from the
// informers' handlers, with the nodes whose answer may have changed;
// opened, when not nil, by Why with a node DRA no longer manages.
func New(ctx context.Context, factory informers.SharedInformerFactory, rules pkgdra.Rules, changed func(nodes []string), opened func(node string)) (*Watch, error) {
	w := &Watch{rules: rules, logger: klog.FromContext(ctx).WithName("dra"), last: map[string]string{}, opened: opened,
		slices:  factory.Resource().V1().ResourceSlices().Informer(),
		classes: factory.Resource().V1().DeviceClasses().Informer()}
	if err := w.slices.AddIndexers(cache.Indexers{nodeIndex: func(obj any) ([]string, error) {
		if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil {
			return []string{*s.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("ResourceSlice index: %w", err)
	}
	sliceNodes := func(objs ...any) {
		var nodes []string
		for _, obj := range objs {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.NodeName != nil {
				nodes = append(nodes, *s.Spec.NodeName)
			}
		}
		slices.Sort(nodes)
		if nodes = slices.Compact(nodes); len(nodes) > 0 {
			changed(nodes)
		}
	}
	var err error
	if w.sliceReg, err = w.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { sliceNodes(obj) },
		UpdateFunc: func(old, obj any) { sliceNodes(old, obj) },
		DeleteFunc: func(obj any) { sliceNodes(obj) },
	}); err != nil {
		return nil, fmt.Errorf("ResourceSlice handler: %w", err)
	}
	// A class mapping Rota's resource names changes the answer for every
	// node with a slice.
	allNodes := func(any) { changed(w.slices.GetIndexer().ListIndexFuncValues(nodeIndex)) }
	if w.classReg, err = w.classes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: allNodes, UpdateFunc: func(_, obj any) { allNodes(obj) }, DeleteFunc: allNodes,
	}); err != nil {
		return nil, fmt.Errorf("DeviceClass handler: %w", err)
	}
	return w, nil
}

// HasSynced reports whether both informers have listed once and their
// handlers have seen what they listed.
func (w *Watch) HasSynced() bool { return w.sliceReg.HasSynced() && w.classReg.HasSynced() }

// Why says why node (whose GPUs Rota's topology names uuids) takes no GPU
// work from Rota, or "" when DRA does not manage its GPUs. A change of
// answer is logged once.
func (w *Watch) Why(node string, uuids []string) string {
	objs, err := w.slices.GetIndexer().ByIndex(nodeIndex, node)
	if err != nil {
		return ""
	}
	var ss []pkgdra.Slice
	for _, o := range objs {
		if s, ok := pkgdra.FromSlice(o.(*resourcev1.ResourceSlice)); ok {
			ss = append(ss, s)
		}
	}
	var cs []pkgdra.Class
	if len(ss) > 0 {
		for _, o := range w.classes.GetStore().List() {
			cs = append(cs, pkgdra.FromClass(o.(*resourcev1.DeviceClass)))
		}
	}
	why := w.rules.Why(uuids, ss, cs)
	w.mu.Lock()
	prev := w.last[node]
	if why == "" {
		delete(w.last, node)
	} else {
		w.last[node] = why
	}
	w.mu.Unlock()
	switch {
	case why != "" && why != prev:
		w.logger.Info("Node's GPUs are managed by DRA; Rota places no GPU work there", "node", node, "reason", why)
	case why == "" && prev != "":
		w.logger.Info("Node's GPUs are no longer managed by DRA; Rota places GPU work there again", "node", node)
		if w.opened != nil {
			w.opened(node)
		}
	}
	return why
}
