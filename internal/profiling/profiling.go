// Package profiling serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/ for rota-extender, rota-admission and rota-device-plugin,
// each behind its --profiling flag (off by default, like kube-scheduler's
// --profiling=false in hardened setups).
//
// net/http/pprof is imported by name, never for its side effect: its init
// registers the handlers on http.DefaultServeMux, which no Rota binary
// serves, so the profiles are reachable only where Handler is mounted.
package profiling

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// Prefix is the path the profiles are served under.
const Prefix = "/debug/pprof/"

// Handler serves net/http/pprof's endpoints under Prefix: the index at
// Prefix, cmdline, profile (CPU), symbol, trace, and the named runtime
// profiles (heap, goroutine, allocs, block, mutex, threadcreate) by name,
// with their query parameters (debug=1, gc=1, seconds=N). An unknown name
// is answered 404 (by pprof.Index). A path outside Prefix is answered 404.
//
// Mount it on Prefix: mux.Handle(profiling.Prefix, profiling.Handler()),
// or with httprouter, r.Handler(http.MethodGet, "/debug/pprof/*profile",
// profiling.Handler()).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		switch name {
		case "cmdline":
			pprof.Cmdline(w, r)
		case "profile":
			pprof.Profile(w, r)
		case "symbol":
			pprof.Symbol(w, r)
		case "trace":
			pprof.Trace(w, r)
		default: // the index ("") and the named profiles
			pprof.Index(w, r)
		}
	})
}
