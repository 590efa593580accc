package e2e

import (
	"strings"
	"testing"
)

// TestTLSSAN: --tls-san, written by hand with spaces and a trailing comma,
// puts its names in the serving certificate, so that clients reaching the
// server by one of them verify it; a name not given fails verification.
func TestTLSSAN(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--tls-san", "leasehold.example, 10.1.2.3,")
	if got := s.kubectl(t, "--tls-server-name", "leasehold.example", "get", "namespace", "default", "-o", "name"); strings.TrimSpace(got) != "namespace/default" {
		t.Errorf("kubectl by leasehold.example: %q", got)
	}
	_, stderr, err := s.runKubectl(t, "--tls-server-name", "other.example", "get", "namespace", "default")
	if err == nil || !strings.Contains(stderr, "not other.example") {
		t.Errorf("kubectl by a name not in --tls-san: %v\n%s", err, stderr)
	}
}
