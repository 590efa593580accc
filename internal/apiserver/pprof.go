package apiserver

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// servePprof answers /debug/pprof/ with the standard library's handlers.
func servePprof(w http.ResponseWriter, r *http.Request, path string) {
	switch strings.TrimPrefix(path, "/debug/pprof") {
	case "", "/":
		pprof.Index(w, r)
	case "/cmdline":
		pprof.Cmdline(w, r)
	case "/profile":
		pprof.Profile(w, r)
	case "/symbol":
		pprof.Symbol(w, r)
	case "/trace":
		pprof.Trace(w, r)
	default:
		// Named profiles: heap, goroutine, allocs, block, mutex, …
		pprof.Handler(strings.TrimPrefix(path, "/debug/pprof/")).ServeHTTP(w, r)
	}
}
