package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/tick"
)

// OIDCConfig is what kube-apiserver's --oidc-* flags say: which issuer's ID
// tokens authenticate users, and which of their claims name them.
type OIDCConfig struct {
	// IssuerURL is the issuer, an https URL; its discovery document is at
	// IssuerURL/.well-known/openid-configuration. Tokens' iss must equal it.
	IssuerURL string
	// ClientID is the audience tokens must carry.
	ClientID string
	// UsernameClaim holds the user name; default "sub".
	UsernameClaim string
	// UsernamePrefix is put before every user name. Empty: the issuer URL
	// and "#" unless UsernameClaim is "email"; "-": nothing.
	UsernamePrefix string
	// GroupsClaim, when set, holds the groups: a string or a list of
	// strings; GroupsPrefix is put before each.
	GroupsClaim, GroupsPrefix string
	// RequiredClaims must each be in a token with exactly that string
	// value.
	RequiredClaims map[string]string
	// SigningAlgs are the algorithms tokens may be signed with; default
	// RS256.
	SigningAlgs []string
	// RootCAs verify the issuer's certificate; nil: the system's roots.
	RootCAs *x509.CertPool
	// Clock tells tokens' expiry and paces discovery; default real.
	Clock clock.WithTicker
	// Logger reports discovery's failures.
	Logger *slog.Logger
}

// oidcSigningAlgs are the algorithms --oidc-signing-algs takes, as
// kube-apiserver's.
var oidcSigningAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512, oidc.PS256, oidc.PS384, oidc.PS512}

// OIDCDiscoveryRetry is how often the issuer's discovery document is asked
// for again until it is had.
const OIDCDiscoveryRetry = 10 * time.Second

// OIDC authenticates bearer tokens that are ID tokens of one OpenID Connect
// issuer, as kube-apiserver's OIDC authenticator does. The issuer is found
// in the background, so that a server starts while its issuer is away;
// until then its tokens are refused. Its signing keys are fetched when a
// token names one not yet seen, so keys rotated at the issuer are taken.
type OIDC struct {
	cfg      OIDCConfig
	verifier atomic.Pointer[oidc.IDTokenVerifier]
}

var _ Authenticator = (*OIDC)(nil)

