package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc/oidctest"
	testingclock "k8s.io/utils/clock/testing"
)

// testIssuer is an OpenID Connect issuer over TLS, with go-oidc's own test
// provider behind it, and an RSA key (kid "k1") it signs with.
type testIssuer struct {
	url   string
	roots *x509.CertPool
	key   *rsa.PrivateKey
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	provider := &oidctest.Server{PublicKeys: []oidctest.PublicKey{{PublicKey: key.Public(), KeyID: "k1", Algorithm: "RS256"}}}
	srv := httptest.NewTLSServer(provider)
	t.Cleanup(srv.Close)
	provider.SetIssuer(srv.URL)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	return &testIssuer{url: srv.URL, roots: roots, key: key}
}

// token signs claims, with iss, aud and exp filled in unless claims set
// them.
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

func TestOIDC(t *testing.T) {
	is := newTestIssuer(t)
	now := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(now)
	o, err := NewOIDC(OIDCConfig{IssuerURL: is.url, ClientID: "leasehold", UsernameClaim: "email", GroupsClaim: "groups", RootCAs: is.roots, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	good := is.token(t, now, map[string]any{"email": "alice@example.com", "email_verified": true, "groups": []string{"devs"}})
	if _, ok, err := o.Authenticate(bearerRequest(good)); ok || err == nil || !strings.Contains(err.Error(), "not been reached") {
		t.Fatalf("before discovery: ok %v, err %v; want the issuer not reached yet", ok, err)
	}
	o.Run(t.Context()) // returns once discovery succeeded

	u, ok, err := o.Authenticate(bearerRequest(good))
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
		"another issuer":           is.token(t, now, map[string]any{"email": "alice@example.com", "iss": "https://evil.example"}),
		"signed by another key":    oidctest.SignIDToken(otherKey, "k1", "RS256", fmt.Sprintf(claims, is.url, now.Add(time.Hour).Unix())),
		"an algorithm not allowed": oidctest.SignIDToken(ecKey, "k1", "ES256", fmt.Sprintf(claims, is.url, now.Add(time.Hour).Unix())),
		"an unverified email":      is.token(t, now, map[string]any{"email": "alice@example.com", "email_verified": false}),
		"no email":                 is.token(t, now, map[string]any{"sub": "alice"}),
		"a tampered payload":       strings.Replace(good, ".", ".x", 1),
	}
	for name, tok := range refused {
		if u, ok, err := o.Authenticate(bearerRequest(tok)); ok || err == nil {
			t.Errorf("%s: %+v, %v, %v; want refused", name, u, ok, err)
		}
	}
	// The good token expires with the (fake) clock.
	clk.Step(2 * time.Hour)
	if _, ok, err := o.Authenticate(bearerRequest(good)); ok || err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("a token past its exp: ok %v, err %v", ok, err)
	}
	// Other credentials are not its to judge.
	if u, ok, err := o.Authenticate(bearerRequest("not-a-jwt")); u != nil || ok || err != nil {
		t.Errorf("an opaque token: %+v, %v, %v; want none", u, ok, err)
	}
	if u, ok, err := o.Authenticate(httptest.NewRequest("GET", "/", nil)); u != nil || ok || err != nil {
		t.Errorf("no token: %+v, %v, %v; want none", u, ok, err)
	}
}

