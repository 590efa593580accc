package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/utils/clock"
)

// ClientCerts authenticates X.509 client certificates that chain to a CA
// pool for client authentication: the subject's CommonName is the user,
// its Organizations are the groups and its UID attribute the uid, as
// Kubernetes' x509 authenticator reads them.
type ClientCerts struct {
	roots func() *x509.CertPool
	clock clock.PassiveClock
}

var _ Authenticator = (*ClientCerts)(nil)

// NewClientCerts trusts certificates signed by the pool roots returns at
// each request (a file read again while the server runs), checked at clk's
// time (nil: the real clock).
func NewClientCerts(roots func() *x509.CertPool, clk clock.PassiveClock) *ClientCerts {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &ClientCerts{roots: roots, clock: clk}
}

// clientCertExpiry is kube-apiserver's histogram of how long the client
// certificates requests present have left, whether they verify or not:
// the alert written for it (fewer than 7 days left) warns of agents
// whose certificates are about to lapse.
var clientCertExpiry = prometheus.NewHistogram(prometheus.HistogramOpts{
	Name: "apiserver_client_certificate_expiration_seconds",
	Help: "Seconds left before the client certificate a request presented expires (negative once it has).",
	Buckets: []float64{0, 30 * 60, 3600, 2 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 4 * 86400, 7 * 86400,
		30 * 86400, 90 * 86400, 180 * 86400, 360 * 86400},
})

// Collectors are the metrics of authentication, for the server to register.
func Collectors() []prometheus.Collector { return []prometheus.Collector{clientCertExpiry} }

// Authenticate implements Authenticator.
func (c *ClientCerts) Authenticate(r *http.Request) (*User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	clientCertExpiry.Observe(r.TLS.PeerCertificates[0].NotAfter.Sub(c.clock.Now()).Seconds())
	return c.User(r.TLS.PeerCertificates)
}

// User checks a presented chain (leaf first) and returns its identity.
func (c *ClientCerts) User(chain []*x509.Certificate) (*User, bool, error) {
	if len(chain) == 0 {
		return nil, false, nil
	}
	if err := verifyClientChain(chain, c.roots(), c.clock.Now()); err != nil {
		return nil, false, fmt.Errorf("verifying client certificate: %w", err)
	}
	return CertUser(chain[0])
}

// verifyClientChain checks that the presented chain (leaf first, then
// intermediates) leads to one of roots at now, for client authentication.
func verifyClientChain(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) error {
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err
}

// CertUser reads the identity of a client certificate without verifying it,
// by k8s.io/apiserver's own reading (CommonNameUserConversion): the uid of
// the subject's one UID attribute, if it has one, and the certificate's
// SHA-256 as the user's credential ID. A certificate without a common name
// is refused rather than passed over, and empty organizations are no
// groups.
func CertUser(cert *x509.Certificate) (*User, bool, error) {
	if cert.Subject.CommonName == "" {
		return nil, false, errors.New("client certificate has no common name")
	}
	resp, ok, err := x509request.CommonNameUserConversion.User([]*x509.Certificate{cert})
	if err != nil || !ok {
		return nil, false, err
	}
	u := resp.User
	groups := slices.DeleteFunc(slices.Clone(u.GetGroups()), func(g string) bool { return g == "" })
	return &User{Name: u.GetName(), UID: u.GetUID(), Groups: groups, Extra: u.GetExtra()}, true, nil
}
