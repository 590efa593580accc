package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
)

// TestServeOnEtcdWithTLS: a server reaches an etcd that serves TLS and
// requires client certificates through --etcd-cafile, --etcd-certfile and
// --etcd-keyfile, and kubectl works through it; a server given the CA but
// no client certificate says in its log that etcd does not answer it, and
// what its etcd client met.
func TestServeOnEtcdWithTLS(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "etcd-pki")
	clk := clock.RealClock{}
	ca, err := pki.LoadOrCreateCA(pkiDir, clk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.LoadOrIssueServing(pkiDir, nil, clk); err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueClient("leasehold", "", nil, time.Hour, clk)
	if err != nil {
		t.Fatal(err)
	}
	caFile, clientCert, clientKey := filepath.Join(pkiDir, pki.CACertFile), filepath.Join(pkiDir, "client.crt"), filepath.Join(pkiDir, "client.key")
	for path, data := range map[string][]byte{clientCert: certPEM, clientKey: keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	addrs := freeAddrs(t, 2)
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	clientURL := url.URL{Scheme: "https", Host: addrs[0]}
	peerURL := url.URL{Scheme: "http", Host: addrs[1]}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.ClientTLSInfo = transport.TLSInfo{
		CertFile: filepath.Join(pkiDir, pki.ServingCertFile), KeyFile: filepath.Join(pkiDir, pki.ServingKeyFile),
		TrustedCAFile: caFile, ClientCertAuth: true,
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd with TLS: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd with TLS: %v", err)
	case <-time.After(startTimeout):
		t.Fatal("etcd with TLS not ready")
	}

	s := serveFor(t, filepath.Join(dir, "data"), "", dir, "--etcd-servers", clientURL.String(),
		"--etcd-cafile", caFile, "--etcd-certfile", clientCert, "--etcd-keyfile", clientKey)
	s.kubectl(t, "create", "namespace", "tls")
	if _, stderr, err := s.runKubectlStdin(t, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"over-tls"},"spec":{"holderIdentity":"a"}}`,
		"apply", "-n", "tls", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, stderr)
	}
	if got := s.kubectl(t, "get", "lease", "-n", "tls", "over-tls", "-o", "jsonpath={.spec.holderIdentity}"); got != "a" {
		t.Errorf("the lease written through etcd with TLS: holder %q", got)
	}

	// Without a client certificate, etcd refuses the handshake.
	p := startProcess(t, "serve", "--data-dir", filepath.Join(dir, "data2"), "--listen", "127.0.0.1:0",
		"--etcd-servers", clientURL.String(), "--etcd-cafile", caFile)
	p.waitOutput(t, "waiting for etcd to answer", 30*time.Second)
	// The reason depends on when the client learns of the refusal under
	// TLS 1.3: etcd's alert ("certificate required") or a broken pipe.
	if !strings.Contains(p.out.String(), "component=etcd-client") || !strings.Contains(p.out.String(), "error=") {
		t.Errorf("the log of a server without a client certificate does not give the etcd client's reason:\n%s", p.out.String())
	}
	if err := p.stop(); err != nil {
		t.Errorf("leasehold serve stopped while waiting for etcd: %v", err)
	}
}

// TestEtcdClusterWithTLS: the README's TLS cluster of `leasehold etcd`
// members, with certificates from `leasehold etcd cert`: members speak
// https to each other and to clients, and take only clients with a
// certificate of their CA. A server with its client certificate serves
// kubectl; `leasehold etcd member list` reaches the cluster with the same
// flags; a certificate of the API server's own CA (leasehold cert issue)
// is refused by etcd, and `leasehold etcd cert` refuses to keep etcd's CA
// in a server's data directory.
func TestEtcdClusterWithTLS(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "etcd-pki")
	names := []string{"a", "b", "c"}
	for _, n := range names {
		leasehold(t, "etcd", "cert", "--dir", pkiDir, "--member", n, "--hosts", "127.0.0.1")
	}
	leasehold(t, "etcd", "cert", "--dir", pkiDir, "--client", "client")
	members := startEtcdClusterTLS(t, dir, pkiDir, names...)
	var urls []string
	for _, m := range members {
		if !strings.HasPrefix(m.url, "https://") {
			t.Fatalf("member URL %s", m.url)
		}
		urls = append(urls, m.url)
	}
	etcdFlags := []string{"--etcd-servers", strings.Join(urls, ","), "--etcd-cafile", filepath.Join(pkiDir, "ca.crt"),
		"--etcd-certfile", filepath.Join(pkiDir, "client.crt"), "--etcd-keyfile", filepath.Join(pkiDir, "client.key")}
	s := serveFor(t, filepath.Join(dir, "data"), "", dir, etcdFlags...)
	ns := testNamespace(t, s)
	s.kubectlStdin(t, leaseManifest("over-tls", ns, "a"), "create", "-f", "-")
	if got := holder(getLease(t, s, ns, "over-tls")); got != "a" {
		t.Errorf("holder %q, want a", got)
	}
	list := leasehold(t, append([]string{"etcd", "member", "list"}, etcdFlags...)...)
	if strings.Count(list, "https://") != 2*len(names) {
		t.Errorf("member list over TLS, want each member's two https URLs:\n%s", list)
	}
	for _, n := range names {
		if !strings.Contains(list, " "+n+" ") {
			t.Errorf("member list over TLS lacks %s:\n%s", n, list)
		}
	}

	backup := filepath.Join(dir, "backup.db")
	if out := leasehold(t, append(append([]string{"etcd", "snapshot"}, etcdFlags...), backup)...); !strings.Contains(out, "Snapshot saved at "+backup) {
		t.Errorf("etcd snapshot over TLS printed %q", out)
	}

	// A member's /metrics says when its certificates expire.
	resp, err := etcdHTTPClient(t, pkiDir, "client").Get(urls[0] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for which, file := range map[string]string{"etcd-client": "a.crt", "etcd-peer": "a.crt", "etcd-ca": "ca.crt"} {
		data, err := os.ReadFile(filepath.Join(pkiDir, file))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertPEM(data)
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf(`leasehold_certificate_expiration_timestamp_seconds{certificate=%q} %g`, which, float64(cert.NotAfter.Unix()))
		if !strings.Contains(string(metrics), line+"\n") {
			t.Errorf("member a's /metrics lacks %s:\n%s", line, grepLines(string(metrics), "leasehold_certificate"))
		}
	}

	// The API server's CA is not etcd's.
	leasehold(t, "cert", "issue", "--data-dir", s.dataDir, "--user", "client", "--out-dir", filepath.Join(dir, "api"))
	if resp, err := etcdHTTPClient(t, pkiDir, "client").Get(urls[0] + "/health"); err != nil {
		t.Errorf("/health with etcd's client certificate: %v", err)
	} else {
		resp.Body.Close()
	}
	apiCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "api", "client.crt"), filepath.Join(dir, "api", "client.key"))
	if err != nil {
		t.Fatal(err)
	}
	other := etcdHTTPClient(t, pkiDir, "client")
	other.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{apiCert}
	if resp, err := other.Get(urls[0] + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("/health with a certificate of the API server's CA: %s; want the handshake refused", resp.Status)
	}
	p := startProcess(t, "etcd", "cert", "--dir", s.dataDir, "--client", "x")
	if err := p.cmd.Wait(); err == nil || !strings.Contains(p.out.String(), "a CA of its own") {
		t.Errorf("etcd cert in a server's data directory: %v\n%s", err, p.out.String())
	}
}
