package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/deviceplugin/kubeletstub"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
)

// ContainerAllocation is one Allocate call the kubelet stand-in made.
type ContainerAllocation struct {
	Container string
	Resource  string
	DeviceIDs []string
	// Preferred is what GetPreferredAllocation answered.
	Preferred []string
	// Envs is the container environment from the Allocate response.
	Envs map[string]string
}

// PodAllocation is what the kubelet stand-in did for one pod on a node with
// a device plugin: one entry per container and resource, in kubelet order,
// or the error that made it fail the pod.
type PodAllocation struct {
	Pod        string // namespace/name
	UID        types.UID
	Node       string
	Containers []ContainerAllocation
	Err        string
	At         time.Time
}

// Kubelet plays the kubelet for the simulated nodes: a bound pod that is
// still Pending gets its devices from the node's device plugin through the
// kubeletstub (GetPreferredAllocation, then Allocate, per container and Rota
// resource, init containers first, exactly as the kubelet's device manager
// orders them), and only then is reported Running; a failed Allocate fails
// the pod (phase Failed, reason UnexpectedAdmissionError), as the kubelet's
// admission does. Pods on nodes without a plugin become Running at once. A
// pod that has ended (Succeeded or Failed) has its devices released, as the
// kubelet's device manager does once it is no longer active; a pod being
// deleted is deleted for good and its devices are released.
//
// A Kubelet is safe for concurrent use.
type Kubelet struct {
	client kubernetes.Interface
	names  contract.Names
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	lister func(namespace, name string) (*corev1.Pod, error)

	mu      sync.Mutex
	nodes   map[string]*kubeletNode
	allocs  map[types.UID]*PodAllocation
	devices map[types.UID]heldDevices
	nextIP  netip.Addr
	changed chan struct{}
	wg      sync.WaitGroup
}

type kubeletNode struct {
	stub *kubeletstub.Stub // nil: no device plugin
	// podRes is the node's PodResources API (plugin nodes; else nil). It
	// has its own lock: the plugin lists from inside the calls admit makes
	// holding mu.
	podRes *podResources
	mu     sync.Mutex // the kubelet admits one pod at a time per node
}

type heldDevices struct {
	node      string
	namespace string
	name      string
	ids       map[string][]string // resource -> device IDs
}

func newKubelet(client kubernetes.Interface, names contract.Names) *Kubelet {
	return &Kubelet{client: client, names: names, nodes: map[string]*kubeletNode{},
		allocs: map[types.UID]*PodAllocation{}, devices: map[types.UID]heldDevices{},
		nextIP: netip.MustParseAddr("10.128.0.1"), changed: make(chan struct{})}
}

// addNode makes the stand-in serve node; stub and podRes are nil for nodes
// without a device plugin.
func (k *Kubelet) addNode(name string, stub *kubeletstub.Stub, podRes *podResources) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nodes[name] = &kubeletNode{stub: stub, podRes: podRes}
}

func (k *Kubelet) node(name string) *kubeletNode {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.nodes[name]
}

// Allocation returns what was allocated for the pod with uid.
func (k *Kubelet) Allocation(uid types.UID) (PodAllocation, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.allocs[uid]
	if !ok {
		return PodAllocation{}, false
	}
	c := *a
	c.Containers = slices.Clone(a.Containers)
	return c, true
}

// Allocations returns every pod allocation made so far.
func (k *Kubelet) Allocations() []PodAllocation {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]PodAllocation, 0, len(k.allocs))
	for _, a := range k.allocs {
		out = append(out, *a)
	}
	return out
}

// WaitAllocation waits until the pod with uid was allocated (or failed).
func (k *Kubelet) WaitAllocation(ctx context.Context, uid types.UID) (PodAllocation, error) {
	for {
		k.mu.Lock()
		ch := k.changed
		a, ok := k.allocs[uid]
		var c PodAllocation
		if ok {
			c = *a
		}
		k.mu.Unlock()
		if ok {
			return c, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return PodAllocation{}, fmt.Errorf("no allocation for pod %s: %w", uid, ctx.Err())
		}
	}
}

func (k *Kubelet) record(a *PodAllocation) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.allocs[a.UID] = a
	close(k.changed)
	k.changed = make(chan struct{})
}

