package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	testingclock "k8s.io/utils/clock/testing"
)

// pemSeeds returns PEM inputs of every kind the parsers accept, plus some
// near misses.
func pemSeeds(t testing.TB) [][]byte {
	ca, err := LoadOrCreateCA(t.TempDir(), testingclock.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	_, keyPEM, err := ca.IssueClient("seed", "", []string{"g"}, 0, testingclock.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	secDER, _ := x509.MarshalECPrivateKey(ec)
	rk, _ := rsa.GenerateKey(rand.Reader, 1024)
	return [][]byte{
		ca.CertPEM,
		keyPEM,
		append(append([]byte{}, keyPEM...), ca.CertPEM...),
		pem.EncodeToMemory(&pem.Block{Type: pemTypeECKey, Bytes: secDER}),
		pem.EncodeToMemory(&pem.Block{Type: pemTypeRSAKey, Bytes: x509.MarshalPKCS1PrivateKey(rk)}),
		pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificate, Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: []byte{1}}),
		[]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
		[]byte("not PEM at all"),
		nil,
	}
}

func FuzzParseCertPEM(f *testing.F) {
	for _, s := range pemSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCertPEM(data)
		if (c == nil) == (err == nil) {
			t.Fatalf("got certificate %v and error %v: want exactly one", c != nil, err)
		}
		if err != nil {
			return
		}
		// What parsed once parses the same after re-encoding.
		again, err := ParseCertPEM(encodeCertPEM(c.Raw))
		if err != nil || !again.Equal(c) {
			t.Fatalf("re-encoded certificate: got %v, equal %v", err, err == nil && again.Equal(c))
		}
	})
}

func FuzzParseKeyPEM(f *testing.F) {
	for _, s := range pemSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeyPEM(data)
		if (k == nil) == (err == nil) {
			t.Fatalf("got key %v and error %v: want exactly one", k != nil, err)
		}
		if err != nil {
			return
		}
		if k.Public() == nil {
			t.Fatal("parsed key has no public key")
		}
		// What parsed once parses to the same key after re-encoding.
		enc, err := encodeKeyPEM(k)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		again, err := ParseKeyPEM(enc)
		if err != nil {
			t.Fatalf("parse re-encoded key: %v", err)
		}
		if pub, ok := again.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(k.Public()) {
			t.Fatal("re-encoded key differs")
		}
	})
}

func FuzzSplitHosts(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "[::1]", "Example.COM.", "*.svc", "0.0.0.0", "", "a b", "10.0.0.1,example.org", "::ffff:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		dnsNames, ips, err := splitHosts(strings.Split(in, ","))
		if err != nil {
			return
		}
		for _, n := range dnsNames {
			if n == "" || n != strings.ToLower(n) || net.ParseIP(n) != nil {
				t.Fatalf("bad DNS name %q from %q", n, in)
			}
		}
		for _, ip := range ips {
			if ip.IsUnspecified() {
				t.Fatalf("unspecified IP %s from %q", ip, in)
			}
		}
		// Normalizing is idempotent.
		var again []string
		again = append(again, dnsNames...)
		for _, ip := range ips {
			again = append(again, ip.String())
		}
		dn2, ips2, err := splitHosts(again)
		if err != nil || strings.Join(dn2, ",") != strings.Join(dnsNames, ",") || len(ips2) != len(ips) {
			t.Fatalf("splitHosts not idempotent on %q: %v %v %v", in, dn2, ips2, err)
		}
	})
}

func TestSplitHosts(t *testing.T) {
	tests := []struct {
		in      []string
		wantDNS string
		wantIPs string
		wantErr bool
	}{
		{in: []string{"127.0.0.1"}, wantIPs: "127.0.0.1"},
		{in: []string{"[::1]", "::1", "0:0:0:0:0:0:0:1"}, wantIPs: "::1"},
		{in: []string{"::ffff:10.0.0.1", "10.0.0.1"}, wantIPs: "10.0.0.1"},
		{in: []string{"B.example", "a.example.", "b.example"}, wantDNS: "a.example,b.example"},
		{in: []string{"*.svc.example"}, wantDNS: "*.svc.example"},
		{in: []string{"0.0.0.0", "::", "", " ", "host"}, wantDNS: "host"},
		{in: []string{"0.0.0.0"}, wantErr: true},
		{in: []string{"bad_name"}, wantErr: true},
		{in: []string{"a..b"}, wantErr: true},
		{in: []string{"*"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.in, ","), func(t *testing.T) {
			dns, ips, err := splitHosts(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var ipStr []string
			for _, ip := range ips {
				ipStr = append(ipStr, ip.String())
			}
			if got := strings.Join(dns, ","); got != tc.wantDNS {
				t.Errorf("DNS names %q, want %q", got, tc.wantDNS)
			}
			if got := strings.Join(ipStr, ","); got != tc.wantIPs {
				t.Errorf("IPs %q, want %q", got, tc.wantIPs)
			}
		})
	}
}

// FuzzServingFiles feeds --tls-cert-file, --tls-private-key-file and
// --client-ca-file contents to their parsers: each either fails or gives
// what a server can use.
func FuzzServingFiles(f *testing.F) {
	seeds := pemSeeds(f)
	for _, a := range seeds {
		for _, b := range seeds {
			f.Add(a, b)
		}
	}
	ca, err := LoadOrCreateCA(f.TempDir(), testingclock.NewFakePassiveClock(t0))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		if pair, err := ParseServingPair([][]byte{certPEM, keyPEM}); err == nil {
			if pair.Leaf == nil || pair.PrivateKey == nil {
				t.Fatal("a pair without its certificate or key")
			}
			if anchor, err := TrustAnchorPEM(pair); err == nil && anchor != nil {
				if _, err := ParseCertPEM(anchor); err != nil {
					t.Fatalf("trust anchor: %v", err)
				}
			}
		}
		if pool, err := ParseCABundle(ca.Cert)([][]byte{certPEM}); err == nil && pool == nil {
			t.Fatal("no pool and no error")
		}
	})
}
