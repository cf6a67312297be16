package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Samples is one scrape of a Prometheus text endpoint: each sample's name
// with its labels as the text format writes them, in the order written
// (`rota_extender_allocations{state="reserved"}`; a histogram's
// `..._bucket{verb="bind",le="0.005"}`, `..._sum{verb="bind"}` and
// `..._count{verb="bind"}`), to its value.
type Samples map[string]float64

// Sum adds the samples whose name, before any label, is name.
func (m Samples) Sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// ExtenderMetrics scrapes rota-extender's /metrics.
func (e *Env) ExtenderMetrics(ctx context.Context) (Samples, error) {
	return Scrape(ctx, e.ExtenderURL+"/metrics")
}

// Scrape reads a Prometheus text endpoint (bounded to 5 s).
func Scrape(ctx context.Context, url string) (Samples, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseSamples(resp.Body)
}

// ParseSamples reads the Prometheus text format with Prometheus' own parser
// (expfmt); a malformed exposition is an error.
func ParseSamples(r io.Reader) (Samples, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing metrics: %w", err)
	}
	out := Samples{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := m.GetLabel()
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[sampleKey(name, labels)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[sampleKey(name, labels)] = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				out[sampleKey(name, labels)] = m.GetUntyped().GetValue()
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					out[sampleKey(name, labels, "quantile", formatFloat(q.GetQuantile()))] = q.GetValue()
				}
				out[sampleKey(name+"_sum", labels)] = s.GetSampleSum()
				out[sampleKey(name+"_count", labels)] = float64(s.GetSampleCount())
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out[sampleKey(name+"_bucket", labels, "le", formatFloat(b.GetUpperBound()))] = float64(b.GetCumulativeCount())
				}
				out[sampleKey(name+"_sum", labels)] = h.GetSampleSum()
				out[sampleKey(name+"_count", labels)] = float64(h.GetSampleCount())
			}
		}
	}
	return out, nil
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)

// sampleKey writes name{k="v",...} as the text format does, extra last
// (a bucket's le, a quantile).
func sampleKey(name string, labels []*dto.LabelPair, extra ...string) string {
	if len(labels) == 0 && len(extra) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	sep := ""
	pair := func(k, v string) {
		b.WriteString(sep)
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(v))
		b.WriteByte('"')
		sep = ","
	}
	for _, l := range labels {
		pair(l.GetName(), l.GetValue())
	}
	for i := 0; i+1 < len(extra); i += 2 {
		pair(extra[i], extra[i+1])
	}
	b.WriteByte('}')
	return b.String()
}

// formatFloat writes a bucket bound or quantile as the text format does.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
