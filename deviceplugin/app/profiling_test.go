package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rota-sched/rota/deviceplugin/config"
	"github.com/rota-sched/rota/deviceplugin/metrics"
)

// --profiling serves Go's runtime profiles on the metrics listener; without
// it /debug/pprof/ is not served.
func TestMetricsRoutesProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := config.Default()
		cfg.Profiling = on
		routes := MetricsRoutes(cfg, metrics.New())
		get := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			routes.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			return rec.Code, rec.Body.String()
		}
		for _, tc := range []struct{ path, body string }{
			{"/debug/pprof/", "goroutine"},
			{"/debug/pprof/heap?gc=1&debug=1", "heap profile"},
			{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
			{"/debug/pprof/cmdline", ""},
		} {
			code, body := get(tc.path)
			switch {
			case !on && code != http.StatusNotFound:
				t.Errorf("without --profiling: GET %s = %d, want 404", tc.path, code)
			case on && (code != http.StatusOK || !strings.Contains(body, tc.body)):
				t.Errorf("with --profiling: GET %s = %d %.80q, want 200 containing %q", tc.path, code, body, tc.body)
			}
		}
		if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "rota_device_plugin_") {
			t.Errorf("profiling=%v: GET /metrics = %d, want 200 with the plugin's metrics", on, code)
		}
	}
}
