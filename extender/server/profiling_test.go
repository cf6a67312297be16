package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProfiling(t *testing.T) {
	tests := []struct {
		name      string
		profiling bool
		path      string
		wantCode  int
		wantBody  string
	}{
		{name: "off by default", path: "/debug/pprof/", wantCode: http.StatusNotFound},
		{name: "index", profiling: true, path: "/debug/pprof/", wantCode: http.StatusOK, wantBody: "goroutine"},
		{name: "named profile", profiling: true, path: "/debug/pprof/heap?debug=1", wantCode: http.StatusOK, wantBody: "heap profile"},
		{name: "cmdline", profiling: true, path: "/debug/pprof/cmdline", wantCode: http.StatusOK},
		{name: "unknown profile", profiling: true, path: "/debug/pprof/nothing", wantCode: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(New(nil, Options{Profiling: tc.profiling}).Handler())
			defer srv.Close()
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
