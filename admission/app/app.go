package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	gocache "github.com/patrickmn/go-cache"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/admission/view"
	"github.com/rota-sched/rota/admission/webhook"
	"github.com/rota-sched/rota/internal/profiling"
	"github.com/rota-sched/rota/pkg/contract"
	"github.com/rota-sched/rota/pkg/podreq"
	"github.com/rota-sched/rota/pkg/quota"
	"github.com/rota-sched/rota/pkg/version"
)

// App is rota-admission, wired: the informers that feed the usage view,
// the quota loader, the two webhooks, leader election and the HTTPS
// server. Build it with New (or NewForClient), then Run it. It is safe for
// concurrent use.
type App struct {
	cfg    config.Config
	client kubernetes.Interface
	reg    *prometheus.Registry
	view   *view.View
	// validating and mutating serve /validate and /mutate.
	validating, mutating *webhook.Handler
	// active is set while this replica admits GPU pods: it holds the
	// lease, or leader election is off.
	active *atomic.Bool

	factories []informers.SharedInformerFactory
	hasSynced []cache.InformerSynced

	// ready, when set (by tests), receives the address Run listens on.
	ready chan<- net.Addr
}

// New wires rota-admission from cfg: an API client from cfg.Kubeconfig
// (in-cluster without one) and a metrics registry with the Go and process
// collectors, then everything NewForClient wires. It contacts nothing; Run
// starts everything. ctx gives the informer handlers their logger.
func New(ctx context.Context, cfg config.Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	restCfg.QPS, restCfg.Burst = cfg.KubeQPS, cfg.KubeBurst
	restCfg.UserAgent = "rota-admission"
	// Protobuf, as kube-scheduler's client: the API server then encodes the
	// pod watch events this informer gets in the encoding it makes anyway.
	restCfg.ContentType = runtime.ContentTypeProtobuf
	restCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("building the API client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bi := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rota_build_info",
		Help: "1, labelled with the binary, its version, VCS revision and Go version."}, version.LabelNames)
	bi.With(version.Labels("rota-admission")).Set(1)
	reg.MustRegister(bi)
	// JobSets are read as JSON: their Go types are not Rota's to import.
	dynCfg := rest.CopyConfig(restCfg)
	dynCfg.ContentType, dynCfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	dyn, err := dynamic.NewForConfig(dynCfg)
	if err != nil {
		return nil, fmt.Errorf("building the dynamic API client: %w", err)
	}
	return newForClients(ctx, cfg, client, dyn, reg)
}

// NewForClient wires rota-admission to client, registering its metrics
// with reg (which /metrics serves): the usage view, the webhooks, the quota
// loader and the informers that feed them (pods, namespaces, nodes, and
// the quota ConfigMap unless cfg.ConfigMap is empty).
// It reads no JobSets (New does).
func NewForClient(ctx context.Context, cfg config.Config, client kubernetes.Interface, reg *prometheus.Registry) (*App, error) {
	return newForClients(ctx, cfg, client, nil, reg)
}

