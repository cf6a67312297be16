package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rota-sched/rota/admission/app"
	"github.com/rota-sched/rota/admission/config"
	dpmetrics "github.com/rota-sched/rota/deviceplugin/metrics"
	extmetrics "github.com/rota-sched/rota/extender/metrics"
	"github.com/rota-sched/rota/extender/queue"
	"github.com/rota-sched/rota/pkg/ledger"
)

var metricName = regexp.MustCompile(`\brota_[a-z0-9_]+`)

// TestAlertAndDashboardMetricsExist fails when the PrometheusRule or the
// Grafana dashboard of the chart names a metric no Rota component
// registers, so alerts and panels cannot silently go blank after a rename.
func TestAlertAndDashboardMetricsExist(t *testing.T) {
	regs := registries(t)
	var used []string
	for _, f := range []string{"templates/monitoring.yaml", "dashboards/rota.json"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "charts", "rota", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricName.FindAllString(string(data), -1) {
			if !slices.Contains(used, m) {
				used = append(used, m)
			}
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d metric names in the chart's monitoring assets: %v", len(used), used)
	}
	for _, name := range used {
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if !registered(regs, base) && !registered(regs, name) {
			t.Errorf("the chart uses metric %s, which no Rota component registers", name)
		}
	}
}

// registered reports whether some registry already holds a metric of that
// name: registering a probe under the same name with another help text is
// refused exactly then.
func registered(regs []*prometheus.Registry, name string) bool {
	for _, r := range regs {
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe " + time.Now().String()})
		if err := r.Register(probe); err != nil {
			return true
		}
		r.Unregister(probe)
	}
	return false
}

func registries(t *testing.T) []*prometheus.Registry {
	t.Helper()
	ext := extmetrics.New(extmetrics.Source{
		Snapshot:     ledger.New().Snapshot,
		Problems:     func() map[string]int64 { return nil },
		GangsWaiting: func() int { return 0 },
		Pending:      func() (int, time.Duration) { return 0, 0 },
	})
	adm := prometheus.NewRegistry()
	cfg := config.Default()
	cfg.LeaderElect = false
	cfg.TLSCertFile, cfg.TLSKeyFile = "/dev/null", "/dev/null"
	if _, err := app.NewForClient(t.Context(), cfg, fake.NewSimpleClientset(), adm); err != nil {
		t.Fatal(err)
	}
	queue.NewMetrics(ext.Registry) // the queue controller registers on the extender's registry
	return []*prometheus.Registry{ext.Registry, adm, dpmetrics.New().Registry()}
}
