package cli

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/pki"
)

// TestCredentialsSharedDirectory starts the credentials of several
// replicas at once on one fresh data directory, as the README's replicas
// sharing ./leasehold-data may be: all must end with the one CA on disk,
// a serving certificate it signed, and an admin kubeconfig whose token is
// the one whose digest every replica accepts.
func TestCredentialsSharedDirectory(t *testing.T) {
	for round := range 5 {
		dir := filepath.Join(t.TempDir(), "data")
		const replicas = 6
		type result struct {
			ca     *pki.CA
			tokens *auth.Tokens
			err    error
		}
		results := make([]result, replicas)
		var wg sync.WaitGroup
		for i := range replicas {
			wg.Go(func() {
				f := serveFlags{dataDir: dir, listen: "127.0.0.1:6443"}
				r := &results[i]
				r.tokens = auth.NewTokens()
				r.ca, _, _, r.err = credentials(f, "127.0.0.1", false, nil, r.tokens, clock.RealClock{}, slog.New(slog.DiscardHandler))
			})
		}
		wg.Wait()

		onDisk, err := pki.LoadOrCreateCA(dir, clock.RealClock{})
		if err != nil {
			t.Fatalf("round %d: the CA left on disk: %v", round, err)
		}
		for i, r := range results {
			if r.err != nil {
				t.Fatalf("round %d: replica %d: %v", round, i, r.err)
			}
			if !bytes.Equal(r.ca.CertPEM, onDisk.CertPEM) {
				t.Fatalf("round %d: replica %d serves with a CA other than the one on disk", round, i)
			}
		}
		roots := x509.NewCertPool()
		roots.AddCert(onDisk.Cert)
		servingPEM, err := os.ReadFile(filepath.Join(dir, pki.ServingCertFile))
		if err != nil {
			t.Fatal(err)
		}
		serving, err := pki.ParseCertPEM(servingPEM)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
			t.Fatalf("round %d: the serving certificate on disk: %v", round, err)
		}
		kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "admin.kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		digest, err := os.ReadFile(filepath.Join(dir, "admin-token.sha256"))
		if err != nil {
			t.Fatal(err)
		}
		for _, ai := range kc.AuthInfos {
			sum := sha256.Sum256([]byte(ai.Token))
			if hex.EncodeToString(sum[:]) != strings.TrimSpace(string(digest)) {
				t.Fatalf("round %d: admin.kubeconfig's token is not the one admin-token.sha256 holds", round)
			}
			req := httptest.NewRequest(http.MethodGet, "/api", nil)
			req.Header.Set("Authorization", "Bearer "+ai.Token)
			for i, r := range results {
				if u, ok, err := r.tokens.Authenticate(req); !ok || err != nil || u.Name != "leasehold-admin" {
					t.Fatalf("round %d: replica %d does not accept admin.kubeconfig's token: %v, %v", round, i, u, err)
				}
			}
		}
		for _, c := range kc.Clusters {
			if !bytes.Equal(c.CertificateAuthorityData, onDisk.CertPEM) {
				t.Fatalf("round %d: admin.kubeconfig trusts a CA other than the one on disk", round)
			}
		}
	}
}

// TestAdminCredentialsCopied: a replica's data directory given another's
// admin-token.sha256 but no admin.kubeconfig gets a kubeconfig of its own,
// and the copied token stays valid beside it (it was replaced, which
// locked every kubeconfig made with it out of the replica's next start).
// The kubeconfig follows a new --listen port, but not a replica's that
// shares the directory, and keeps a server set by hand.
func TestAdminCredentialsCopied(t *testing.T) {
	first := t.TempDir()
	if _, _, _, err := credentials(serveFlags{dataDir: first, listen: "127.0.0.1:6443"}, "127.0.0.1", false, nil, auth.NewTokens(), clock.RealClock{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	firstKC, err := clientcmd.LoadFromFile(filepath.Join(first, "admin.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	second := t.TempDir()
	for _, name := range []string{pki.CACertFile, pki.CAKeyFile, "admin-token.sha256"} {
		data, err := os.ReadFile(filepath.Join(first, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(second, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	accepts := func(tokens *auth.Tokens, kc *clientcmdapi.Config) bool {
		req := httptest.NewRequest(http.MethodGet, "/api", nil)
		req.Header.Set("Authorization", "Bearer "+kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token)
		u, ok, err := tokens.Authenticate(req)
		return ok && err == nil && u.Name == "leasehold-admin"
	}
	for start, listen := range []string{"127.0.0.1:6443", "127.0.0.1:7443"} {
		tokens := auth.NewTokens()
		if _, _, _, err := credentials(serveFlags{dataDir: second, listen: listen}, "127.0.0.1", false, nil, tokens, clock.RealClock{}, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		secondKC, err := clientcmd.LoadFromFile(filepath.Join(second, "admin.kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		if !accepts(tokens, firstKC) || !accepts(tokens, secondKC) {
			t.Errorf("start %d: the first kubeconfig accepted %v, the replica's own %v; want both", start, accepts(tokens, firstKC), accepts(tokens, secondKC))
		}
		if got := secondKC.Clusters[pki.KubeconfigCluster].Server; got != "https://"+listen {
			t.Errorf("start %d on %s: the kubeconfig's server is %s", start, listen, got)
		}
	}
	// A replica sharing the directory, on a port of its own, leaves the
	// kubeconfig to the server already there.
	if _, _, _, err := credentials(serveFlags{dataDir: second, listen: "127.0.0.1:9443"}, "127.0.0.1", true, nil, auth.NewTokens(), clock.RealClock{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(second, "admin.kubeconfig")
	kc, _ := clientcmd.LoadFromFile(path)
	if got := kc.Clusters[pki.KubeconfigCluster].Server; got != "https://127.0.0.1:7443" {
		t.Errorf("after a replica's start on 9443 the kubeconfig's server is %s, want 7443's kept", got)
	}
	kc.Clusters[pki.KubeconfigCluster].Server = "https://leasehold.example:6443"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := credentials(serveFlags{dataDir: second, listen: "127.0.0.1:8443"}, "127.0.0.1", false, nil, auth.NewTokens(), clock.RealClock{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if kc, _ = clientcmd.LoadFromFile(path); kc.Clusters[pki.KubeconfigCluster].Server != "https://leasehold.example:6443" {
		t.Errorf("a server set by hand became %s", kc.Clusters[pki.KubeconfigCluster].Server)
	}
}

// TestCredentialsNewCAWarns: a start that finds an earlier start's serving
// certificate but no CA makes a new one, and warns that the clients set up
// before do not trust it; a first start does not warn.
func TestCredentialsNewCAWarns(t *testing.T) {
	dir := t.TempDir()
	start := func() string {
		t.Helper()
		var logged bytes.Buffer
		if _, _, _, err := credentials(serveFlags{dataDir: dir, listen: "127.0.0.1:6443"}, "127.0.0.1", false, nil, auth.NewTokens(), clock.RealClock{}, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
			t.Fatal(err)
		}
		return logged.String()
	}
	if out := start(); out != "" {
		t.Errorf("a first start logged %q", out)
	}
	if out := start(); out != "" {
		t.Errorf("a second start, the CA in place, logged %q", out)
	}
	for _, f := range []string{pki.CACertFile, pki.CAKeyFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if out := start(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "made a new CA") {
		t.Errorf("a start without the CA logged %q, want a warning about the new CA", out)
	}
}
