package pki_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

func chainPEM(certs ...*pkitest.Cert) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, c.CertPEM()...)
	}
	return out
}

func TestTrustAnchorPEM(t *testing.T) {
	root := pkitest.Issue(t, "root", nil, "ca")
	mid := pkitest.Issue(t, "intermediate", root, "ca")
	leaf := pkitest.Issue(t, "server", mid, "server")
	self := pkitest.Issue(t, "self-signed server", nil, "server")
	tests := []struct {
		name  string
		chain []*pkitest.Cert
		want  *pkitest.Cert
	}{
		{"the whole chain: its root", []*pkitest.Cert{leaf, mid, root}, root},
		{"up to an intermediate: the system's roots", []*pkitest.Cert{leaf, mid}, nil},
		{"the certificate alone: the system's roots", []*pkitest.Cert{leaf}, nil},
		{"a self-signed certificate: itself", []*pkitest.Cert{self}, self},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := pki.ParseServingPair([][]byte{chainPEM(tc.chain...), tc.chain[0].KeyPEM(t)})
			if err != nil {
				t.Fatal(err)
			}
			got, err := pki.TrustAnchorPEM(pair)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			if tc.want != nil {
				want = tc.want.CertPEM()
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
			if want == nil {
				return
			}
			// What the anchor is for: a client trusting it alone accepts
			// the chain the server sends.
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(got)
			inter := x509.NewCertPool()
			for _, c := range tc.chain[1:] {
				inter.AddCert(c.Cert)
			}
			if _, err := tc.chain[0].Cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "127.0.0.1"}); err != nil {
				t.Fatalf("a client trusting the anchor: %v", err)
			}
		})
	}
}

func TestParseServingPairRefusesAnotherKey(t *testing.T) {
	a, b := pkitest.Issue(t, "a", nil, "server"), pkitest.Issue(t, "b", nil, "server")
	if _, err := pki.ParseServingPair([][]byte{a.CertPEM(), b.KeyPEM(t)}); err == nil {
		t.Fatal("a certificate with another's key was taken")
	}
}

func TestParseCABundle(t *testing.T) {
	ca, err := pki.LoadOrCreateCA(t.TempDir(), clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	outside := pkitest.Issue(t, "company root", nil, "ca")
	pool, err := pki.ParseCABundle(ca.Cert)([][]byte{outside.CertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	want := x509.NewCertPool()
	want.AddCert(ca.Cert)
	want.AddCert(outside.Cert)
	if !pool.Equal(want) {
		t.Error("the pool is not leasehold's CA and the bundle's")
	}
	if _, err := pki.ParseCABundle(ca.Cert)([][]byte{[]byte("not a certificate")}); err == nil {
		t.Error("a bundle without a certificate was taken")
	}
}

func TestReloading(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path+".new", data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	serial := func(r *pki.Reloading[*tls.Certificate]) *big.Int { return r.Get().Leaf.SerialNumber }

	first := pkitest.Issue(t, "first", nil, "server")
	if _, err := pki.NewReloading(pki.ParseServingPair, certPath, keyPath); err == nil {
		t.Fatal("started without the files")
	}
	write(certPath, first.CertPEM())
	write(keyPath, first.KeyPEM(t))
	r, err := pki.NewReloading(pki.ParseServingPair, certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if serial(r).Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatal("not the certificate in the files")
	}
	check := func(step string, wantReplaced bool, wantErr string, want *pkitest.Cert) {
		t.Helper()
		replaced, err := r.Reload()
		if replaced != wantReplaced || (err == nil) != (wantErr == "") || (err != nil && !strings.Contains(err.Error(), wantErr)) {
			t.Fatalf("%s: Reload() = %v, %v; want %v and an error containing %q", step, replaced, err, wantReplaced, wantErr)
		}
		if serial(r).Cmp(want.Cert.SerialNumber) != 0 {
			t.Fatalf("%s: serving %s, want %s", step, r.Get().Leaf.Subject.CommonName, want.Cert.Subject.CommonName)
		}
	}
	check("unchanged", false, "", first)

	// A tool that writes the certificate, then the key: between the two
	// the files do not match, and the first certificate stays.
	second := pkitest.Issue(t, "second", nil, "server")
	write(certPath, second.CertPEM())
	check("certificate without its key", false, "private key does not match", first)
	check("the same mismatch again is not reported again", false, "", first)
	write(keyPath, second.KeyPEM(t))
	check("key written", true, "", second)

	if err := os.Remove(keyPath); err != nil {
		t.Fatal(err)
	}
	check("key removed", false, "no such file", second)
	check("still removed", false, "", second)
	write(keyPath, second.KeyPEM(t))
	check("the same key back", true, "", second)
}
