package profiling

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(Prefix, Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{path: "/debug/pprof/", wantCode: http.StatusOK, wantBody: "goroutine"},
		{path: "/debug/pprof/heap?gc=1&debug=1", wantCode: http.StatusOK, wantBody: "heap profile"},
		{path: "/debug/pprof/goroutine?debug=1", wantCode: http.StatusOK, wantBody: "goroutine profile"},
		{path: "/debug/pprof/allocs?debug=1", wantCode: http.StatusOK, wantBody: "heap profile"},
		{path: "/debug/pprof/cmdline", wantCode: http.StatusOK},
		{path: "/debug/pprof/symbol", wantCode: http.StatusOK, wantBody: "num_symbols"},
		{path: "/debug/pprof/profile?seconds=1", wantCode: http.StatusOK},
		{path: "/debug/pprof/trace?seconds=0.1", wantCode: http.StatusOK},
		{path: "/debug/pprof/nothing", wantCode: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantCode || !strings.Contains(string(body), tc.wantBody) {
				t.Errorf("GET %s = %d %.80q, want %d containing %q", tc.path, resp.StatusCode, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

// A path outside the prefix is not served, whatever it is mounted on.
func TestHandlerOutsidePrefix(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /metrics = %d, want 404", rec.Code)
	}
}
