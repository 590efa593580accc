// Package pkitest gives tests a serving certificate of a CA of their own,
// and certificates of a PKI other than leasehold's.
package pkitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"sync/atomic"
	"testing"
	"time"

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

// Cert is a certificate and its key from a PKI other than leasehold's, as
// a company's CA or cert-manager issues them.
type Cert struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

var serial atomic.Int64

// Issue issues a certificate for cn that parent signs (self-signed when
// parent is nil), of kind: "ca" a CA, "server" a server certificate for 127.0.0.1, "client" a
// client certificate whose organizations are groups. It is valid from an
// hour before now to a day after.
func Issue(t testing.TB, cn string, parent *Cert, kind string, groups ...string) *Cert {
	t.Helper()
	return issue(t, cn, parent, kind, groups, nil)
}

// IssueServer issues a server certificate for 127.0.0.1 and dnsNames, with
// the common name cn, that parent signs.
func IssueServer(t testing.TB, cn string, parent *Cert, dnsNames ...string) *Cert {
	t.Helper()
	return issue(t, cn, parent, "server", nil, dnsNames)
}

func issue(t testing.TB, cn string, parent *Cert, kind string, groups, dnsNames []string) *Cert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano() + serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
	switch kind {
	case "ca":
		tmpl.IsCA, tmpl.KeyUsage = true, x509.KeyUsageCertSign
	case "server":
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = dnsNames
	case "client":
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		t.Fatalf("pkitest.Issue: kind %q", kind)
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &Cert{Cert: c, Key: key}
}

// CertPEM is the certificate in PEM.
func (c *Cert) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw})
}

// KeyPEM is the key in PEM (PKCS #8).
func (c *Cert) KeyPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(c.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
