package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"
)

// oidcIssuer is an OpenID Connect issuer as a company's identity provider
// would run one, over TLS: go-oidc's own test provider, whose keys may be
// rotated while it serves.
type oidcIssuer struct {
	url, caFile string
	mu          sync.Mutex
	provider    oidctest.Server
	keys        map[string]*rsa.PrivateKey // by kid
	srv         *httptest.Server
}

// newOIDCIssuer prepares an issuer at addr, with one signing key "k1";
// start serves it.
func newOIDCIssuer(t *testing.T, addr string) *oidcIssuer {
	t.Helper()
	is := &oidcIssuer{url: "https://" + addr, keys: map[string]*rsa.PrivateKey{}}
	is.addKey(t, "k1")
	is.provider.SetIssuer(is.url)
	is.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.mu.Lock()
		defer is.mu.Unlock()
		is.provider.ServeHTTP(w, r)
	}))
	is.caFile = filepath.Join(t.TempDir(), "issuer-ca.crt")
	t.Cleanup(is.srv.Close)
	return is
}

// start serves the issuer at its address, which nobody else may have
// taken meanwhile.
func (is *oidcIssuer) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", strings.TrimPrefix(is.url, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	is.srv.Listener.Close()
	is.srv.Listener = ln
	is.srv.StartTLS()
}

// writeCA writes the certificate the issuer serves (httptest's, for
// 127.0.0.1), for --oidc-ca-file.
func (is *oidcIssuer) writeCA(t *testing.T) {
	t.Helper()
	// httptest's certificate is the same for every server: take it from
	// one started for the purpose.
	probe := httptest.NewTLSServer(http.NotFoundHandler())
	defer probe.Close()
	if err := os.WriteFile(is.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: probe.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (is *oidcIssuer) addKey(t *testing.T, kid string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys[kid] = key
	is.provider.PublicKeys = append(is.provider.PublicKeys, oidctest.PublicKey{PublicKey: key.Public(), KeyID: kid, Algorithm: "RS256"})
}

// token is an ID token signed with kid for claims, valid for lifetime
// from now (negative: expired), for the audience leasehold.
func (is *oidcIssuer) token(t *testing.T, kid string, lifetime time.Duration, claims map[string]any) string {
	t.Helper()
	now := time.Now()
	full := map[string]any{"iss": is.url, "aud": "leasehold", "iat": now.Unix(), "exp": now.Add(lifetime).Unix()}
	for k, v := range claims {
		full[k] = v
	}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	key := is.keys[kid]
	is.mu.Unlock()
	return oidctest.SignIDToken(key, kid, "RS256", string(b))
}

// TestOIDC: with the --oidc-* flags, ID tokens of an OpenID Connect issuer
// authenticate users through kubectl --token, named and grouped by the
// claims the flags say, and RBAC decides what they may do. A server
// started while its issuer is away refuses its tokens with 401 and takes
// them once the issuer answers; keys the issuer adds are fetched when a
// token names one; tokens expired, of an unverified email, or lacking a
// required claim get 401.
func TestOIDC(t *testing.T) {
	needKubectl(t)
	addr, err := freeListenAddr()
	if err != nil {
		t.Fatal(err)
	}
	is := newOIDCIssuer(t, addr)
	is.writeCA(t)
	s := newServer(t, "--oidc-issuer-url", is.url, "--oidc-client-id", "leasehold", "--oidc-ca-file", is.caFile,
		"--oidc-username-claim", "email", "--oidc-groups-claim", "groups", "--oidc-groups-prefix", "oidc:",
		"--oidc-required-claim", "hd=example.com")
	s.kubectl(t, "create", "role", "lease-reader", "--verb=get,list", "--resource=leases", "-n", "default")
	s.kubectl(t, "create", "rolebinding", "devs-read-leases", "--role=lease-reader", "--group=oidc:devs", "-n", "default")

	alice := is.token(t, "k1", time.Hour, map[string]any{"email": "alice@example.com", "email_verified": true, "groups": []string{"devs"}, "hd": "example.com"})
	whoami := func(token string) (string, error) {
		out, stderr, err := s.asToken(t, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, stderr)
		}
		return out, nil
	}
	// The issuer is not up yet.
	if got, err := whoami(alice); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
		t.Fatalf("a token before the issuer answered: %q, %v; want 401", got, err)
	}
	is.start(t)
	eventually(t, 30*time.Second, func() error {
		got, err := whoami(alice)
		if err != nil || got != `alice@example.com ["oidc:devs","system:authenticated"]` {
			return fmt.Errorf("alice: %q, %v", got, err)
		}
		return nil
	})
	if out, stderr, err := s.asToken(t, alice, "get", "leases", "-n", "default"); err != nil {
		t.Errorf("alice lists leases in default, as her group may: %v\n%s%s", err, out, stderr)
	}
	if _, stderr, err := s.asToken(t, alice, "get", "nodes"); err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Errorf("alice lists nodes, which no role grants her: %v %s; want 403", err, stderr)
	}

	// A key the issuer adds is fetched when a token names it.
	is.addKey(t, "k2")
	bob := is.token(t, "k2", time.Hour, map[string]any{"email": "bob@example.com", "hd": "example.com"})
	if got, err := whoami(bob); err != nil || got != `bob@example.com ["system:authenticated"]` {
		t.Errorf("bob, with a key added to the issuer: %q, %v", got, err)
	}

	for name, token := range map[string]string{
		"expired":                is.token(t, "k1", -time.Minute, map[string]any{"email": "alice@example.com", "hd": "example.com"}),
		"an unverified email":    is.token(t, "k1", time.Hour, map[string]any{"email": "eve@example.com", "email_verified": false, "hd": "example.com"}),
		"another hd":             is.token(t, "k1", time.Hour, map[string]any{"email": "eve@example.com", "hd": "evil.example"}),
		"for another audience":   is.token(t, "k1", time.Hour, map[string]any{"email": "alice@example.com", "hd": "example.com", "aud": "another-client"}),
		"with its signature cut": alice[:len(alice)-8],
	} {
		if got, err := whoami(token); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
			t.Errorf("a token %s: %q, %v; want 401", name, got, err)
		}
	}
	// The server logged why the issuer's tokens were refused at first.
	log, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OIDC issuer not reached; its tokens are refused until it is", "OIDC issuer found"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the server's log does not say %q", want)
		}
	}
}
