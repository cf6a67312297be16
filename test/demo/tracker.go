package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/rota-sched/rota/test/e2e/harness"
)

// tracker records when the demo created each pod and when a pod watch
// first showed it bound, for the wait statistics. Safe for concurrent use.
type tracker struct {
	mu        sync.Mutex
	createdAt map[string]time.Time
	boundAt   map[string]time.Time
	gone      map[string]bool
}

func startTracker(ctx context.Context, env *harness.Env) (*tracker, error) {
	t := &tracker{createdAt: map[string]time.Time{}, boundAt: map[string]time.Time{}, gone: map[string]bool{}}
	factory := informers.NewSharedInformerFactory(env.Client, 0)
	inf := factory.Core().V1().Pods().Informer()
	see := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		key := p.Namespace + "/" + p.Name
		t.mu.Lock()
		if _, seen := t.boundAt[key]; !seen {
			t.boundAt[key] = time.Now()
		}
		t.mu.Unlock()
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("pod watch %v did not sync", typ)
		}
	}
	return t, nil
}

func (t *tracker) created(ns, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.createdAt[ns+"/"+name] = time.Now()
}

func (t *tracker) deleted(ns, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone[ns+"/"+name] = true
}

func (t *tracker) counts() (created, deleted int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.createdAt), len(t.gone)
}

// waits returns the create-to-bound times of the pods ever bound, and how
// many of the created pods were ever bound.
func (t *tracker) waits() (ws []time.Duration, placed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.createdAt {
		if b, ok := t.boundAt[k]; ok {
			ws = append(ws, max(b.Sub(c), 0))
			placed++
		}
	}
	return ws, placed
}
