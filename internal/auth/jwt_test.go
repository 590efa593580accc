package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gooidc "github.com/coreos/go-oidc"
	"github.com/coreos/go-oidc/v3/oidc/oidctest"
	jose "github.com/go-jose/go-jose/v4"
	"k8s.io/apiserver/pkg/apis/apiserver"
	testingclock "k8s.io/utils/clock/testing"
)

// testIssuer is an OpenID Connect issuer that signs with an RSA key (kid
// "k1"). Its key is handed to the authenticator (JWTOptions.KeySets), so
// that the authenticator is ready at once and never asks the issuer for
// its discovery document: the e2e tests cover discovery, against a real
// issuer over TLS.
type testIssuer struct {
	url string
	key *rsa.PrivateKey
}

var issuers atomic.Int32

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &testIssuer{url: fmt.Sprintf("https://issuer-%d.example", issuers.Add(1)), key: key}
}

// keySets are the keys of issuers, for JWTOptions.KeySets.
func keySets(issuers ...*testIssuer) map[string]gooidc.KeySet {
	m := map[string]gooidc.KeySet{}
	for _, is := range issuers {
		m[is.url] = rsaKeySet{&is.key.PublicKey}
	}
	return m
}

// rsaKeySet verifies a JWT's signature with one RSA key.
type rsaKeySet struct{ key *rsa.PublicKey }

func (k rsaKeySet) VerifySignature(_ context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		return nil, err
	}
	return jws.Verify(k.key)
}

