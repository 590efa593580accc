package pki

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// FileCheckInterval is how often a running server reads again the
// certificate files it was given (--tls-cert-file, --client-ca-file), which
// another tool (cert-manager, a company's PKI) replaces in place.
const FileCheckInterval = 10 * time.Second

// Reloading is a value parsed from files that something else replaces
// while the server runs. Reload reads the files again and replaces the
// value when their contents changed and parse without error; contents that
// do not (a certificate written before its key, a truncated file) leave
// the value in use as it was, and are reported once, not at every check.
type Reloading[T any] struct {
	paths []string
	parse func(contents [][]byte) (T, error)

	mu sync.Mutex
	// seen is the digest of what the last read found: the files'
	// contents, or the error that reading them gave.
	seen [sha256.Size]byte
	cur  atomic.Pointer[T]
}

// NewReloading reads paths and parses their contents with parse; either
// failing is an error, since a server should not start without the value.
func NewReloading[T any](parse func(contents [][]byte) (T, error), paths ...string) (*Reloading[T], error) {
	r := &Reloading[T]{paths: paths, parse: parse}
	contents, err := r.read()
	if err != nil {
		return nil, err
	}
	v, err := parse(contents)
	if err != nil {
		return nil, err
	}
	r.seen = digest(contents)
	r.cur.Store(&v)
	return r, nil
}

// Get returns the value in use.
func (r *Reloading[T]) Get() T { return *r.cur.Load() }

// Reload reads the files again. It reports whether it replaced the value,
// and an error when the files changed (or became unreadable) in a way that
// left the value as it was; the same failure is not reported twice in a
// row.
func (r *Reloading[T]) Reload() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	contents, err := r.read()
	if err != nil {
		d := sha256.Sum256([]byte(err.Error()))
		if d == r.seen {
			return false, nil
		}
		r.seen = d
		return false, err
	}
	d := digest(contents)
	if d == r.seen {
		return false, nil
	}
	r.seen = d
	v, err := r.parse(contents)
	if err != nil {
		return false, err
	}
	r.cur.Store(&v)
	return true, nil
}

func (r *Reloading[T]) read() ([][]byte, error) {
	contents := make([][]byte, len(r.paths))
	for i, p := range r.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		contents[i] = b
	}
	return contents, nil
}

// digest sums contents, each preceded by its length, so that bytes moved
// from one file to the next change it.
func digest(contents [][]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range contents {
		fmt.Fprintf(h, "%d:", len(c))
		h.Write(c)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// ParseServingPair parses contents[0], a PEM certificate followed by the
// certificates of its chain, and contents[1], its PEM private key, as
// kube-apiserver's --tls-cert-file and --tls-private-key-file hold them.
// The key must be the certificate's.
func ParseServingPair(contents [][]byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// ParseCABundle returns a pool of base's certificate (none when base is
// nil) and every certificate in contents, PEM bundles, each of which must
// hold at least one.
func ParseCABundle(base *x509.Certificate) func(contents [][]byte) (*x509.CertPool, error) {
	return func(contents [][]byte) (*x509.CertPool, error) {
		pool := x509.NewCertPool()
		if base != nil {
			pool.AddCert(base)
		}
		for _, bundle := range contents {
			certs, err := certutil.ParseCertsPEM(bundle)
			if err != nil {
				return nil, err
			}
			for _, c := range certs {
				pool.AddCert(c)
			}
		}
		return pool, nil
	}
}

// TrustAnchorPEM is what a client should trust to verify c: the
// self-signed certificate of c's chain (its root, or c itself when it is
// self-signed), PEM-encoded, or nil when the chain holds none and clients
// should use their system's roots (a certificate from a public CA, whose
// file ends at an intermediate).
func TrustAnchorPEM(c *tls.Certificate) ([]byte, error) {
	for _, der := range c.Certificate {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(cert.RawIssuer, cert.RawSubject) && cert.CheckSignature(cert.SignatureAlgorithm, cert.RawTBSCertificate, cert.Signature) == nil {
			return encodeCertPEM(cert.Raw), nil
		}
	}
	return nil, nil
}
