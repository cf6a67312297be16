package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// PodSimulator plays the kubelet for pods bound to a NodeSimulator's nodes:
//   - a bound Pending pod becomes Running, with a pod IP, Ready conditions and
//     a running status for each container, so tests see the phase changes that
//     quota and ledger code count;
//   - a pod being deleted (deletionTimestamp set, as after kubectl delete or a
//     preemption) is deleted for good, as a kubelet does once its containers
//     have stopped. Without this, bound pods would stay Terminating forever.
//
// Pods on nodes the simulator did not create are left alone, so a real kubelet
// can share the cluster. A PodSimulator is safe for concurrent use.
type PodSimulator struct {
	client kubernetes.Interface
	nodes  *NodeSimulator
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	lister func(namespace, name string) (*corev1.Pod, error)

	mu     sync.Mutex
	nextIP netip.Addr
	wg     sync.WaitGroup
}

// NewPodSimulator returns a PodSimulator for the nodes of nodes.
func NewPodSimulator(client kubernetes.Interface, nodes *NodeSimulator) *PodSimulator {
	return &PodSimulator{
		client: client,
		nodes:  nodes,
		nextIP: netip.MustParseAddr("10.128.0.1"),
	}
}

// Start watches bound pods and handles them until ctx ends; Wait waits for
// that to finish. Start returns once the watch has synced.
func (s *PodSimulator) Start(ctx context.Context) error {
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "rota-pod-simulator"})
	factory := informers.NewSharedInformerFactoryWithOptions(s.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	informer := factory.Core().V1().Pods()
	enqueue := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok && s.nodes.Simulated(pod.Spec.NodeName) && needsWork(pod) {
			s.queue.Add(types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		}
	}
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	lister := informer.Lister()
	s.lister = func(ns, name string) (*corev1.Pod, error) { return lister.Pods(ns).Get(name) }

	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			s.queue.ShutDown()
			return fmt.Errorf("pod simulator: %v informer did not sync", typ)
		}
	}
	const workers = 4
	for range workers {
		s.wg.Go(func() {
			for s.processNext(ctx) {
			}
		})
	}
	s.wg.Go(func() {
		<-ctx.Done()
		s.queue.ShutDown()
		factory.Shutdown()
	})
	return nil
}

// Wait blocks until the simulator has stopped after its context ended.
func (s *PodSimulator) Wait() { s.wg.Wait() }

// WaitForPhase polls until pod namespace/name reaches phase, and returns it.
func WaitForPhase(ctx context.Context, client kubernetes.Interface, namespace, name string, phase corev1.PodPhase) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // keep polling through API server restarts
		}
		return pod.Status.Phase == phase, nil
	})
	if err != nil {
		got := "unknown"
		if pod != nil {
			got = string(pod.Status.Phase)
		}
		return pod, fmt.Errorf("pod %s/%s: waiting for phase %s (now %s): %w", namespace, name, phase, got, err)
	}
	return pod, nil
}

func needsWork(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return true
	}
	return pod.Status.Phase == corev1.PodPending || pod.Status.Phase == ""
}

func (s *PodSimulator) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil && ctx.Err() == nil {
		klog.V(2).InfoS("Pod simulator retrying", "pod", key, "err", err)
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
	return true
}

func (s *PodSimulator) sync(ctx context.Context, key types.NamespacedName) error {
	pod, err := s.lister(key.Namespace, key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !s.nodes.Simulated(pod.Spec.NodeName) || !needsWork(pod) {
		return nil
	}
	pods := s.client.CoreV1().Pods(pod.Namespace)
	if pod.DeletionTimestamp != nil {
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone already, or a new pod of the same name
		}
		return err
	}
	patch, err := runningPatch(pod, s.hostIP(pod.Spec.NodeName), s.podIP(), time.Now())
	if err != nil {
		return err
	}
	_, err = pods.Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (s *PodSimulator) hostIP(node string) string {
	ip, _ := s.nodes.hostIP(node)
	return ip.String()
}

func (s *PodSimulator) podIP() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := s.nextIP
	s.nextIP = s.nextIP.Next()
	return ip.String()
}

// runningPatch is the status a kubelet reports once all of pod's containers
// have started. The pod's UID is a precondition of the patch, so a pod
// recreated under the same name is not touched.
func runningPatch(pod *corev1.Pod, hostIP, podIP string, now time.Time) ([]byte, error) {
	started := metav1.NewTime(now)
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	status := corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodInitialized), cond(corev1.PodReadyToStartContainers),
			cond(corev1.ContainersReady), cond(corev1.PodReady),
		},
		HostIP:    hostIP,
		HostIPs:   []corev1.HostIP{{IP: hostIP}},
		PodIP:     podIP,
		PodIPs:    []corev1.PodIP{{IP: podIP}},
		StartTime: &started,
	}
	if pod.Spec.HostNetwork {
		status.PodIP, status.PodIPs = hostIP, []corev1.PodIP{{IP: hostIP}}
	}
	for _, c := range pod.Spec.InitContainers {
		status.InitContainerStatuses = append(status.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Completed", StartedAt: started, FinishedAt: started}},
			Ready: true,
		})
	}
	for _, c := range pod.Spec.Containers {
		status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: "sim://" + string(pod.UID) + "/" + c.Name,
			State:   corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			Ready:   true,
			Started: new(true),
		})
	}
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID},
		"status":   status,
	})
}
