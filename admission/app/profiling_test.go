package app

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// --profiling serves Go's runtime profiles beside /metrics; without it
// /debug/pprof/ is not served.
func TestProfiling(t *testing.T) {
	for _, on := range []bool{false, true} {
		_, ctx := ktesting.NewTestContext(t)
		cfg := testConfig()
		cfg.Profiling = on
		a, err := NewForClient(ctx, cfg, fake.NewClientset(), prometheus.NewRegistry())
		if err != nil {
			t.Fatalf("NewForClient() error = %v", err)
		}
		routes := a.Routes()
		for _, tc := range []struct{ path, body string }{
			{"/debug/pprof/", "goroutine"},
			{"/debug/pprof/heap?gc=1&debug=1", "heap profile"},
			{"/debug/pprof/goroutine?debug=1", "goroutine profile"},
			{"/debug/pprof/cmdline", ""},
		} {
			code, body := get(t, routes, tc.path)
			switch {
			case !on && code != http.StatusNotFound:
				t.Errorf("without --profiling: GET %s = %d, want 404", tc.path, code)
			case on && (code != http.StatusOK || !strings.Contains(body, tc.body)):
				t.Errorf("with --profiling: GET %s = %d %.80q, want 200 containing %q", tc.path, code, body, tc.body)
			}
		}
		if code, _ := get(t, routes, "/metrics"); code != http.StatusOK {
			t.Errorf("profiling=%v: GET /metrics = %d, want 200", on, code)
		}
	}
}
