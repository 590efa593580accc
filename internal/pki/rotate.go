package pki

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/tick"
)

// ServingCheckInterval is how often a running server checks whether its
// serving certificate is due for renewal: far less than the 30 days ahead
// of expiry at which it is renewed.
const ServingCheckInterval = time.Hour

// Serving is a running server's serving certificate, renewed while it runs:
// a certificate issued for a year would otherwise expire under a server
// that runs long enough, and every client's handshake would then fail.
// Renewal happens once the certificate comes within 30 days of expiry,
// under the data directory's lock (LockDir), so that replicas sharing the
// directory issue one certificate and the others load it. Connections
// already open keep the certificate they were made with.
type Serving struct {
	ca    *CA
	dir   string
	hosts []string
	clk   clock.PassiveClock
	cur   atomic.Pointer[tls.Certificate]
}

// NewServing returns the serving certificate in dir for hosts, issuing one
// as LoadOrIssueServing does; the caller holds dir's lock.
func (ca *CA) NewServing(dir string, hosts []string, clk clock.PassiveClock) (*Serving, error) {
	c, err := ca.LoadOrIssueServing(dir, hosts, clk)
	if err != nil {
		return nil, err
	}
	s := &Serving{ca: ca, dir: dir, hosts: hosts, clk: clk}
	s.cur.Store(&c)
	return s, nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load(), nil
}

// Renew replaces the certificate if it is due, with the one in the data
// directory if another replica has renewed it there, or else with one it
// issues and writes; it reports whether it replaced it.
func (s *Serving) Renew() (bool, error) {
	if !renewalDue(s.cur.Load().Leaf, s.clk) {
		return false, nil
	}
	release, err := LockDir(s.dir)
	if err != nil {
		return false, err
	}
	defer release()
	c, err := s.ca.LoadOrIssueServing(s.dir, s.hosts, s.clk)
	if err != nil {
		return false, err
	}
	s.cur.Store(&c)
	return true, nil
}

// Run calls Renew every interval until ctx ends, and logs what it renews
// and what it could not: a failed renewal is tried again at the next
// interval, while the certificate in use still holds.
func (s *Serving) Run(ctx context.Context, clk clock.WithTicker, interval time.Duration, log *slog.Logger) {
	tick.Every(ctx, clk, interval, func() {
		renewed, err := s.Renew()
		switch {
		case err != nil:
			log.Error("renewing the serving certificate", "err", err, "notAfter", s.cur.Load().Leaf.NotAfter)
		case renewed:
			log.Info("serving certificate renewed", "notAfter", s.cur.Load().Leaf.NotAfter)
		}
	})
}
