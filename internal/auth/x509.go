package auth

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	asn1util "k8s.io/apimachinery/pkg/apis/asn1"
	"k8s.io/apiserver/pkg/authentication/user"
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

// CertUser reads the identity of a client certificate without verifying it:
// as Kubernetes' x509 authenticator, with the uid of the subject's one UID
// attribute, if it has one, and the certificate's SHA-256 as the user's
// credential ID.
func CertUser(cert *x509.Certificate) (*User, bool, error) {
	if cert.Subject.CommonName == "" {
		return nil, false, errors.New("client certificate has no common name")
	}
	var uids []string
	for _, name := range cert.Subject.Names {
		if !name.Type.Equal(asn1util.X509UID()) {
			continue
		}
		uid, ok := name.Value.(string)
		if !ok {
			return nil, false, errors.New("client certificate's UID is not a string")
		}
		uids = append(uids, uid)
	}
	switch {
	case len(uids) > 1:
		return nil, false, fmt.Errorf("client certificate has %d UIDs, at most one is allowed: %q", len(uids), uids)
	case len(uids) == 1 && uids[0] == "":
		return nil, false, errors.New("client certificate's UID is empty")
	}
	groups := slices.DeleteFunc(slices.Clone(cert.Subject.Organization), func(g string) bool { return g == "" })
	sum := sha256.Sum256(cert.Raw)
	u := &User{Name: cert.Subject.CommonName, Groups: groups,
		Extra: map[string][]string{user.CredentialIDKey: {"X509SHA256=" + hex.EncodeToString(sum[:])}}}
	if len(uids) == 1 {
		u.UID = uids[0]
	}
	return u, true, nil
}
