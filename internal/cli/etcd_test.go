package cli

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
)

// TestParseURLs: lists are read as written by hand; one naming no URL is
// an error.
func TestParseURLs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"http://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}},
		{" http://a:2379 , http://b:2379,", []string{"http://a:2379", "http://b:2379"}},
		{"", nil},
		{" , ", nil},
	} {
		urls, err := parseURLs(c.in)
		var got []string
		for _, u := range urls {
			got = append(got, u.String())
		}
		if c.want == nil && err == nil {
			t.Errorf("%q: %v, want an error", c.in, got)
		}
		if c.want != nil && (err != nil || !slices.Equal(got, c.want)) {
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// TestCheckTLSURLs: TLS flags on URLs that are not https are refused, and
// so are client certificates required without a CA. (etcd refuses https
// without a certificate, and a certificate without its key.)
func TestCheckTLSURLs(t *testing.T) {
	https, http := "https://10.0.0.1:2379", "http://10.0.0.1:2379"
	pair := transport.TLSInfo{CertFile: "a.crt", KeyFile: "a.key"}
	for _, c := range []struct {
		url  string
		tls  transport.TLSInfo
		want string // in the error; empty: none
	}{
		{http, transport.TLSInfo{}, ""},
		{https, pair, ""},
		{https, transport.TLSInfo{CertFile: "a.crt", KeyFile: "a.key", TrustedCAFile: "ca.crt", ClientCertAuth: true}, ""},
		{http, pair, "not https://"},
		{http, transport.TLSInfo{TrustedCAFile: "ca.crt"}, "not https://"},
		{https, transport.TLSInfo{CertFile: "a.crt", KeyFile: "a.key", ClientCertAuth: true}, "needs the CA file"},
	} {
		urls, err := parseURLs(c.url)
		if err != nil {
			t.Fatal(err)
		}
		err = checkTLSURLs("client", urls, c.tls)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s with %+v: %v; want %q", c.url, c.tls, err, c.want)
		}
	}
}

// TestCheckCertificateHosts: a member's certificate must name the hosts
// of the URLs it is reached at; an unspecified address names none.
func TestCheckCertificateHosts(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueMember("a", []string{"10.0.0.1", "etcd-a.example"}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	cert := filepath.Join(dir, "a.crt")
	if err := pki.WritePair(cert, filepath.Join(dir, "a.key"), certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		urls string
		ok   bool
	}{
		{"https://10.0.0.1:2379", true},
		{"https://etcd-a.example:2379, https://127.0.0.1:2379", true},
		{"https://0.0.0.0:2379", true},
		{"https://10.0.0.2:2379", false},
		{"https://10.0.0.1:2379,https://etcd-b.example:2379", false},
	} {
		urls, err := parseURLs(c.urls)
		if err != nil {
			t.Fatal(err)
		}
		err = checkCertificateHosts(cert, urls, "a")
		if c.ok != (err == nil) {
			t.Errorf("%s: %v", c.urls, err)
		}
		if err != nil && !strings.Contains(err.Error(), "leasehold etcd cert --member a --hosts") {
			t.Errorf("%s: %v; want it to say how to issue the certificate", c.urls, err)
		}
	}
	if err := checkCertificateHosts("", nil, "a"); err != nil {
		t.Errorf("no certificate: %v", err)
	}
}