// start watches bound pods until ctx ends; it returns once the watch synced.
func (k *Kubelet) start(ctx context.Context) error {
	k.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "rota-e2e-kubelet"})
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	informer := factory.Core().V1().Pods()
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || k.node(pod.Spec.NodeName) == nil {
			return
		}
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodPending || pod.Status.Phase == "" || podreq.Terminal(pod) {
			k.queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.release(pod.UID, pod.Spec.NodeName)
			}
		},
	}); err != nil {
		return err
	}
	lister := informer.Lister()
	k.lister = func(ns, name string) (*corev1.Pod, error) { return lister.Pods(ns).Get(name) }
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			k.queue.ShutDown()
			return fmt.Errorf("kubelet stand-in: %v informer did not sync", typ)
		}
	}
	// One worker: the kubelet admits the pods bound to it one at a time, in
	// the order its watch delivers them. With several, two pods bound to one
	// node in a row could be admitted out of that order, which no kubelet
	// does. (The device plugin tells same-shape pending pods apart by the
	// node's PodResources List, which shows the pod being admitted; without
	// it, it would take them in the order they were bound, and hand each the
	// other's GPU whenever that order is not the admission order.)
	k.wg.Go(func() {
		for k.processNext(ctx) {
		}
	})
	k.wg.Go(func() {
		<-ctx.Done()
		k.queue.ShutDown()
		factory.Shutdown()
	})
	return nil
}

func (k *Kubelet) wait() { k.wg.Wait() }

func (k *Kubelet) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil && ctx.Err() == nil {
		klog.V(2).InfoS("Kubelet stand-in retrying", "pod", key, "err", err)
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *Kubelet) sync(ctx context.Context, key types.NamespacedName) error {
	pod, err := k.lister(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	n := k.node(pod.Spec.NodeName)
	if n == nil {
		return nil
	}
	pods := k.client.CoreV1().Pods(pod.Namespace)
	if pod.DeletionTimestamp != nil {
		k.release(pod.UID, pod.Spec.NodeName)
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64),
			Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	}
	if podreq.Terminal(pod) {
		// The kubelet's device manager frees the devices of a pod whose
		// containers have ended (it is no longer an active pod), before the
		// pod is deleted: the next pod bound there gets them.
		k.release(pod.UID, pod.Spec.NodeName)
		return nil
	}
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return nil
	}
	if n.stub != nil && wantsRota(pod, k.names) {
		if _, done := k.Allocation(pod.UID); !done {
			if err := k.admit(ctx, n, pod); err != nil {
				return k.fail(ctx, pod, err)
			}
		}
		if a, _ := k.Allocation(pod.UID); a.Err != "" {
			return k.fail(ctx, pod, fmt.Errorf("%s", a.Err))
		}
	}
	if n.podRes != nil {
		// An admitted pod is active: PodResources lists it (a Rota pod
		// since its admission began).
		n.podRes.add(pod)
	}
	patch, err := runningPatch(pod, k.podIP(), time.Now())
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// admit allocates the pod's Rota devices container by container. As in the
// kubelet (which adds the pod to its pod manager before admitting it), the
// node's PodResources List shows the pod from the start of its admission,
// with the devices its containers got so far, and not once it failed.
func (k *Kubelet) admit(ctx context.Context, n *kubeletNode, pod *corev1.Pod) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.podRes != nil {
		n.podRes.add(pod)
	}
	a := &PodAllocation{Pod: pod.Namespace + "/" + pod.Name, UID: pod.UID, Node: pod.Spec.NodeName, At: time.Now()}
	// As the kubelet's device manager does before each allocation, free
	// what pods that are no longer active hold: one that ended may not have
	// been synced yet.
	k.releaseInactive(pod.Spec.NodeName)
	held := heldDevices{node: pod.Spec.NodeName, namespace: pod.Namespace, name: pod.Name, ids: map[string][]string{}}
	type req struct {
		c   corev1.Container
		res string
	}
	var reqs []req
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, res := range []string{k.names.GPU, k.names.GPUMemory} {
				reqs = append(reqs, req{c, res})
			}
		}
	}
	var firstErr error
	for _, r := range reqs {
		q, ok := r.c.Resources.Limits[corev1.ResourceName(r.res)]
		if !ok {
			q, ok = r.c.Resources.Requests[corev1.ResourceName(r.res)]
		}
		count, _ := q.AsInt64()
		if !ok || count <= 0 {
			continue
		}
		// A plugin restarting re-registers within a second or two.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = n.stub.WaitFor(wctx, func(s *kubeletstub.Stub) bool { return len(s.Devices(r.res)) > 0 })
		cancel()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := n.stub.Allocate(actx, r.res, int(count), nil)
		cancel()
		if err != nil {
			firstErr = fmt.Errorf("container %s: %w", r.c.Name, err)
			break
		}
		held.ids[r.res] = append(held.ids[r.res], got.DeviceIDs...)
		if n.podRes != nil {
			n.podRes.allocated(pod.UID, r.c.Name, r.res, got.DeviceIDs)
		}
		a.Containers = append(a.Containers, ContainerAllocation{Container: r.c.Name, Resource: r.res,
			DeviceIDs: got.DeviceIDs, Preferred: got.Preferred, Envs: got.Response.GetEnvs()})
	}
	if firstErr != nil {
		for res, ids := range held.ids {
			n.stub.Release(res, ids)
		}
		a.Err = firstErr.Error()
		a.Containers = nil
		if n.podRes != nil {
			// The kubelet fails a pod it cannot admit: no longer active.
			n.podRes.remove(pod.UID)
		}
	} else {
		k.mu.Lock()
		k.devices[pod.UID] = held
		k.mu.Unlock()
	}
	k.record(a)
	return nil
}

