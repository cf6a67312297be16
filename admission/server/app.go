package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/admission/webhook"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/quota"
)

// App is a wired webhook: informers feeding the view, the quota loader,
// leader election and the HTTP routes. Build it with NewApp, then Start it.
// It is safe for concurrent use.
type App struct {
	cfg     config.Config
	names   contract.Names
	client  kubernetes.Interface
	view    *view.View
	handler *webhook.Handler
	mutator *webhook.Handler
	loader  *quotaLoader
	gather  prometheus.Gatherer

	podFactory, clusterFactory, cmFactory informers.SharedInformerFactory
	hasSynced                             []cache.InformerSynced

	synced atomic.Bool
	active atomic.Bool
	// baseCtx carries the logger into informer callbacks, which get no
	// context of their own; set by Start.
	baseCtx atomic.Pointer[context.Context]
}

// NewApp wires the webhook to client and registers its metrics with reg.
func NewApp(cfg config.Config, client kubernetes.Interface, reg *prometheus.Registry) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	names, err := contract.NewNames(cfg.Domain)
	if err != nil {
		return nil, err
	}
	source := fmt.Sprintf("ConfigMap %s/%s key %s", cfg.Namespace, cfg.ConfigMap, cfg.ConfigMapKey)
	if cfg.ConfigMap == "" {
		source = "quota disabled by --config-map=\"\""
	}
	v := view.New(view.Options{Names: names, MemoryUnitMiB: contract.MiB(cfg.MemoryUnitMiB),
		ReservationTTL: cfg.ReservationTTL, ConfigSource: source})
	a := &App{cfg: cfg, names: names, client: client, view: v, gather: reg}
	wo := webhook.Options{Names: names, View: v, Active: a.active.Load,
		Namespaces: namespaceGetter{client}, Metrics: webhook.NewMetrics(reg),
		QueueControllers: cfg.QueueControllerUsers()}
	a.handler, a.mutator = webhook.New(wo), webhook.NewMutating(wo)
	reg.MustRegister(view.NewCollector(v), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rota_admission_active",
		Help: "1 when this replica admits GPU pods (it holds the leader lease, or leader election is off).",
	}, func() float64 {
		if a.active.Load() {
			return 1
		}
		return 0
	}))
	a.loader = newQuotaLoader(v, cfg.ConfigMapKey, source, reg)

	// Pods: only non-terminal ones matter; a pod that finishes leaves the
	// informer as a delete.
	a.podFactory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)
		}))
	a.clusterFactory = informers.NewSharedInformerFactory(client, 0)
	pods := a.podFactory.Core().V1().Pods().Informer()
	if err := pods.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	namespaces := a.clusterFactory.Core().V1().Namespaces().Informer()
	nodes := a.clusterFactory.Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	a.hasSynced = []cache.InformerSynced{pods.HasSynced, namespaces.HasSynced, nodes.HasSynced}
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{pods, handler(v.UpsertPod, v.DeletePod)},
		{namespaces, handler(v.UpsertNamespace, func(_, name string) { v.DeleteNamespace(name) })},
		{nodes, handler(func(n *corev1.Node) { a.upsertNode(n) }, func(_, name string) { v.DeleteNode(name) })},
	} {
		if _, err := reg.inf.AddEventHandler(reg.h); err != nil {
			return nil, err
		}
	}

	if cfg.ConfigMap == "" {
		v.SetConfig(quota.Config{UnknownTeams: quota.UnlimitedUnknown})
		return a, nil
	}
	a.cmFactory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.ConfigMap).String()
		}))
	cms := a.cmFactory.Core().V1().ConfigMaps().Informer()
	a.hasSynced = append(a.hasSynced, cms.HasSynced)
	if _, err := cms.AddEventHandler(handler(func(cm *corev1.ConfigMap) {
		if cm.Name == cfg.ConfigMap { // the fake clientset ignores field selectors
			a.loader.apply(a.ctx(), cm)
		}
	}, func(_, name string) {
		if name == cfg.ConfigMap {
			a.loader.apply(a.ctx(), nil)
		}
	})); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *App) ctx() context.Context {
	if c := a.baseCtx.Load(); c != nil {
		return *c
	}
	return context.Background()
}

func (a *App) upsertNode(n *corev1.Node) {
	if err := a.view.UpsertNode(n); err != nil {
		klog.FromContext(a.ctx()).Error(err, "Ignoring the node's GPU topology annotation", "node", klog.KObj(n))
	}
}

// View is the app's usage view (for tests and the benchmark).
func (a *App) View() *view.View { return a.view }

// Start starts the informers, leader election and the reservation timer;
// they stop when ctx ends.
func (a *App) Start(ctx context.Context) {
	logger := klog.FromContext(ctx)
	a.baseCtx.Store(&ctx)
	a.podFactory.Start(ctx.Done())
	a.clusterFactory.Start(ctx.Done())
	if a.cmFactory != nil {
		a.cmFactory.Start(ctx.Done())
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), a.hasSynced...) {
			a.synced.Store(true)
			logger.Info("Informers synced")
		}
	}()
	if a.cfg.LeaderElect {
		go a.elect(ctx)
	} else {
		a.active.Store(true)
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				a.view.Expire()
			}
		}
	}()
}

// elect contends for the lease until ctx ends.
func (a *App) elect(ctx context.Context) {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.cfg.Namespace, Name: a.cfg.LeaseName},
		Client:     a.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   a.cfg.LeaseDuration,
			RenewDeadline:   a.cfg.RenewDeadline,
			RetryPeriod:     a.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            a.cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					a.active.Store(true)
					logger.Info("Became the active replica", "lease", klog.KRef(a.cfg.Namespace, a.cfg.LeaseName))
				},
				OnStoppedLeading: func() {
					a.active.Store(false)
					logger.Info("Stopped being the active replica", "lease", klog.KRef(a.cfg.Namespace, a.cfg.LeaseName))
				},
				OnNewLeader: func(id string) {
					logger.V(2).Info("Leader", "identity", id)
				},
			},
		})
		if err != nil {
			logger.Error(err, "Leader election is misconfigured; this replica stays standby")
			return
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
}

// Ready says why the app cannot serve yet, or nil: informers synced, the
// quota configuration loaded, and this replica active.
func (a *App) Ready() error {
	var errs []error
	if !a.synced.Load() {
		errs = append(errs, errors.New("informers have not synced"))
	}
	if _, ok := a.view.Config(); !ok {
		errs = append(errs, fmt.Errorf("no valid quota configuration loaded from ConfigMap %s/%s key %s yet",
			a.cfg.Namespace, a.cfg.ConfigMap, a.cfg.ConfigMapKey))
	}
	if !a.active.Load() {
		errs = append(errs, errors.New("standby: another replica holds the leader lease"))
	}
	return errors.Join(errs...)
}

// Routes returns the HTTP routes: POST /validate (the validating webhook),
// POST /mutate (the mutating webhook: the queue gate), /healthz, /readyz
// and /metrics.
func (a *App) Routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/validate", a.handler)
	mux.Handle("/mutate", a.mutator)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.gather, promhttp.HandlerOpts{}))
	return mux
}

// handler adapts typed upsert/delete functions to informer callbacks,
// unwrapping tombstones and ignoring objects of other types.
func handler[T metav1.Object](upsert func(T), del func(namespace, name string)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				del(o.GetNamespace(), o.GetName())
			}
		},
	}
}

func stripManagedFields(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// namespaceGetter reads namespaces for the webhook.
type namespaceGetter struct{ client kubernetes.Interface }

func (g namespaceGetter) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return g.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
}
