package apiserver

import (
	"context"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
)

// etcdCheckTimeout bounds the etcd check, as kube-apiserver's
// --etcd-healthcheck-timeout does by default.
const etcdCheckTimeout = 2 * time.Second

// newHealth returns the handler of the health endpoints /healthz, /livez
// and /readyz, kube-apiserver's own (k8s.io/apiserver's healthz): "ok", or
// with ?verbose one line per check; ?exclude=NAME leaves a check out;
// ROOT/NAME runs one check; a failure answers 500 naming the failed checks,
// their reasons withheld. The checks are ping and etcd in all three, as
// kube-apiserver has them, and in /readyz also shutdown, which fails once
// StopReadiness is called. The roots are public (publicPaths); a single
// check, which tells its reason, is authorized like any non-resource URL
// (system:monitoring may, as in Kubernetes).
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

// StopReadiness makes /readyz fail from now on, with its shutdown check,
// while the server goes on serving: the first step of a shutdown, which
// tells load balancers to send their requests to other replicas.
func (s *Server) StopReadiness() { s.stoppingOnce.Do(func() { close(s.stopping) }) }
