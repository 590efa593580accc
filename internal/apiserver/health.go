package apiserver

import (
	"context"
	"net/http"
	"slices"
	"time"

	"k8s.io/apiserver/pkg/server/healthz"
)

// etcdCheckTimeout bounds the etcd checks, as kube-apiserver's
// --etcd-healthcheck-timeout and --etcd-readycheck-timeout do by default.
const etcdCheckTimeout = 2 * time.Second

// newHealth returns the handler of the health endpoints /healthz, /livez
// and /readyz, kube-apiserver's own (k8s.io/apiserver's healthz): "ok", or
// with ?verbose one line per check; ?exclude=NAME leaves a check out;
// ROOT/NAME runs one check; a failure answers 500 naming the failed checks,
// their reasons withheld. The checks are kube-apiserver's, in its order:
// ping, log (Config.LogCheck) and etcd in all three; in /readyz also
// etcd-readiness, and shutdown, which fails once StopReadiness is called.
// The roots are public (publicPaths); a single check, which tells its
// reason, is authorized like any non-resource URL (system:monitoring may,
// as in Kubernetes). Each check's results are counted in /metrics/slis.
func (s *Server) newHealth() *http.ServeMux {
	etcd := func(name string) healthz.HealthChecker {
		return healthz.NamedGroupedCheck(name, name, func(r *http.Request) error {
			ctx, cancel := context.WithTimeout(r.Context(), etcdCheckTimeout)
			defer cancel()
			return s.cfg.Store.Check(ctx)
		})
	}
	checks := []healthz.HealthChecker{healthz.PingHealthz}
	if s.cfg.LogCheck != nil {
		checks = append(checks, s.cfg.LogCheck)
	}
	checks = append(checks, etcd("etcd"))
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, checks...)
	healthz.InstallLivezHandler(mux, checks...)
	healthz.InstallReadyzHandler(mux, slices.Concat(checks, []healthz.HealthChecker{etcd("etcd-readiness"), healthz.NewShutdownHealthz(s.stopping)})...)
	return mux
}

// StopReadiness makes /readyz fail from now on, with its shutdown check,
// while the server goes on serving: the first step of a shutdown, which
// tells load balancers to send their requests to other replicas.
func (s *Server) StopReadiness() { s.stoppingOnce.Do(func() { close(s.stopping) }) }