// newForClients is NewForClient with a dynamic client for JobSets (nil:
// none are read).
func newForClients(ctx context.Context, cfg config.Config, client kubernetes.Interface, dyn dynamic.Interface, reg *prometheus.Registry) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx)
	names, err := contract.NewNames(cfg.Domain)
	if err != nil {
		return nil, err
	}
	source := fmt.Sprintf("ConfigMap %s/%s key %s", cfg.Namespace, cfg.ConfigMap, cfg.ConfigMapKey)
	if cfg.ConfigMap == "" {
		source = "quota disabled by --quota-config-map=\"\""
	}
	v := view.New(view.Options{Names: names, MemoryUnitMiB: contract.MiB(cfg.MemoryUnitMiB),
		InFlightTTL: cfg.InFlightTTL, ConfigSource: source, SuspendJobsEverywhere: cfg.SuspendJobs == config.SuspendJobsAll})
	active := new(atomic.Bool)
	reads := newWorkloadReads(client, dyn, names)
	wo := webhook.Options{Names: names, View: v, Active: active.Load,
		Namespaces: namespaceGetter{client}, Jobs: reads, PodGroups: reads, Metrics: webhook.NewMetrics(reg),
		QueueControllers: cfg.QueueControllerUsers()}
	reg.MustRegister(view.NewCollector(v), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rota_admission_active",
		Help: "1 when this replica admits GPU pods (it holds the leader lease, or leader election is off).",
	}, func() float64 {
		if active.Load() {
			return 1
		}
		return 0
	}))
	loader := newQuotaLoader(v, cfg.ConfigMapKey, source, reg)
	if dyn != nil {
		wo.JobSets, wo.LeaderWorkerSets, wo.TrainingJobs = reads, reads, reads
	}
	a := &App{cfg: cfg, client: client, reg: reg, view: v,
		validating: webhook.New(wo), mutating: webhook.NewMutating(wo), active: active}

	// Pods: only non-terminal ones matter; a pod that finishes leaves the
	// informer as a delete.
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "status.phase!=" + string(corev1.PodSucceeded) + ",status.phase!=" + string(corev1.PodFailed)
		}))
	clusterFactory := informers.NewSharedInformerFactory(client, 0)
	a.factories = []informers.SharedInformerFactory{podFactory, clusterFactory}
	pods := podFactory.Core().V1().Pods().Informer()
	if err := pods.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	namespaces := clusterFactory.Core().V1().Namespaces().Informer()
	nodes := clusterFactory.Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	upsertNode := func(n *corev1.Node) {
		if err := v.UpsertNode(n); err != nil {
			logger.Error(err, "Ignoring the node's GPU topology annotation", "node", klog.KObj(n))
		}
	}
	// Ready waits on each handler's registration, not the informer: an
	// informer has synced once its store holds the initial list, its
	// handlers (the view that quota and "can never run" read) only once they
	// have been handed all of it.
	for _, reg := range []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{pods, handler(v.UpsertPod, v.DeletePod)},
		{namespaces, handler(v.UpsertNamespace, func(_, name string) { v.DeleteNamespace(name) })},
		{nodes, handler(upsertNode, func(_, name string) { v.DeleteNode(name) })},
	} {
		r, err := reg.inf.AddEventHandler(reg.h)
		if err != nil {
			return nil, err
		}
		a.hasSynced = append(a.hasSynced, r.HasSynced)
	}

	if cfg.ConfigMap == "" {
		v.SetConfig(quota.Config{UnknownTeams: quota.UnlimitedUnknown})
		return a, nil
	}
	cmFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.ConfigMap).String()
		}))
	a.factories = append(a.factories, cmFactory)
	cms := cmFactory.Core().V1().ConfigMaps().Informer()
	r, err := cms.AddEventHandler(handler(func(cm *corev1.ConfigMap) {
		if cm.Name == cfg.ConfigMap { // the fake clientset ignores field selectors
			loader.apply(logger, cm)
		}
	}, func(_, name string) {
		if name == cfg.ConfigMap {
			loader.apply(logger, nil)
		}
	}))
	if err != nil {
		return nil, err
	}
	a.hasSynced = append(a.hasSynced, r.HasSynced)
	return a, nil
}

// View is the app's usage view (for tests and the benchmark).
func (a *App) View() *view.View { return a.view }

// informersSynced reports whether every informer's handlers have been
// handed its initial list.
func (a *App) informersSynced() bool {
	for _, s := range a.hasSynced {
		if !s() {
			return false
		}
	}
	return true
}

