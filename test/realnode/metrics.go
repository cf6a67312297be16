package realnode

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PluginMetric returns the sum of the device plugin's series of metric name
// whose labels include every one of labels (e.g. `result="ok"`), 0 when it
// has none yet. The exposition is read with Prometheus' own parser (expfmt).
func (e *Env) PluginMetric(ctx context.Context, name string, labels ...string) (float64, error) {
	want := map[string]string{}
	for _, l := range labels {
		k, quoted, ok := strings.Cut(l, "=")
		v, err := strconv.Unquote(quoted)
		if !ok || err != nil {
			return 0, fmt.Errorf("label %q: want name=\"value\"", l)
		}
		want[k] = v
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.PluginMetricsURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %s", e.PluginMetricsURL, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("GET %s/metrics: %w", e.PluginMetricsURL, err)
	}
	var sum float64
	for _, m := range families[name].GetMetric() {
		matched := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				matched++
			}
		}
		if matched < len(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		default:
			return 0, fmt.Errorf("metric %s is neither a counter nor a gauge", name)
		}
	}
	return sum, nil
}