// CheckOIDC validates cfg and fills in its defaults.
func CheckOIDC(cfg *OIDCConfig) error {
	u, err := url.Parse(cfg.IssuerURL)
	switch {
	case err != nil:
		return fmt.Errorf("issuer URL: %w", err)
	case u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("issuer URL %q must be an https URL", cfg.IssuerURL)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("issuer URL %q must have no query or fragment", cfg.IssuerURL)
	case cfg.ClientID == "":
		return errors.New("a client ID is required with an issuer URL")
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "sub"
	}
	if len(cfg.SigningAlgs) == 0 {
		cfg.SigningAlgs = []string{oidc.RS256}
	}
	for _, alg := range cfg.SigningAlgs {
		if !slices.Contains(oidcSigningAlgs, alg) {
			return fmt.Errorf("signing algorithm %q is not one of %s", alg, strings.Join(oidcSigningAlgs, ", "))
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// NewOIDC checks cfg (CheckOIDC) and returns an authenticator that has no
// issuer yet: Run finds it.
func NewOIDC(cfg OIDCConfig) (*OIDC, error) {
	if err := CheckOIDC(&cfg); err != nil {
		return nil, err
	}
	return &OIDC{cfg: cfg}, nil
}

// Run asks for the issuer's discovery document until it has it, every
// OIDCDiscoveryRetry, and logs why while it fails. The signing keys are
// fetched with ctx's lifetime (it should be the server's).
func (o *OIDC) Run(ctx context.Context) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: o.cfg.RootCAs, MinVersion: tls.VersionTLS12}
	ctx = oidc.ClientContext(ctx, &http.Client{Transport: tr, Timeout: 30 * time.Second})
	if o.discover(ctx) {
		return
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	tick.Every(ctx, o.cfg.Clock, OIDCDiscoveryRetry, func() {
		if o.discover(ctx) {
			stop()
		}
	})
}

// discover reads the issuer's discovery document and makes the verifier,
// and reports whether it did.
func (o *OIDC) discover(ctx context.Context) bool {
	p, err := oidc.NewProvider(ctx, o.cfg.IssuerURL)
	if err != nil {
		if ctx.Err() == nil {
			o.cfg.Logger.Warn("OIDC issuer not reached; its tokens are refused until it is", "issuer", o.cfg.IssuerURL, "err", err, "retry", OIDCDiscoveryRetry)
		}
		return false
	}
	o.verifier.Store(p.VerifierContext(ctx, &oidc.Config{
		ClientID:             o.cfg.ClientID,
		SupportedSigningAlgs: o.cfg.SigningAlgs,
		Now:                  o.cfg.Clock.Now,
	}))
	o.cfg.Logger.Info("OIDC issuer found", "issuer", o.cfg.IssuerURL)
	return true
}

// Authenticate implements Authenticator. A bearer token that is not a JWT
// is not this authenticator's to judge.
func (o *OIDC) Authenticate(r *http.Request) (*User, bool, error) {
	token, ok := BearerToken(r)
	if !ok || strings.Count(token, ".") != 2 {
		return nil, false, nil
	}
	v := o.verifier.Load()
	if v == nil {
		return nil, false, errors.New("oidc: the issuer has not been reached yet")
	}
	idToken, err := v.Verify(r.Context(), token)
	if err != nil {
		return nil, false, fmt.Errorf("oidc: %w", err)
	}
	var claims map[string]json.RawMessage
	if err := idToken.Claims(&claims); err != nil {
		return nil, false, fmt.Errorf("oidc: claims: %w", err)
	}
	u, err := o.cfg.user(claims)
	if err != nil {
		return nil, false, fmt.Errorf("oidc: %w", err)
	}
	return u, true, nil
}

// user maps a verified token's claims to its user as kube-apiserver does:
// the user name from UsernameClaim with its prefix (an email only if not
// marked unverified), the groups from GroupsClaim with theirs, and every
// required claim present with its value. No name or group may start with
// "system:", which belongs to the server and Kubernetes' own identities.
func (cfg *OIDCConfig) user(claims map[string]json.RawMessage) (*User, error) {
	var name string
	if err := claimString(claims, cfg.UsernameClaim, &name); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("claim %q is empty", cfg.UsernameClaim)
	}
	if cfg.UsernameClaim == "email" {
		if raw, ok := claims["email_verified"]; ok {
			var verified bool
			if err := json.Unmarshal(raw, &verified); err != nil {
				return nil, fmt.Errorf("claim %q is not a boolean", "email_verified")
			}
			if !verified {
				return nil, fmt.Errorf("email %q is not verified", name)
			}
		}
	}
	switch cfg.UsernamePrefix {
	case "-":
	case "":
		if cfg.UsernameClaim != "email" {
			name = cfg.IssuerURL + "#" + name
		}
	default:
		name = cfg.UsernamePrefix + name
	}
	u := &User{Name: name}
	if cfg.GroupsClaim != "" {
		if raw, ok := claims[cfg.GroupsClaim]; ok {
			var groups []string
			var one string
			if err := json.Unmarshal(raw, &one); err == nil {
				groups = []string{one}
			} else if err := json.Unmarshal(raw, &groups); err != nil {
				return nil, fmt.Errorf("claim %q is neither a string nor a list of strings", cfg.GroupsClaim)
			}
			for _, g := range groups {
				u.Groups = append(u.Groups, cfg.GroupsPrefix+g)
			}
		}
	}
	for k, want := range cfg.RequiredClaims {
		var got string
		if err := claimString(claims, k, &got); err != nil || got != want {
			return nil, fmt.Errorf("required claim %q is not %q", k, want)
		}
	}
	if strings.HasPrefix(u.Name, "system:") {
		return nil, fmt.Errorf("user name %q starts with system:", u.Name)
	}
	for _, g := range u.Groups {
		if strings.HasPrefix(g, "system:") {
			return nil, fmt.Errorf("group %q starts with system:", g)
		}
	}
	return u, nil
}

// claimString reads the string claim k.
func claimString(claims map[string]json.RawMessage, k string, out *string) error {
	raw, ok := claims[k]
	if !ok {
		return fmt.Errorf("claim %q is missing", k)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("claim %q is not a string", k)
	}
	return nil
}