// fail reports the pod Failed the way the kubelet does when device
// allocation fails at admission.
func (k *Kubelet) fail(ctx context.Context, pod *corev1.Pod, err error) error {
	patch, jerr := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"phase": corev1.PodFailed, "reason": "UnexpectedAdmissionError",
			"message": "Allocate failed due to " + err.Error()},
	})
	if jerr != nil {
		return jerr
	}
	_, perr := k.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(perr) {
		return nil
	}
	return perr
}

// release frees the pod's devices on its node's stub, and drops the pod
// from the PodResources list of node (the node it is bound to).
// releaseInactive releases the devices of node's pods that have ended, are
// being deleted or are gone.
func (k *Kubelet) releaseInactive(node string) {
	if k.lister == nil {
		return // not started: nothing has been synced
	}
	k.mu.Lock()
	var held []types.UID
	keys := map[types.UID]types.NamespacedName{}
	for uid, h := range k.devices {
		if h.node == node {
			held = append(held, uid)
			keys[uid] = types.NamespacedName{Namespace: h.namespace, Name: h.name}
		}
	}
	k.mu.Unlock()
	for _, uid := range held {
		key := keys[uid]
		p, err := k.lister(key.Namespace, key.Name)
		if (err != nil && apierrors.IsNotFound(err)) || (err == nil && (p.UID != uid || p.DeletionTimestamp != nil || podreq.Terminal(p))) {
			k.release(uid, node)
		}
	}
}

func (k *Kubelet) release(uid types.UID, node string) {
	k.mu.Lock()
	held, ok := k.devices[uid]
	delete(k.devices, uid)
	n := k.nodes[held.node]
	bound := k.nodes[node]
	k.mu.Unlock()
	if bound != nil && bound.podRes != nil {
		bound.podRes.remove(uid)
	}
	if n != nil && n != bound && n.podRes != nil {
		n.podRes.remove(uid)
	}
	if !ok || n == nil || n.stub == nil {
		return
	}
	for res, ids := range held.ids {
		n.stub.Release(res, ids)
	}
}

func (k *Kubelet) podIP() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ip := k.nextIP
	k.nextIP = k.nextIP.Next()
	return ip.String()
}

func wantsRota(pod *corev1.Pod, names contract.Names) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
				for _, r := range []string{names.GPU, names.GPUMemory} {
					if _, ok := rl[corev1.ResourceName(r)]; ok {
						return true
					}
				}
			}
		}
	}
	return false
}

// runningPatch is the status a kubelet reports once the pod's containers
// have started; the pod's UID is a precondition.
func runningPatch(pod *corev1.Pod, podIP string, now time.Time) ([]byte, error) {
	started := metav1.NewTime(now)
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	status := corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{cond(corev1.PodInitialized), cond(corev1.PodReadyToStartContainers),
			cond(corev1.ContainersReady), cond(corev1.PodReady)},
		PodIP:     podIP,
		PodIPs:    []corev1.PodIP{{IP: podIP}},
		StartTime: &started,
	}
	for _, c := range pod.Spec.InitContainers {
		status.InitContainerStatuses = append(status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed",
				StartedAt: started, FinishedAt: started}},
			Ready: true,
		})
	}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			Ready: true, Started: new(true),
		})
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID}, "status": status})
}
