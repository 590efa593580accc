package apiserver

import (
	"net"
	"net/http"
	"strings"
)

// MaxGoawayChance is the largest --goaway-chance, kube-apiserver's bound.
const MaxGoawayChance = 0.02

// ProbabilisticGoaway is kube-apiserver's --goaway-chance: with
// probability chance (rnd's draw below it), an HTTP/2 request's response
// carries "Connection: close", on which Go's HTTP/2 server sends GOAWAY
// and closes the connection once its streams are done. The client opens a
// new connection for its next request, which a load balancer may give to
// another replica, so that a fleet's long-lived connections spread again
// over the replicas after one restarts. Watches are never chosen (their
// streams last), nor requests that came to the local address skip (the
// loopback port of the server's own controllers).
func ProbabilisticGoaway(h http.Handler, chance float64, rnd func() float64, skip string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The draw first: it is cheap, and rarely passes, so the path
		// and query are looked at in one request in fifty at most.
		if r.ProtoMajor == 2 && rnd() < chance && !isWatch(r) && !cameTo(r, skip) {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

// isWatch says whether r asks for a watch, by its path or its query.
func isWatch(r *http.Request) bool {
	if strings.Contains(r.URL.Path, "/watch/") {
		return true
	}
	v := r.URL.Query().Get("watch")
	return v == "true" || v == "1"
}

// cameTo says whether r came to the local address addr.
func cameTo(r *http.Request, addr string) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && addr != "" && local.String() == addr
}
