package apiserver

import (
	"context"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/healthz"
)

// healthPaths are the roots of the health endpoints. Each answers with
// kube-apiserver's handler (k8s.io/apiserver's healthz): "ok", or with
// ?verbose a line a check; ?exclude=NAME leaves a check out; ROOT/NAME
// runs one check; a failure answers 500 with the failed checks' names and
// their reasons withheld. The roots are public (publicPaths); a single
// check, which tells its reason, is authorized like any non-resource URL
// (system:monitoring may, as in Kubernetes).
var healthPaths = []string{"/healthz", "/livez", "/readyz"}

// etcdCheckTimeout bounds the etcd check, as kube-apiserver's
// --etcd-healthcheck-timeout does by default.
const etcdCheckTimeout = 2 * time.Second

// newHealth returns the handler of the health endpoints: ping and etcd in
// all three, as kube-apiserver has them, and in /readyz also shutdown,
// which fails once StopReadiness is called.
func (s *Server) newHealth() *http.ServeMux {
	etcd := healthz.NamedGroupedCheck("etcd", "etcd", func(r *http.Request) error {
		ctx, cancel := context.WithTimeout(r.Context(), etcdCheckTimeout)
		defer cancel()
		return s.cfg.Store.Check(ctx)
	})
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, healthz.PingHealthz, etcd)
	healthz.InstallLivezHandler(mux, healthz.PingHealthz, etcd)
	healthz.InstallReadyzHandler(mux, healthz.PingHealthz, etcd, healthz.NewShutdownHealthz(s.stopping))
	return mux
}

// isHealthPath reports whether path is a health endpoint or one of its
// checks.
func isHealthPath(path string) bool {
	for _, root := range healthPaths {
		if rest, ok := strings.CutPrefix(path, root); ok && (rest == "" || rest[0] == '/') {
			return true
		}
	}
	return false
}

// serveHealth answers a health endpoint; an unknown check is a 404
// Status.
func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.health.Handler(r)
	if pattern == "" {
		s.writeError(w, r, notFoundPath(r), schema.GroupResource{}, "")
		return
	}
	h.ServeHTTP(w, r)
}

// StopReadiness makes /readyz fail from now on, with its shutdown check,
// while the server goes on serving: the first step of a shutdown, which
// tells load balancers to send their requests to other replicas.
func (s *Server) StopReadiness() { s.stoppingOnce.Do(func() { close(s.stopping) }) }