// token signs claims, with iss, aud and exp (an hour after now) filled in
// unless claims set them.
func (is *testIssuer) token(t *testing.T, now time.Time, claims map[string]any) string {
	t.Helper()
	full := map[string]any{"iss": is.url, "aud": "leasehold", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	for k, v := range claims {
		full[k] = v
	}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	return oidctest.SignIDToken(is.key, "k1", "RS256", string(b))
}

func bearerRequest(token string) *http.Request {
	r := httptest.NewRequest("GET", "/api", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// reached fails the test unless every issuer of j is ready: with their
// keys given, they are from the start.
func reached(t *testing.T, j *JWT) {
	t.Helper()
	if errs := j.Unhealthy(); len(errs) > 0 {
		t.Fatalf("issuers not ready: %v", errs)
	}
}

// TestOIDCFlags: the --oidc-* flags' issuer, through Kubernetes' JWT
// authenticator.
func TestOIDCFlags(t *testing.T) {
	is := newTestIssuer(t)
	j, err := NewJWT(t.Context(), []apiserver.JWTAuthenticator{OIDCConfig{IssuerURL: is.url, ClientID: "leasehold", UsernameClaim: "email", GroupsClaim: "groups"}.JWTAuthenticator()}, JWTOptions{KeySets: keySets(is)})
	if err != nil {
		t.Fatal(err)
	}
	reached(t, j)
	now := time.Now()
	good := is.token(t, now, map[string]any{"email": "alice@example.com", "email_verified": true, "groups": []string{"devs"}})
	u, ok, err := j.Authenticate(bearerRequest(good))
	if !ok || err != nil || u.Name != "alice@example.com" || !slices.Equal(u.Groups, []string{"devs"}) {
		t.Fatalf("a good token: %+v, %v, %v", u, ok, err)
	}

	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	claims := `{"iss":%q,"aud":"leasehold","exp":%d,"email":"alice@example.com"}`
	refused := map[string]string{
		"expired":                  is.token(t, now.Add(-2*time.Hour), map[string]any{"email": "alice@example.com"}),
		"another audience":         is.token(t, now, map[string]any{"email": "alice@example.com", "aud": "other"}),
		"signed by another key":    oidctest.SignIDToken(otherKey, "k1", "RS256", fmt.Sprintf(claims, is.url, now.Add(time.Hour).Unix())),
		"an algorithm not allowed": oidctest.SignIDToken(ecKey, "k1", "ES256", fmt.Sprintf(claims, is.url, now.Add(time.Hour).Unix())),
		"an unverified email":      is.token(t, now, map[string]any{"email": "alice@example.com", "email_verified": false}),
		"no email":                 is.token(t, now, map[string]any{"sub": "alice"}),
		"a tampered signature":     good[:len(good)-8] + "AAAAAAAA",
	}
	for name, tok := range refused {
		if u, ok, err := j.Authenticate(bearerRequest(tok)); ok || err == nil {
			t.Errorf("%s: %+v, %v, %v; want refused", name, u, ok, err)
		}
	}
	// Other credentials, another issuer's tokens among them, are not its
	// to judge.
	for name, r := range map[string]*http.Request{
		"an opaque token": bearerRequest("not-a-jwt"),
		"another issuer":  bearerRequest(is.token(t, now, map[string]any{"email": "alice@example.com", "iss": "https://evil.example"})),
		"no token at all": httptest.NewRequest("GET", "/", nil),
	} {
		if u, ok, err := j.Authenticate(r); u != nil || ok || err != nil {
			t.Errorf("%s: %+v, %v, %v; want none", name, u, ok, err)
		}
	}
	// Stopped, it refuses every token of its issuer.
	j.Stop()
}

// TestOIDCFlagsClaims: how the --oidc-* flags map claims to a user, as
// kube-apiserver maps them.
func TestOIDCFlagsClaims(t *testing.T) {
	is := newTestIssuer(t)
	tests := []struct {
		name    string
		cfg     OIDCConfig
		claims  map[string]any
		want    *User
		wantErr string
	}{
		{"sub, prefixed by the issuer", OIDCConfig{}, map[string]any{"sub": "123"}, &User{Name: is.url + "#123"}, ""},
		{"email, not prefixed", OIDCConfig{UsernameClaim: "email"}, map[string]any{"email": "a@x.example"}, &User{Name: "a@x.example"}, ""},
		{"email verified", OIDCConfig{UsernameClaim: "email"}, map[string]any{"email": "a@x.example", "email_verified": true}, &User{Name: "a@x.example"}, ""},
		{"email not verified", OIDCConfig{UsernameClaim: "email"}, map[string]any{"email": "a@x.example", "email_verified": false}, nil, "not verified"},
		{"email_verified not a boolean", OIDCConfig{UsernameClaim: "email"}, map[string]any{"email": "a@x.example", "email_verified": "yes"}, nil, "email_verified"},
		{"a prefix of the flag's", OIDCConfig{UsernamePrefix: "oidc:"}, map[string]any{"sub": "123"}, &User{Name: "oidc:123"}, ""},
		{"no prefix", OIDCConfig{UsernamePrefix: "-"}, map[string]any{"sub": "123"}, &User{Name: "123"}, ""},
		{"the name claim missing", OIDCConfig{UsernameClaim: "name"}, map[string]any{"sub": "123"}, nil, `"name"`},
		{"the name not a string", OIDCConfig{}, map[string]any{"sub": 5}, nil, "sub"},
		{"the name empty, no prefix", OIDCConfig{UsernamePrefix: "-"}, map[string]any{"sub": ""}, nil, "empty"},
		{"groups as a list, prefixed", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups", GroupsPrefix: "oidc:"}, map[string]any{"sub": "a", "groups": []string{"x", "y"}}, &User{Name: "a", Groups: []string{"oidc:x", "oidc:y"}}, ""},
		{"groups as a string", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "role"}, map[string]any{"sub": "a", "role": "admin"}, &User{Name: "a", Groups: []string{"admin"}}, ""},
		{"groups absent", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups"}, map[string]any{"sub": "a"}, &User{Name: "a"}, ""},
		{"groups of another type", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups"}, map[string]any{"sub": "a", "groups": map[string]int{"x": 1}}, nil, "groups"},
		{"a required claim", OIDCConfig{UsernamePrefix: "-", RequiredClaims: map[string]string{"hd": "example.com"}}, map[string]any{"sub": "a", "hd": "example.com"}, &User{Name: "a"}, ""},
		{"a required claim of another value", OIDCConfig{UsernamePrefix: "-", RequiredClaims: map[string]string{"hd": "example.com"}}, map[string]any{"sub": "a", "hd": "evil.example"}, nil, "required claim"},
		{"a required claim missing", OIDCConfig{UsernamePrefix: "-", RequiredClaims: map[string]string{"hd": "example.com"}}, map[string]any{"sub": "a"}, nil, "required claim"},
		{"a system: name", OIDCConfig{UsernamePrefix: "-"}, map[string]any{"sub": "system:admin"}, nil, "starts with system:"},
		{"a system: group", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups"}, map[string]any{"sub": "a", "groups": []string{"system:masters"}}, nil, "starts with system:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.IssuerURL, cfg.ClientID = is.url, "leasehold"
			if err := CheckOIDC(cfg, nil); err != nil {
				t.Fatal(err)
			}
			j, err := NewJWT(t.Context(), []apiserver.JWTAuthenticator{cfg.JWTAuthenticator()}, JWTOptions{KeySets: keySets(is)})
			if err != nil {
				t.Fatal(err)
			}
			reached(t, j)
			u, ok, err := j.Authenticate(bearerRequest(is.token(t, time.Now(), tc.claims)))
			if tc.wantErr != "" {
				if ok || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v, %v; want an error containing %q", u, ok, err, tc.wantErr)
				}
				return
			}
			if !ok || err != nil || u.Name != tc.want.Name || !slices.Equal(u.Groups, tc.want.Groups) {
				t.Fatalf("got %+v, %v, %v; want %+v", u, ok, err, tc.want)
			}
		})
	}
}

func TestCheckOIDC(t *testing.T) {
	for _, tc := range []struct {
		cfg  OIDCConfig
		algs []string
		want string
	}{
		{OIDCConfig{IssuerURL: "http://issuer.example", ClientID: "c"}, nil, "--oidc-issuer-url: Invalid value"},
		{OIDCConfig{IssuerURL: "https://issuer.example?x=1", ClientID: "c"}, nil, "query"},
		{OIDCConfig{IssuerURL: "https:/issuer.example", ClientID: "c"}, nil, "--oidc-issuer-url: Invalid value: \"https:/issuer.example\": URL must name a host"},
		{OIDCConfig{IssuerURL: "https://issuer.example"}, nil, "--oidc-client-id: Required value"},
		{OIDCConfig{IssuerURL: "https://issuer.example", ClientID: "c"}, []string{"HS256"}, `"HS256" is not one of`},
		{OIDCConfig{IssuerURL: "https://issuer.example", ClientID: "c", CA: []byte("not PEM")}, nil, "--oidc-ca-file: Invalid value"},
	} {
		if err := CheckOIDC(tc.cfg, tc.algs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
	if err := CheckOIDC(OIDCConfig{IssuerURL: "https://issuer.example", ClientID: "c", RequiredClaims: map[string]string{"hd": "x"}}, []string{"RS256", "ES256"}); err != nil {
		t.Errorf("a good configuration: %v", err)
	}
}

// authnConfigFile is an AuthenticationConfiguration of two issuers: a
// company's identity provider mapped by claims, and a CI system's mapped
// by CEL expressions, with rules on both claims and user.
func authnConfigFile(corp, ci *testIssuer, anonymous string) string {
	return fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    audiences: [leasehold]
  claimMappings:
    username: {claim: email, prefix: ""}
    groups: {claim: groups, prefix: "corp:"}
  claimValidationRules:
  - {claim: hd, requiredValue: example.com}
- issuer:
    url: %s
    audiences: [leasehold, other]
    audienceMatchPolicy: MatchAny
  claimMappings:
    username: {expression: "'ci:' + claims.repository"}
    groups: {expression: "['ci', 'ci:' + claims.repository_owner]"}
    uid: {expression: "claims.sub"}
    extra:
    - {key: example.com/ref, valueExpression: "claims.ref"}
  claimValidationRules:
  - {expression: "claims.ref.startsWith('refs/heads/')", message: "only branches deploy"}
  userValidationRules:
  - {expression: "!user.username.contains('forbidden')", message: "that repository may not"}
%s`, corp.url, ci.url, anonymous)
}

// TestAuthenticationConfig: --authentication-config's issuers, claim
// mappings by claim and by CEL, rules on claims and user, anonymous
// requests for some paths only, and reloads of the file: a change is put
// in use, a broken file leaves the one in use and is reported once.
func TestAuthenticationConfig(t *testing.T) {
	corp, ci := newTestIssuer(t), newTestIssuer(t)
	path := filepath.Join(t.TempDir(), "authn.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(authnConfigFile(corp, ci, "anonymous:\n  enabled: true\n  conditions:\n  - path: /api\n"))
	var reloads []string
	c, err := NewAuthenticationConfig(t.Context(), path, AuthenticationConfigOptions{
		Clock:    testingclock.NewFakeClock(time.Now()),
		Reloaded: func(s string) { reloads = append(reloads, s) },
		KeySets:  keySets(corp, ci),
	})
	if err != nil {
		t.Fatal(err)
	}
	reached(t, c.state().jwt)
	authn := Union{c.JWT(), c.Anonymous()}
	now := time.Now()
	alice := corp.token(t, now, map[string]any{"email": "alice@example.com", "groups": []string{"devs"}, "hd": "example.com"})
	deploy := ci.token(t, now, map[string]any{"aud": "other", "sub": "repo:acme/web:ref:refs/heads/main", "repository": "acme/web", "repository_owner": "acme", "ref": "refs/heads/main"})
	check := func(name string, r *http.Request, want *User) {
		t.Helper()
		u, ok, err := authn.Authenticate(r)
		if want == nil {
			if ok {
				t.Errorf("%s: %+v; want refused", name, u)
			}
			return
		}
		if !ok || err != nil || u.Name != want.Name || u.UID != want.UID || !slices.Equal(u.Groups, want.Groups) || fmt.Sprint(u.Extra) != fmt.Sprint(want.Extra) {
			t.Errorf("%s: %+v, %v, %v; want %+v", name, u, ok, err, want)
		}
	}
	check("the company's user", bearerRequest(alice), &User{Name: "alice@example.com", Groups: []string{"corp:devs", GroupAuthenticated}})
	check("the CI system's job", bearerRequest(deploy), &User{Name: "ci:acme/web", UID: "repo:acme/web:ref:refs/heads/main", Groups: []string{"ci", "ci:acme", GroupAuthenticated}, Extra: map[string][]string{"example.com/ref": {"refs/heads/main"}}})
	check("another domain", bearerRequest(corp.token(t, now, map[string]any{"email": "eve@evil.example", "hd": "evil.example"})), nil)
	check("a tag, not a branch", bearerRequest(ci.token(t, now, map[string]any{"repository": "acme/web", "repository_owner": "acme", "ref": "refs/tags/v1"})), nil)
	check("a user the rules refuse", bearerRequest(ci.token(t, now, map[string]any{"repository": "acme/forbidden", "repository_owner": "acme", "ref": "refs/heads/main"})), nil)
	check("anonymous for /api", httptest.NewRequest("GET", "/api", nil), &User{Name: UserAnonymous, Groups: []string{GroupUnauthenticated}})
	check("anonymous elsewhere", httptest.NewRequest("GET", "/apis", nil), nil)
	if !c.HasAnonymous() {
		t.Error("HasAnonymous: false")
	}

	// Unchanged: nothing to do.
	if c.Reload(t.Context()) {
		t.Error("a reload of the same file replaced it")
	}
	// The CI issuer removed, anonymous requests no more.
	write(authnConfigFile(corp, ci, "")[:strings.Index(authnConfigFile(corp, ci, ""), "- issuer:\n    url: "+ci.url)])
	if !c.Reload(t.Context()) {
		t.Fatal("a changed file was not put in use")
	}
	check("the company's user, after", bearerRequest(alice), &User{Name: "alice@example.com", Groups: []string{"corp:devs", GroupAuthenticated}})
	check("the CI system's job, after", bearerRequest(deploy), nil)
	check("anonymous for /api, after", httptest.NewRequest("GET", "/api", nil), nil)
	// A broken file leaves the one in use, and is reported once.
	write("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {url: http://plain.example}\n")
	if c.Reload(t.Context()) || c.Reload(t.Context()) {
		t.Fatal("an invalid file was put in use")
	}
	check("the company's user, after a broken file", bearerRequest(alice), &User{Name: "alice@example.com", Groups: []string{"corp:devs", GroupAuthenticated}})
	if want := []string{"success", "failure"}; !slices.Equal(reloads, want) {
		t.Errorf("reloads reported: %v, want %v", reloads, want)
	}
}

func TestParseAuthenticationConfig(t *testing.T) {
	const head = "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\n"
	good := head + "jwt:\n- issuer: {url: https://idp.example, audiences: [a]}\n  claimMappings:\n    username: {expression: claims.sub}\n"
	if cfg, err := ParseAuthenticationConfig([]byte(good)); err != nil || len(cfg.JWT) != 1 {
		t.Fatalf("a good file: %+v, %v", cfg, err)
	}
	if _, err := ParseAuthenticationConfig([]byte(strings.Replace(good, "/v1\n", "/v1beta1\n", 1))); err != nil {
		t.Errorf("v1beta1: %v", err)
	}
	if _, err := ParseAuthenticationConfig([]byte(head)); err != nil {
		t.Errorf("no authenticators: %v", err)
	}
	for name, tc := range map[string]struct{ file, want string }{
		"an unknown field":         {strings.Replace(good, "audiences:", "audience: x, audiences:", 1), "unknown field"},
		"another kind":             {"apiVersion: apiserver.config.k8s.io/v1\nkind: AuthorizationConfiguration\n", "AuthenticationConfiguration"},
		"not YAML":                 {"{", "error"},
		"an http issuer":           {strings.Replace(good, "https://", "http://", 1), "https"},
		"an issuer without a host": {strings.Replace(good, "https://", "https:/", 1), "URL must name a host"},
		"a CEL expression broken":  {strings.Replace(good, "claims.sub", "claims.sub +", 1), "compilation failed"},
		"a CEL expression's type":  {strings.Replace(good, "claims.sub", "1", 1), "string"},
		"the username unmapped":    {strings.Replace(good, "{expression: claims.sub}", "{}", 1), "claimMappings.username"},
		"an issuer twice":          {good + "- issuer: {url: https://idp.example, audiences: [b]}\n  claimMappings:\n    username: {claim: sub, prefix: \"\"}\n", "Duplicate"},
		"two audiences, no policy": {strings.Replace(good, "[a]", "[a, b]", 1), "audienceMatchPolicy"},
		"an egress selector":       {strings.Replace(good, "audiences: [a]", "audiences: [a], egressSelectorType: controlplane", 1), "egress"},
		"conditions, not enabled":  {head + "anonymous:\n  enabled: false\n  conditions: [{path: /livez}]\n", "enabled"},
	} {
		if _, err := ParseAuthenticationConfig([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// FuzzParseAuthenticationConfig: any file either is refused or gives a
// configuration whose issuers are all https URLs with a host, each once.
func FuzzParseAuthenticationConfig(f *testing.F) {
	f.Add("apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer: {url: https://idp.example, audiences: [a]}\n  claimMappings:\n    username: {expression: claims.sub}\n")
	f.Add("apiVersion: apiserver.config.k8s.io/v1beta1\nkind: AuthenticationConfiguration\nanonymous: {enabled: true, conditions: [{path: /livez}]}\n")
	f.Add(`{"apiVersion":"apiserver.config.k8s.io/v1","kind":"AuthenticationConfiguration","jwt":[{"issuer":{"url":"https://a.example","audiences":["x"]},"claimMappings":{"username":{"claim":"sub","prefix":""}}}]}`)
	f.Fuzz(func(t *testing.T, file string) {
		cfg, err := ParseAuthenticationConfig([]byte(file))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, a := range cfg.JWT {
			u, err := url.Parse(a.Issuer.URL)
			if err != nil || u.Scheme != "https" || u.Host == "" || seen[a.Issuer.URL] {
				t.Fatalf("issuer %q accepted", a.Issuer.URL)
			}
			seen[a.Issuer.URL] = true
		}
	})
}
