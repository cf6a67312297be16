package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/rota-sched/rota/admission/config"
	"github.com/rota-sched/rota/admission/view"
)

// quotaLoader applies the quota ConfigMap to the view. A document that does
// not parse is logged and counted, and the last good configuration stays.
type quotaLoader struct {
	v      *view.View
	key    string
	source string

	reloads   *prometheus.CounterVec
	lastGood  prometheus.Gauge
	lastError prometheus.Gauge
}

func newQuotaLoader(v *view.View, key, source string, reg prometheus.Registerer) *quotaLoader {
	l := &quotaLoader{
		v: v, key: key, source: source,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_admission_config_reloads_total",
			Help: "Quota configuration loads, by result (success or error). On error the last good configuration stays in force.",
		}, []string{"result"}),
		lastGood: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rota_admission_config_last_success_timestamp_seconds",
			Help: "When the quota configuration was last loaded successfully.",
		}),
		lastError: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rota_admission_config_error",
			Help: "1 while the newest quota ConfigMap is rejected (the previous configuration is in force), else 0.",
		}),
	}
	reg.MustRegister(l.reloads, l.lastGood, l.lastError)
	return l
}

// apply loads cm's document; nil means the ConfigMap was deleted.
func (l *quotaLoader) apply(logger klog.Logger, cm *corev1.ConfigMap) {
	if cm == nil {
		// Keep enforcing the last good configuration: deleting the ConfigMap
		// by mistake must not lift every quota.
		logger.Info("Quota ConfigMap deleted; keeping the last good configuration", "configMap", l.source)
		return
	}
	data, ok := cm.Data[l.key]
	if !ok {
		l.reject(logger, cm, fmt.Errorf("ConfigMap %s has no key %q", l.source, l.key))
		return
	}
	c, err := config.ParseQuota([]byte(data))
	if err != nil {
		l.reject(logger, cm, err)
		return
	}
	l.v.SetConfig(c)
	l.reloads.WithLabelValues("success").Inc()
	l.lastGood.SetToCurrentTime()
	l.lastError.Set(0)
	logger.V(2).Info("Quota configuration loaded", "configMap", l.source, "resourceVersion", cm.ResourceVersion,
		"teams", len(c.Teams), "unknownTeams", c.Policy(), "allowPodTeamOverride", c.AllowPodTeamOverride)
}

func (l *quotaLoader) reject(logger klog.Logger, cm *corev1.ConfigMap, err error) {
	l.reloads.WithLabelValues("error").Inc()
	l.lastError.Set(1)
	_, loaded := l.v.Config()
	logger.Error(err, "Rejected the quota ConfigMap; keeping the last good configuration",
		"configMap", l.source, "resourceVersion", cm.ResourceVersion, "previousLoaded", loaded)
}
