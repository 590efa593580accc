package cli

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
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
				r.ca, _, _, r.err = credentials(f, "127.0.0.1", nil, r.tokens, clock.RealClock{})
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