func TestOIDCClaims(t *testing.T) {
	const issuer = "https://issuer.example"
	tests := []struct {
		name    string
		cfg     OIDCConfig
		claims  string
		want    *User
		wantErr string
	}{
		{"sub, prefixed by the issuer", OIDCConfig{}, `{"sub":"123"}`, &User{Name: issuer + "#123"}, ""},
		{"email, not prefixed", OIDCConfig{UsernameClaim: "email"}, `{"email":"a@x.example"}`, &User{Name: "a@x.example"}, ""},
		{"email verified", OIDCConfig{UsernameClaim: "email"}, `{"email":"a@x.example","email_verified":true}`, &User{Name: "a@x.example"}, ""},
		{"email not verified", OIDCConfig{UsernameClaim: "email"}, `{"email":"a@x.example","email_verified":false}`, nil, "not verified"},
		{"email_verified not a boolean", OIDCConfig{UsernameClaim: "email"}, `{"email":"a@x.example","email_verified":"yes"}`, nil, "not a boolean"},
		{"a prefix of the flag's", OIDCConfig{UsernamePrefix: "oidc:"}, `{"sub":"123"}`, &User{Name: "oidc:123"}, ""},
		{"no prefix", OIDCConfig{UsernamePrefix: "-"}, `{"sub":"123"}`, &User{Name: "123"}, ""},
		{"the name claim missing", OIDCConfig{UsernameClaim: "name"}, `{"sub":"123"}`, nil, `"name" is missing`},
		{"the name not a string", OIDCConfig{}, `{"sub":5}`, nil, "not a string"},
		{"the name empty", OIDCConfig{}, `{"sub":""}`, nil, "empty"},
		{"groups as a list, prefixed", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups", GroupsPrefix: "oidc:"}, `{"sub":"a","groups":["x","y"]}`, &User{Name: "a", Groups: []string{"oidc:x", "oidc:y"}}, ""},
		{"groups as a string", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "role"}, `{"sub":"a","role":"admin"}`, &User{Name: "a", Groups: []string{"admin"}}, ""},
		{"groups absent", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups"}, `{"sub":"a"}`, &User{Name: "a"}, ""},
		{"groups of another type", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups"}, `{"sub":"a","groups":{"x":1}}`, nil, "neither a string nor a list"},
		{"a required claim", OIDCConfig{UsernamePrefix: "-", RequiredClaims: map[string]string{"hd": "example.com"}}, `{"sub":"a","hd":"example.com"}`, &User{Name: "a"}, ""},
		{"a required claim of another value", OIDCConfig{UsernamePrefix: "-", RequiredClaims: map[string]string{"hd": "example.com"}}, `{"sub":"a","hd":"evil.example"}`, nil, "required claim"},
		{"a required claim missing", OIDCConfig{UsernamePrefix: "-", RequiredClaims: map[string]string{"hd": "example.com"}}, `{"sub":"a"}`, nil, "required claim"},
		{"a system: name", OIDCConfig{UsernamePrefix: "-"}, `{"sub":"system:admin"}`, nil, "starts with system:"},
		{"a system: group", OIDCConfig{UsernamePrefix: "-", GroupsClaim: "groups"}, `{"sub":"a","groups":["system:masters"]}`, nil, "starts with system:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.IssuerURL, cfg.ClientID = issuer, "leasehold"
			if err := CheckOIDC(&cfg); err != nil {
				t.Fatal(err)
			}
			var claims map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.claims), &claims); err != nil {
				t.Fatal(err)
			}
			u, err := cfg.user(claims)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %+v, %v; want an error containing %q", u, err, tc.wantErr)
				}
				return
			}
			if err != nil || u.Name != tc.want.Name || !slices.Equal(u.Groups, tc.want.Groups) {
				t.Fatalf("got %+v, %v; want %+v", u, err, tc.want)
			}
		})
	}
}

func TestCheckOIDC(t *testing.T) {
	for _, tc := range []struct {
		cfg  OIDCConfig
		want string
	}{
		{OIDCConfig{IssuerURL: "http://issuer.example", ClientID: "c"}, "must be an https URL"},
		{OIDCConfig{IssuerURL: "https://issuer.example?x=1", ClientID: "c"}, "no query"},
		{OIDCConfig{IssuerURL: "https://issuer.example"}, "client ID is required"},
		{OIDCConfig{IssuerURL: "https://issuer.example", ClientID: "c", SigningAlgs: []string{"HS256"}}, `"HS256" is not one of`},
	} {
		if err := CheckOIDC(&tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// FuzzOIDCClaims feeds a verified token's claims, as JSON, to their mapping
// to a user: it either refuses them or names a user who is not one of the
// server's own.
func FuzzOIDCClaims(f *testing.F) {
	for _, s := range []string{`{"sub":"a"}`, `{"email":"a@b","email_verified":false}`, `{"sub":"a","groups":["x",1]}`, `{"sub":"a","groups":"x"}`, `{"sub":null}`, `{}`, `[]`} {
		f.Add(s, "email", "groups", "")
		f.Add(s, "sub", "groups", "-")
	}
	f.Fuzz(func(t *testing.T, claimsJSON, usernameClaim, groupsClaim, usernamePrefix string) {
		var claims map[string]json.RawMessage
		if json.Unmarshal([]byte(claimsJSON), &claims) != nil {
			return
		}
		cfg := OIDCConfig{IssuerURL: "https://issuer.example", ClientID: "c", UsernameClaim: usernameClaim, GroupsClaim: groupsClaim, UsernamePrefix: usernamePrefix}
		if CheckOIDC(&cfg) != nil {
			return
		}
		u, err := cfg.user(claims)
		if (u == nil) == (err == nil) {
			t.Fatalf("got %+v and %v: want exactly one", u, err)
		}
		if u == nil {
			return
		}
		if u.Name == "" || strings.HasPrefix(u.Name, "system:") {
			t.Fatalf("user name %q", u.Name)
		}
		for _, g := range u.Groups {
			if strings.HasPrefix(g, "system:") {
				t.Fatalf("group %q", g)
			}
		}
	})
}
