package state

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/topology"
)

// GPUHealth is one GPU's health as its node's topology annotation states it.
type GPUHealth struct {
	UUID    string
	Healthy bool
	// Reason says why the GPU is unhealthy, e.g. "XID 79".
	Reason string
}

// GPUHealth returns the node's GPUs, in annotation order, as the node
// handler last parsed them from its topology annotation, and whether the
// node has a valid one (none, false otherwise). The node handler parses an
// annotation once per change, for placement and remediation alike. The
// slice is shared: callers must not modify it.
func (c *Cache) GPUHealth(node string) ([]GPUHealth, bool) { return c.health.get(node) }

// gpuHealth is each node's GPU health as nodeChanged last parsed it. The
// zero value is ready to use; it is safe for concurrent use.
type gpuHealth struct {
	mu     sync.RWMutex
	byNode map[string][]GPUHealth
}

func (h *gpuHealth) get(node string) ([]GPUHealth, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	gs, ok := h.byNode[node]
	return gs, ok
}

// set records the GPUs of a node's valid topology annotation.
func (h *gpuHealth) set(node string, gpus []contract.TopologyGPU) {
	gs := make([]GPUHealth, len(gpus))
	for i, g := range gpus {
		gs[i] = GPUHealth{UUID: g.UUID, Healthy: g.Health == contract.Healthy, Reason: g.Reason}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byNode == nil {
		h.byNode = map[string][]GPUHealth{}
	}
	h.byNode[node] = gs
}

// forget drops a node that is gone or has no valid topology annotation.
func (h *gpuHealth) forget(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byNode, node)
}

// nodeTransform is the Node informer's transform: NodeTransform, plus what
// extender/remediation reads from the same informer (it has none of its
// own): the quarantine annotation and the Ready condition's status.
func nodeTransform(names contract.Names, tiers topology.Labels) cache.TransformFunc {
	trim := NodeTransform(names, tiers)
	return func(obj any) (any, error) {
		full, ok := obj.(*corev1.Node)
		out, err := trim(obj)
		if !ok || err != nil {
			return out, err
		}
		node := out.(*corev1.Node)
		if v, ok := full.Annotations[names.QuarantineAnnotation]; ok {
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			node.Annotations[names.QuarantineAnnotation] = v
		}
		for _, cond := range full.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				node.Status.Conditions = []corev1.NodeCondition{{Type: cond.Type, Status: cond.Status}}
			}
		}
		return node, nil
	}
}
