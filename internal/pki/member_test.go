package pki

import (
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"

	testingclock "k8s.io/utils/clock/testing"
)

func TestIssueMember(t *testing.T) {
	ca := newTestCA(t, t.TempDir())
	clk := testingclock.NewFakePassiveClock(t0)
	certPEM, keyPEM, err := ca.IssueMember("a", []string{"etcd-a.example", "10.0.0.1", "10.0.0.1"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	cert := parsePair(t, certPEM, keyPEM)
	if cert.Subject.CommonName != "a" {
		t.Errorf("CN %q, want a", cert.Subject.CommonName)
	}
	if want := []string{"etcd-a.example", "localhost"}; !slices.Equal(cert.DNSNames, want) {
		t.Errorf("DNS names %q, want %q", cert.DNSNames, want)
	}
	if want := []net.IP{net.ParseIP("10.0.0.1").To4(), net.ParseIP("127.0.0.1").To4(), net.IPv6loopback}; !slices.EqualFunc(cert.IPAddresses, want, net.IP.Equal) {
		t.Errorf("IPs %v, want %v", cert.IPAddresses, want)
	}
	// Both ends of a peer connection, and the server end of a client's.
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if err := ca.verify(cert, usage, clk); err != nil {
			t.Errorf("does not verify for usage %v: %v", usage, err)
		}
	}
	if !cert.NotAfter.Equal(t0.Add(servingValidity)) {
		t.Errorf("NotAfter %s, want a year on", cert.NotAfter)
	}
	for _, bad := range []struct {
		name  string
		hosts []string
		want  string
	}{
		{"", nil, "name is empty"},
		{"b", []string{"not a host"}, `host "not a host"`},
	} {
		if _, _, err := ca.IssueMember(bad.name, bad.hosts, clk); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("IssueMember(%q, %q): %v, want an error with %q", bad.name, bad.hosts, err, bad.want)
		}
	}
}
