package e2e

import (
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// handshake connects to addr with a client limited to maxVersion and, when
// suites is set, those TLS 1.2 cipher suites, and returns the version and
// suite agreed or the handshake's error.
func handshake(addr string, maxVersion uint16, suites ...uint16) (tls.ConnectionState, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{
		InsecureSkipVerify: true, // the handshake's terms are what is tested
		MaxVersion:         maxVersion,
		CipherSuites:       suites,
		NextProtos:         []string{"h2"},
	})
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

// TestTLSMinVersion: with --tls-min-version VersionTLS13 a client that
// speaks TLS 1.2 at most is refused at the handshake, and kubectl, which
// speaks 1.3, works; by default TLS 1.2 is served.
func TestTLSMinVersion(t *testing.T) {
	t.Parallel()
	s := newServer(t, "--tls-min-version", "VersionTLS13")
	if _, err := handshake(s.listen, tls.VersionTLS12); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("a TLS 1.2 client's handshake: %v; want a protocol version alert", err)
	}
	if st, err := handshake(s.listen, tls.VersionTLS13); err != nil || st.Version != tls.VersionTLS13 || st.NegotiatedProtocol != "h2" {
		t.Errorf("a TLS 1.3 client's handshake: version %#x, protocol %q, %v; want TLS 1.3 and h2", st.Version, st.NegotiatedProtocol, err)
	}
	if out := s.kubectl(t, "get", "ns", "default", "-o", "name"); strings.TrimSpace(out) != "namespace/default" {
		t.Errorf("kubectl get ns default: %q", out)
	}

	d := newServer(t)
	if st, err := handshake(d.listen, tls.VersionTLS12); err != nil || st.Version != tls.VersionTLS12 || st.NegotiatedProtocol != "h2" {
		t.Errorf("by default, a TLS 1.2 client's handshake: version %#x, protocol %q, %v; want TLS 1.2 and h2", st.Version, st.NegotiatedProtocol, err)
	}
}

// TestTLSCipherSuites: with --tls-cipher-suites a TLS 1.2 client gets one
// of the suites named, or no connection when it offers none of them.
func TestTLSCipherSuites(t *testing.T) {
	t.Parallel()
	s := newServer(t, "--tls-cipher-suites", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
	if st, err := handshake(s.listen, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384); err != nil || st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 {
		t.Errorf("handshake offering ChaCha20 and AES-256-GCM: suite %s, %v; want TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", tls.CipherSuiteName(st.CipherSuite), err)
	}
	if _, err := handshake(s.listen, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256); err == nil || !strings.Contains(err.Error(), "handshake failure") {
		t.Errorf("handshake offering ChaCha20 alone: %v; want a handshake failure", err)
	}
	if out := s.kubectl(t, "get", "ns", "default", "-o", "name"); strings.TrimSpace(out) != "namespace/default" {
		t.Errorf("kubectl get ns default: %q", out)
	}
}

// servedName is the common name of the certificate the server at addr
// presents to a client asking for serverName, unverified.
func servedName(addr, serverName string) (string, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: serverName})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// TestSNICertificates: --tls-sni-cert-key serves each certificate to the
// clients that ask for its names (its own, or those given with it), the
// server's own certificate to the others, and a certificate renewed in
// place within seconds; kubectl verifies the one it asks for.
func TestSNICertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := pkitest.Issue(t, "company-root", nil, "ca")
	write := func(name string, c *pkitest.Cert) (string, string) {
		t.Helper()
		certFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		replaceFile(t, keyFile, c.KeyPEM(t))
		replaceFile(t, certFile, c.CertPEM())
		return certFile, keyFile
	}
	apiCert, apiKey := write("api", pkitest.IssueServer(t, "api", ca, "api.fleet.test"))
	zones1 := pkitest.IssueServer(t, "zones-1", ca)
	zoneCert, zoneKey := write("zones", zones1)
	caFile := writeFile(t, "company-root.crt", string(ca.CertPEM()))
	s := newServer(t, "--tls-sni-cert-key", apiCert+","+apiKey, "--tls-sni-cert-key", zoneCert+","+zoneKey+":*.zone.test")

	for name, want := range map[string]string{"api.fleet.test": "api", "rack-4.zone.test": "zones-1", "API.FLEET.TEST": "api"} {
		if got, err := servedName(s.listen, name); err != nil || got != want {
			t.Errorf("a client asking for %s got certificate %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"", "localhost", "zone.test", "a.rack-4.zone.test"} {
		conn, err := tls.Dial("tcp", s.listen, &tls.Config{InsecureSkipVerify: true, ServerName: name})
		if err != nil {
			t.Fatalf("asking for %q: %v", name, err)
		}
		issuer := conn.ConnectionState().PeerCertificates[0].Issuer.CommonName
		conn.Close()
		if issuer == "company-root" {
			t.Errorf("a client asking for %q got a --tls-sni-cert-key certificate; want the server's own", name)
		}
	}
	out, errOut, err := s.runKubectl(t, "--tls-server-name", "api.fleet.test", "--certificate-authority", caFile, "get", "ns", "default", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "namespace/default" {
		t.Errorf("kubectl verifying api.fleet.test against the company root: %v, %q, %q", err, out, errOut)
	}

	// The expiry gauge reads the certificate served to clients that name
	// none of these (a handshake of no name); each SNI certificate has its
	// own, labelled with its file.
	expiry := func(c *pkitest.Cert) string {
		return fmt.Sprintf("leasehold_certificate_expiration_timestamp_seconds{certificate=%q} %s", "sni:"+zoneCert, strconv.FormatFloat(float64(c.Cert.NotAfter.Unix()), 'g', -1, 64))
	}
	out = s.kubectl(t, "get", "--raw", "/metrics")
	for _, want := range []string{`leasehold_certificate_expiration_timestamp_seconds{certificate="serving"}`, `leasehold_certificate_expiration_timestamp_seconds{certificate="sni:` + apiCert + `"}`, expiry(zones1)} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	zones2 := pkitest.IssueServer(t, "zones-2", ca)
	write("zones", zones2)
	eventually(t, 15*time.Second, func() error {
		if got, err := servedName(s.listen, "rack-4.zone.test"); err != nil || got != "zones-2" {
			return fmt.Errorf("after the renewal, a client asking for rack-4.zone.test got %q, %v; want zones-2", got, err)
		}
		if out := s.kubectl(t, "get", "--raw", "/metrics"); !strings.Contains(out, expiry(zones2)) {
			return fmt.Errorf("after the renewal, /metrics lacks %s", expiry(zones2))
		}
		return nil
	})
}
