package queue

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/pkg/quota"
)

// QuotaSource keeps the quota configuration from its ConfigMap (the one
// rota-admission reads), parsed with the same strict parser. An edit that
// does not parse is logged and the last good configuration stays. Safe for
// concurrent use.
type QuotaSource struct {
	key     string
	logger  klog.Logger
	Factory informers.SharedInformerFactory

	mu      sync.Mutex
	cfg     *quota.Config
	invalid bool // the ConfigMap exists and no version of it parsed yet
}

// NewQuotaSource watches ConfigMap namespace/name (only that one object).
// Start Factory before reading.
func NewQuotaSource(logger klog.Logger, client kubernetes.Interface, namespace, name, key string) (*QuotaSource, error) {
	q := &QuotaSource{key: key, logger: logger}
	q.Factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	_, err := q.Factory.Core().V1().ConfigMaps().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    q.changed,
		UpdateFunc: func(_, obj any) { q.changed(obj) },
	})
	return q, err
}

func (q *QuotaSource) changed(obj any) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return
	}
	cfg, err := quota.ParseYAML([]byte(cm.Data[q.key]))
	if err != nil {
		q.logger.Error(err, "Quota configuration does not parse; the queue keeps the last good one", "configMap", klog.KObj(cm), "key", q.key)
		q.mu.Lock()
		q.invalid = q.cfg == nil
		q.mu.Unlock()
		return
	}
	q.mu.Lock()
	q.cfg, q.invalid = &cfg, false
	q.mu.Unlock()
	q.logger.V(2).Info("Quota configuration loaded", "configMap", klog.KObj(cm), "teams", len(cfg.Teams))
}

// Current returns the configuration in force: nil when there is no
// ConfigMap (every team is admitted without quota, as rota-admission does);
// ok is false while the ConfigMap exists but no version of it has parsed
// (nothing is admitted then, rather than admitted without its quota).
func (q *QuotaSource) Current() (cfg *quota.Config, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cfg, !q.invalid
}
