package harness

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// TestParseSamples parses what client_golang's own encoder writes (as
// rota-extender's /metrics does) into the keys the scenarios look up.
func TestParseSamples(t *testing.T) {
	reg := prometheus.NewRegistry()
	allocs := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rota_extender_allocations"}, []string{"state"})
	binds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rota_extender_binds_total"}, []string{"verb", "result"})
	leading := prometheus.NewGauge(prometheus.GaugeOpts{Name: "rota_extender_leading"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rota_extender_request_duration_seconds",
		Buckets: []float64{0.005, 2.5}}, []string{"verb"})
	sum := prometheus.NewSummary(prometheus.SummaryOpts{Name: "rota_quota_seconds", Objectives: map[float64]float64{0.5: 0.05}})
	reg.MustRegister(allocs, binds, leading, dur, sum)
	allocs.WithLabelValues("reserved").Set(2)
	allocs.WithLabelValues(`we"ird\`).Set(1)
	binds.WithLabelValues("bind", "ok").Add(3)
	leading.Set(1)
	dur.WithLabelValues("filter").Observe(0.001)
	dur.WithLabelValues("filter").Observe(1)
	sum.Observe(4)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ParseSamples(&buf)
	if err != nil {
		t.Fatalf("ParseSamples: %v\n%s", err, buf.String())
	}
	want := Samples{
		`rota_extender_allocations{state="reserved"}`:                             2,
		`rota_extender_allocations{state="we\"ird\\"}`:                            1,
		`rota_extender_binds_total{result="ok",verb="bind"}`:                      3,
		`rota_extender_leading`:                                                   1,
		`rota_extender_request_duration_seconds_bucket{verb="filter",le="0.005"}`: 1,
		`rota_extender_request_duration_seconds_bucket{verb="filter",le="2.5"}`:   2,
		`rota_extender_request_duration_seconds_bucket{verb="filter",le="+Inf"}`:  2,
		`rota_extender_request_duration_seconds_sum{verb="filter"}`:               1.001,
		`rota_extender_request_duration_seconds_count{verb="filter"}`:             2,
		`rota_quota_seconds{quantile="0.5"}`:                                      4,
		`rota_quota_seconds_sum`:                                                  4,
		`rota_quota_seconds_count`:                                                1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSamples mismatch (-want +got):\n%s", diff)
	}
	if s := got.Sum("rota_extender_allocations"); s != 3 {
		t.Errorf("Sum(rota_extender_allocations) = %v, want 3", s)
	}
	if _, err := ParseSamples(strings.NewReader("rota_x{state=\"a\" 1\n")); err == nil {
		t.Error("a malformed exposition parsed without an error")
	}
}
