package pki

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

func TestWriteKubeconfig(t *testing.T) {
	ca := newTestCA(t, t.TempDir())
	certPEM, keyPEM, err := ca.IssueClient("alice", "", nil, time.Hour, testingclock.NewFakePassiveClock(t0))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spec    KubeconfigSpec
		wantErr string
	}{
		{name: "token", spec: KubeconfigSpec{Server: "https://127.0.0.1:6443", CAPEM: ca.CertPEM, User: "admin", Token: "tok"}},
		{name: "client certificate", spec: KubeconfigSpec{Server: "https://[::1]:6443", CAPEM: ca.CertPEM, User: "alice", ClientCertPEM: certPEM, ClientKeyPEM: keyPEM}},
		{name: "no server", spec: KubeconfigSpec{CAPEM: ca.CertPEM, User: "admin", Token: "tok"}, wantErr: "server URL is empty"},
		{name: "no CA: the system's roots", spec: KubeconfigSpec{Server: "https://x", User: "admin", Token: "tok"}},
		{name: "bad CA", spec: KubeconfigSpec{Server: "https://x", CAPEM: []byte("junk"), User: "admin", Token: "tok"}, wantErr: "no CERTIFICATE"},
		{name: "no user", spec: KubeconfigSpec{Server: "https://x", CAPEM: ca.CertPEM, Token: "tok"}, wantErr: "user name is empty"},
		{name: "no credentials", spec: KubeconfigSpec{Server: "https://x", CAPEM: ca.CertPEM, User: "admin"}, wantErr: "neither"},
		{name: "both credentials", spec: KubeconfigSpec{Server: "https://x", CAPEM: ca.CertPEM, User: "admin", Token: "tok", ClientCertPEM: certPEM, ClientKeyPEM: keyPEM}, wantErr: "both"},
		{name: "certificate without key", spec: KubeconfigSpec{Server: "https://x", CAPEM: ca.CertPEM, User: "alice", ClientCertPEM: certPEM}, wantErr: "needs both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "sub", "admin.kubeconfig")
			err := WriteKubeconfig(path, tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				if _, err := os.Stat(path); err == nil {
					t.Errorf("a failed write left %s behind", path)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v", err)
			}
			checkMode(t, path)
			checkOnly(t, filepath.Dir(path), "admin.kubeconfig")
			cfg, err := clientcmd.LoadFromFile(path)
			if err != nil {
				t.Fatalf("clientcmd.LoadFromFile: %v", err)
			}
			wantCtx := tc.spec.User + "@leasehold"
			if cfg.CurrentContext != wantCtx {
				t.Errorf("current-context %q, want %q", cfg.CurrentContext, wantCtx)
			}
			ctx := cfg.Contexts[wantCtx]
			if ctx == nil || ctx.Cluster != "leasehold" || ctx.AuthInfo != tc.spec.User {
				t.Fatalf("context %q: got %+v", wantCtx, ctx)
			}
			cl := cfg.Clusters["leasehold"]
			if cl == nil || cl.Server != tc.spec.Server || string(cl.CertificateAuthorityData) != string(tc.spec.CAPEM) {
				t.Errorf("cluster: got %+v", cl)
			}
			u := cfg.AuthInfos[tc.spec.User]
			if u == nil || u.Token != tc.spec.Token ||
				string(u.ClientCertificateData) != string(tc.spec.ClientCertPEM) ||
				string(u.ClientKeyData) != string(tc.spec.ClientKeyPEM) {
				t.Errorf("user: got %+v", u)
			}
		})
	}
}

// TestKubeconfigTrustsServer starts a TLS server with a serving certificate
// issued for 127.0.0.1 and checks that the rest.Config from a written
// kubeconfig reaches it, authenticated by token or client certificate, and
// that a kubeconfig trusting another CA, or naming a host the certificate
// does not cover, does not.
func TestKubeconfigTrustsServer(t *testing.T) {
	// TLS verification reads the wall clock, so the certificates do too.
	clk := clock.RealClock{}
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, clk)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.LoadOrIssueServing(dir, []string{"127.0.0.1"}, clk)
	if err != nil {
		t.Fatal(err)
	}
	const token = "s3cret-token"
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.Cert)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") == "Bearer "+token:
			io.WriteString(w, "token")
		case r.TLS != nil && len(r.TLS.VerifiedChains) > 0:
			io.WriteString(w, "cert:"+r.TLS.VerifiedChains[0][0].Subject.CommonName)
		default:
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}
	})
	// start serves handler with the serving certificate on addr.
	start := func(addr string) *httptest.Server {
		srv := httptest.NewUnstartedServer(handler)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv.Listener.Close()
		srv.Listener = ln
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // failed handshakes are expected
		srv.TLS = &tls.Config{
			Certificates: []tls.Certificate{serving},
			ClientAuth:   tls.VerifyClientCertIfGiven,
			ClientCAs:    clientCAs,
			MinVersion:   tls.VersionTLS12,
		}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv
	}
	srv := start("127.0.0.1:0")
	// 127.0.0.2 is loopback too, but not in the certificate.
	stranger := start("127.0.0.2:0")

	certPEM, keyPEM, err := ca.IssueClient("alice", "", []string{"devs"}, time.Hour, clk)
	if err != nil {
		t.Fatal(err)
	}
	other, err := LoadOrCreateCA(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spec    KubeconfigSpec
		want    string
		wantErr string
	}{
		{
			name: "token",
			spec: KubeconfigSpec{Server: srv.URL, CAPEM: ca.CertPEM, User: "admin", Token: token},
			want: "token",
		},
		{
			name: "client certificate",
			spec: KubeconfigSpec{Server: srv.URL, CAPEM: ca.CertPEM, User: "alice", ClientCertPEM: certPEM, ClientKeyPEM: keyPEM},
			want: "cert:alice",
		},
		{
			name:    "other CA",
			spec:    KubeconfigSpec{Server: srv.URL, CAPEM: other.CertPEM, User: "admin", Token: token},
			wantErr: "certificate signed by unknown authority",
		},
		{
			name:    "host not in certificate",
			spec:    KubeconfigSpec{Server: stranger.URL, CAPEM: ca.CertPEM, User: "admin", Token: token},
			wantErr: "not 127.0.0.2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kubeconfig")
			if err := WriteKubeconfig(path, tc.spec); err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				t.Fatalf("BuildConfigFromFlags: %v", err)
			}
			cfg.Timeout = 30 * time.Second
			hc, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatalf("HTTPClientFor: %v", err)
			}
			resp, err := hc.Get(cfg.Host + "/version")
			if tc.wantErr != "" {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("request succeeded, want error containing %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(body) != tc.want {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, tc.want)
			}
		})
	}
}
