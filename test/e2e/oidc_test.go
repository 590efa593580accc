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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/testbin"
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
	t.Parallel()
	needKubectl(t)
	addr, err := testbin.FreeLoopbackAddr()
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
	// The server logged why the issuer's tokens were refused at first,
	// and, within a second of it, that the issuer was reached.
	eventually(t, 10*time.Second, func() error {
		log, err := os.ReadFile(s.logPath)
		if err != nil {
			return err
		}
		for _, want := range []string{"oidc authenticator: initializing plugin", "JWT issuer reached; its tokens are taken"} {
			if !strings.Contains(string(log), want) {
				return fmt.Errorf("the server's log does not say %q", want)
			}
		}
		return nil
	})
}

// TestAuthenticationConfig: --authentication-config, as kube-apiserver's:
// two issuers in one file, one mapped by claims and one by CEL
// expressions with rules, seen through kubectl auth whoami; anonymous
// requests for /api only; the file changed while the server runs is put
// in use within seconds, and a broken one leaves the one in use, counted
// in /metrics.
func TestAuthenticationConfig(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	corp, ci := listeningIssuer(t), listeningIssuer(t)
	corp.writeCA(t)
	ca, err := os.ReadFile(corp.caFile)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "authn.yaml")
	write := func(corpGroupsPrefix, anonymous string) {
		t.Helper()
		caIndented := strings.ReplaceAll(strings.TrimSpace(string(ca)), "\n", "\n        ")
		cfg := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %[1]s
    audiences: [leasehold]
    certificateAuthority: |
        %[3]s
  claimMappings:
    username: {claim: email, prefix: ""}
    groups: {claim: groups, prefix: %[4]q}
- issuer:
    url: %[2]s
    audiences: [leasehold]
    certificateAuthority: |
        %[3]s
  claimMappings:
    username: {expression: "'ci:' + claims.repository"}
    groups: {expression: "['ci']"}
    extra:
    - {key: example.com/ref, valueExpression: claims.ref}
  claimValidationRules:
  - {expression: "claims.ref.startsWith('refs/heads/')", message: only branches deploy}
%[5]s`, corp.url, ci.url, caIndented, corpGroupsPrefix, anonymous)
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("corp:", "anonymous:\n  enabled: true\n  conditions: [{path: /api}]\n")
	s := newServer(t, "--authentication-config", file)
	whoami := func(token string) (string, error) {
		out, stderr, err := s.asToken(t, token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups} {.status.userInfo.extra}")
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, stderr)
		}
		return out, nil
	}
	alice := corp.token(t, "k1", time.Hour, map[string]any{"email": "alice@example.com", "groups": []string{"devs"}})
	deploy := ci.token(t, "k1", time.Hour, map[string]any{"sub": "x", "repository": "acme/web", "ref": "refs/heads/main"})
	eventually(t, 30*time.Second, func() error {
		if got, err := whoami(alice); err != nil || got != `alice@example.com ["corp:devs","system:authenticated"] ` {
			return fmt.Errorf("alice: %q, %v", got, err)
		}
		return nil
	})
	if got, err := whoami(deploy); err != nil || got != `ci:acme/web ["ci","system:authenticated"] {"example.com/ref":["refs/heads/main"]}` {
		t.Errorf("the CI job: %q, %v", got, err)
	}
	if got, err := whoami(ci.token(t, "k1", time.Hour, map[string]any{"repository": "acme/web", "ref": "refs/tags/v1"})); err == nil || !strings.Contains(err.Error(), "(Unauthorized)") {
		t.Errorf("a CI job of a tag, which the rule refuses: %q, %v; want 401", got, err)
	}
	anon := rest.AnonymousClientConfig(mustConfig(t, s))
	// /api is anonymous's, whom RBAC lets read no more than the health
	// checks (403, where a request nobody authenticated gets 401).
	if body, err := getRaw(t, anon, "/api"); !apierrors.IsForbidden(err) || !strings.Contains(body, `User \"system:anonymous\" cannot get path \"/api\"`) {
		t.Errorf("/api without credentials: %s, %v; want 403 for system:anonymous", body, err)
	}
	if _, err := getRaw(t, anon, "/api/v1/namespaces"); !apierrors.IsUnauthorized(err) {
		t.Errorf("namespaces without credentials: %v; want 401", err)
	}

	// A new groups prefix, and no anonymous requests: in use within the
	// server's 10 s check.
	write("sso:", "")
	eventually(t, 30*time.Second, func() error {
		if got, err := whoami(alice); err != nil || got != `alice@example.com ["sso:devs","system:authenticated"] ` {
			return fmt.Errorf("alice after the change: %q, %v", got, err)
		}
		return nil
	})
	if _, err := getRaw(t, anon, "/api"); !apierrors.IsUnauthorized(err) {
		t.Errorf("/api without credentials after the change: %v; want 401", err)
	}
	// A broken file: the one in use stays, and the failure is counted.
	if err := os.WriteFile(file, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {url: http://idp.example}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		out := s.kubectl(t, "get", "--raw", "/metrics")
		for _, want := range []string{`leasehold_authentication_config_reloads_total{status="failure"} 1`, `leasehold_authentication_config_reloads_total{status="success"} 1`} {
			if !strings.Contains(out, want+"\n") {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
	if got, err := whoami(deploy); err != nil || !strings.HasPrefix(got, "ci:acme/web ") {
		t.Errorf("the CI job after a broken file: %q, %v", got, err)
	}
	log, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"authentication config reloaded", "authentication config not reloaded; the one in use stays", "URL scheme must be https"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("the server's log does not say %q", want)
		}
	}
}

// listeningIssuer is an issuer serving at once on a free address.
func listeningIssuer(t *testing.T) *oidcIssuer {
	t.Helper()
	addr, err := testbin.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	is := newOIDCIssuer(t, addr)
	is.start(t)
	return is
}
