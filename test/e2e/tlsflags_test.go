package e2e

import (
	"crypto/tls"
	"strings"
	"testing"
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