// Ready says why the app cannot serve yet, or nil: informers synced, the
// quota configuration loaded, and this replica active.
func (a *App) Ready() error {
	var errs []error
	if !a.informersSynced() {
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
// POST /mutate (the mutating webhook: the queue gate), /healthz, /readyz,
// /metrics and, with cfg.Profiling, /debug/pprof/.
func (a *App) Routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/validate", a.validating)
	mux.Handle("/mutate", a.mutating)
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
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	if a.cfg.Profiling {
		mux.Handle("GET "+profiling.Prefix, profiling.Handler())
	}
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

// workloadReads reads, for the mutating webhook, the workloads whose shape
// names their pods' gang: Jobs and PodGroups with the typed client;
// JobSets, LeaderWorkerSets and training operators' jobs with the dynamic
// client, as JSON (Rota does not import their modules), parsed by
// pkg/podreq. A workload's pods are created together, so one read serves
// them all: reads are kept workloadCacheTTL, by kind, namespace, name and
// UID.
type workloadReads struct {
	client kubernetes.Interface
	dyn    dynamic.Interface // nil: JobSets, LeaderWorkerSets and training jobs are not read
	names  contract.Names
	cache  *gocache.Cache
}

const workloadCacheTTL = 30 * time.Second

func newWorkloadReads(client kubernetes.Interface, dyn dynamic.Interface, names contract.Names) *workloadReads {
	return &workloadReads{client: client, dyn: dyn, names: names, cache: gocache.New(workloadCacheTTL, time.Minute)}
}

// readKept returns what fetch makes of object name of resource gr, kept.
// With uid set, another object of that name is not found: the one the
// caller's owner reference names is gone.
func readKept[T any](ctx context.Context, r *workloadReads, gr schema.GroupResource, namespace, name, uid string,
	fetch func(context.Context) (T, metav1.Object, error)) (T, error) {
	var zero T
	key := gr.String() + "/" + namespace + "/" + name + "/" + uid
	if v, ok := r.cache.Get(key); ok {
		return v.(T), nil
	}
	v, obj, err := fetch(ctx)
	if err != nil {
		return zero, err
	}
	if uid != "" && string(obj.GetUID()) != uid {
		return zero, apierrors.NewNotFound(gr, name)
	}
	r.cache.SetDefault(key, v)
	return v, nil
}

// readCustom reads a custom resource with the dynamic client and parses it.
func readCustom[T any](ctx context.Context, r *workloadReads, gvr schema.GroupVersionResource, namespace, name, uid string,
	parse func([]byte, contract.Names) (T, error)) (T, error) {
	return readKept(ctx, r, gvr.GroupResource(), namespace, name, uid, func(ctx context.Context) (T, metav1.Object, error) {
		var zero T
		obj, err := r.dyn.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return zero, nil, err
		}
		raw, err := obj.MarshalJSON()
		if err != nil {
			return zero, nil, err
		}
		v, err := parse(raw, r.names)
		return v, obj, err
	})
}

func (r *workloadReads) Job(ctx context.Context, namespace, name, uid string) (*batchv1.Job, error) {
	return readKept(ctx, r, batchv1.Resource("jobs"), namespace, name, uid, func(ctx context.Context) (*batchv1.Job, metav1.Object, error) {
		j, err := r.client.BatchV1().Jobs(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		j.ManagedFields = nil
		return j, j, nil
	})
}

// PodGroupGang reads a PodGroup of Kubernetes' gang API
// (scheduling.k8s.io/v1beta1, served with the GenericWorkload feature
// gate): its gang policy's minCount, nil for another policy.
func (r *workloadReads) PodGroupGang(ctx context.Context, namespace, name string) (*int32, error) {
	return readKept(ctx, r, schedulingv1beta1.Resource("podgroups"), namespace, name, "", func(ctx context.Context) (*int32, metav1.Object, error) {
		pg, err := r.client.SchedulingV1beta1().PodGroups(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		if gang := pg.Spec.SchedulingPolicy.Gang; gang != nil {
			n := gang.MinCount
			return &n, pg, nil
		}
		return nil, pg, nil
	})
}

func (r *workloadReads) JobSet(ctx context.Context, namespace, name, uid string) (podreq.JobSetShape, error) {
	return readCustom(ctx, r, jobSetsGVR, namespace, name, uid, podreq.ParseJobSet)
}

func (r *workloadReads) LeaderWorkerSet(ctx context.Context, namespace, name string) (podreq.LWSShape, error) {
	return readCustom(ctx, r, lwsGVR, namespace, name, "", podreq.ParseLWS)
}

// TrainingJob reads a training operator's job by its pods' controller
// reference: the resource is the kind's plural, at the reference's
// version.
func (r *workloadReads) TrainingJob(ctx context.Context, namespace string, ref metav1.OwnerReference) (podreq.TrainingJobShape, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return podreq.TrainingJobShape{}, err
	}
	return readCustom(ctx, r, gv.WithResource(strings.ToLower(ref.Kind)+"s"), namespace, ref.Name, string(ref.UID),
		func(raw []byte, n contract.Names) (podreq.TrainingJobShape, error) {
			return podreq.ParseTrainingJob(ref.Kind, raw, n)
		})
}

var (
	jobSetsGVR = schema.GroupVersionResource{Group: podreq.JobSetGroup, Version: "v1alpha2", Resource: "jobsets"}
	lwsGVR     = schema.GroupVersionResource{Group: podreq.LWSGroup, Version: "v1", Resource: "leaderworkersets"}
)

// namespaceGetter reads namespaces for the webhook.
type namespaceGetter struct{ client kubernetes.Interface }

func (g namespaceGetter) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return g.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}
