package cluster

import (
	"context"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// SleepSeconds is how long a pod's containers run when every one of them
// runs `sleep N` (command or args, N in whole seconds), as the evaluation's
// jobs do: the same pod runs for N seconds on a real node with any image
// that has sleep, and on the simulated nodes through a Sleeper. ok is false
// for any other pod.
func SleepSeconds(pod *corev1.Pod) (time.Duration, bool) {
	var longest time.Duration
	for _, c := range pod.Spec.Containers {
		argv := append(append([]string{}, c.Command...), c.Args...)
		if len(argv) != 2 || argv[0] != "sleep" {
			return 0, false
		}
		n, err := strconv.Atoi(argv[1])
		if err != nil || n < 0 {
			return 0, false
		}
		longest = max(longest, time.Duration(n)*time.Second)
	}
	return longest, len(pod.Spec.Containers) > 0
}

// Sleeper plays the containers of pods that sleep (SleepSeconds) on
// simulated nodes: once such a pod runs, it ends Succeeded when its sleep
// is over, counted from its start time, as its containers would exit. Other
// pods, and pods on nodes it does not play, are left alone.
type Sleeper struct {
	client kubernetes.Interface
	// plays reports whether a node's pods are the Sleeper's to end.
	plays func(node string) bool
	now   func() time.Time

	mu     sync.Mutex
	timers map[types.UID]*time.Timer
	wg     sync.WaitGroup
}

// NewSleeper returns a Sleeper for the nodes plays names.
func NewSleeper(client kubernetes.Interface, plays func(node string) bool) *Sleeper {
	return &Sleeper{client: client, plays: plays, now: time.Now, timers: map[types.UID]*time.Timer{}}
}

// Start watches pods until ctx ends; it returns once the watch has synced.
func (s *Sleeper) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactory(s.client, 0)
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.seen(ctx, obj) },
		UpdateFunc: func(_, obj any) { s.seen(ctx, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				s.stop(p.UID)
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return ctx.Err()
		}
	}
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		s.mu.Lock()
		for uid, t := range s.timers {
			if t.Stop() {
				s.wg.Done()
			}
			delete(s.timers, uid)
		}
		s.mu.Unlock()
	}()
	return nil
}

// Wait waits for the pods being ended now.
func (s *Sleeper) Wait() { s.wg.Wait() }

func (s *Sleeper) seen(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil || !s.plays(pod.Spec.NodeName) {
		return
	}
	d, sleeps := SleepSeconds(pod)
	if !sleeps {
		return
	}
	start := s.now()
	if pod.Status.StartTime != nil {
		start = pod.Status.StartTime.Time
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, set := s.timers[pod.UID]; set || ctx.Err() != nil {
		return
	}
	s.wg.Add(1)
	p := pod.DeepCopy()
	uid := pod.UID
	s.timers[uid] = time.AfterFunc(max(start.Add(d).Sub(s.now()), 0), func() {
		defer s.wg.Done()
		// As a kubelet does, it keeps reporting the exit until the API
		// server takes it (it may be restarting); a pod gone or replaced
		// needs no report.
		for try := 0; ; try++ {
			err := FinishPod(ctx, s.client, p, corev1.PodSucceeded)
			if err == nil || ctx.Err() != nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return
			}
			klog.V(2).InfoS("Sleeper could not end a pod; retrying", "pod", klog.KObj(p), "try", try, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(min(time.Duration(try+1)*500*time.Millisecond, 5*time.Second)):
			}
		}
	})
}

func (s *Sleeper) stop(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.timers[uid]; ok {
		if t.Stop() {
			s.wg.Done()
		}
		delete(s.timers, uid)
	}
}
