// Package pkitest gives tests a serving certificate of a CA of their own.
package pkitest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
)

// Serving creates a CA in a temporary directory of t and returns a serving
// certificate it issued (for localhost, 127.0.0.1 and ::1, as `leasehold
// serve` makes its own) and a pool that trusts the CA.
func Serving(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	serving, caPEM := ServingPEM(t)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return serving, roots
}

// ServingPEM is Serving with the CA's certificate in PEM, as a client's
// configuration takes it.
func ServingPEM(t testing.TB) (tls.Certificate, []byte) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.LoadOrIssueServing(dir, nil, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	return serving, ca.CertPEM
}
