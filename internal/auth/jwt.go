package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gooidc "github.com/coreos/go-oidc"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/plugin/pkg/authenticator/token/oidc"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/pki"
	"github.com/leasehold/leasehold/internal/tick"
)

// OIDCConfig is what kube-apiserver's --oidc-* flags say: which issuer's ID
// tokens authenticate users, and which of their claims name them. It
// becomes one JWT authenticator of an AuthenticationConfiguration, as
// kube-apiserver makes it.
type OIDCConfig struct {
	// IssuerURL is the issuer, an https URL; tokens' iss must equal it.
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
	// CA is a PEM bundle to verify the issuer with; empty: the system's
	// roots.
	CA []byte
}

// JWTAuthenticator is cfg as the JWT authenticator kube-apiserver makes of
// its --oidc-* flags.
func (cfg OIDCConfig) JWTAuthenticator() apiserver.JWTAuthenticator {
	usernameClaim := cfg.UsernameClaim
	if usernameClaim == "" {
		usernameClaim = "sub"
	}
	prefix := cfg.UsernamePrefix
	switch {
	case prefix == "-":
		prefix = ""
	case prefix == "" && usernameClaim != "email":
		prefix = cfg.IssuerURL + "#"
	}
	a := apiserver.JWTAuthenticator{
		Issuer: apiserver.Issuer{URL: cfg.IssuerURL, Audiences: []string{cfg.ClientID}, CertificateAuthority: string(cfg.CA)},
		ClaimMappings: apiserver.ClaimMappings{
			Username: apiserver.PrefixedClaimOrExpression{Claim: usernameClaim, Prefix: &prefix},
		},
	}
	if cfg.GroupsClaim != "" {
		a.ClaimMappings.Groups = apiserver.PrefixedClaimOrExpression{Claim: cfg.GroupsClaim, Prefix: &cfg.GroupsPrefix}
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.RequiredClaims)) {
		a.ClaimValidationRules = append(a.ClaimValidationRules, apiserver.ClaimValidationRule{Claim: k, RequiredValue: cfg.RequiredClaims[k]})
	}
	return a
}

// CheckOIDC validates the JWT authenticator the --oidc-* flags make as
// kube-apiserver does, and algs, the algorithms tokens may be signed with.
func CheckOIDC(cfg OIDCConfig, algs []string) error {
	if err := checkAlgs(algs); err != nil {
		return err
	}
	c := &apiserver.AuthenticationConfiguration{JWT: []apiserver.JWTAuthenticator{cfg.JWTAuthenticator()}}
	errs := append(validation.ValidateAuthenticationConfiguration(celCompiler(), c, nil), issuerHosts(c)...)
	// Name the flags, not the fields they became.
	for _, e := range errs {
		for _, f := range oidcFlagFields {
			if strings.HasPrefix(e.Field, f.field) {
				e.Field = f.flag
				break
			}
		}
	}
	return errs.ToAggregate()
}

// oidcFlagFields are the fields of the JWT authenticator the --oidc-*
// flags make, and the flags, for validation errors.
var oidcFlagFields = []struct{ field, flag string }{
	{"jwt[0].issuer.url", "--oidc-issuer-url"},
	{"jwt[0].issuer.audiences", "--oidc-client-id"},
	{"jwt[0].issuer.certificateAuthority", "--oidc-ca-file"},
	{"jwt[0].claimMappings.username.prefix", "--oidc-username-prefix"},
	{"jwt[0].claimMappings.username", "--oidc-username-claim"},
	{"jwt[0].claimMappings.groups.prefix", "--oidc-groups-prefix"},
	{"jwt[0].claimMappings.groups", "--oidc-groups-claim"},
	{"jwt[0].claimValidationRules", "--oidc-required-claim"},
}

func checkAlgs(algs []string) error {
	for _, alg := range algs {
		if !slices.Contains(oidc.AllValidSigningAlgorithms(), alg) {
			return fmt.Errorf("signing algorithm %q is not one of %s", alg, strings.Join(oidc.AllValidSigningAlgorithms(), ", "))
		}
	}
	return nil
}

// configCodecs decode the configuration files of apiserver.config.k8s.io
// of every version kube-apiserver reads (v1, v1beta1, v1alpha1) into the
// internal types, with their defaults, strictly: an unknown or repeated
// field is an error, as in kube-apiserver.
var configCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	install.Install(s)
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// decodeConfig decodes data, YAML or JSON, which must be a T of
// apiserver.config.k8s.io (kind names it for the error).
func decodeConfig[T runtime.Object](data []byte, kind string) (T, error) {
	var zero T
	obj, gvk, err := configCodecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return zero, err
	}
	cfg, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("got %s, want an %s", gvk.Kind, kind)
	}
	return cfg, nil
}

// celCompiler is the CEL environment of claim mappings and validation
// rules, made once: making one takes tens of milliseconds.
var celCompiler = sync.OnceValue(authenticationcel.NewDefaultCompiler)

// ParseAuthenticationConfig decodes data, an AuthenticationConfiguration
// in YAML or JSON as kube-apiserver's --authentication-config holds it,
// and validates it as kube-apiserver does, CEL expressions compiled.
// leasehold has no egress selector, so an issuer may not name one.
func ParseAuthenticationConfig(data []byte) (*apiserver.AuthenticationConfiguration, error) {
	cfg, err := decodeConfig[*apiserver.AuthenticationConfiguration](data, "AuthenticationConfiguration")
	if err != nil {
		return nil, err
	}
	if errs := append(validation.ValidateAuthenticationConfiguration(celCompiler(), cfg, nil), issuerHosts(cfg)...); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	for i, a := range cfg.JWT {
		if a.Issuer.EgressSelectorType != "" {
			return nil, fmt.Errorf("jwt[%d].issuer.egressSelectorType: leasehold has no egress selector; reach the issuer directly", i)
		}
	}
	return cfg, nil
}

// issuerHosts refuses issuer and discovery URLs without a host, which
// Kubernetes' validation takes (it checks the scheme, not the host) and
// which can never be reached: "https:/idp.example" is a typo a server
// should not start with.
func issuerHosts(cfg *apiserver.AuthenticationConfiguration) field.ErrorList {
	var errs field.ErrorList
	for i, a := range cfg.JWT {
		p := field.NewPath("jwt").Index(i).Child("issuer")
		for _, f := range []struct{ name, url string }{{"url", a.Issuer.URL}, {"discoveryURL", a.Issuer.DiscoveryURL}} {
			if u, err := url.Parse(f.url); f.url != "" && err == nil && u.Host == "" {
				errs = append(errs, field.Invalid(p.Child(f.name), f.url, "URL must name a host"))
			}
		}
	}
	return errs
}

// JWT authenticates bearer tokens that are JWTs of the issuers an
// AuthenticationConfiguration names (or the --oidc-* flags name one of),
// with Kubernetes' own JWT authenticator: each issuer's discovery document
// and keys are fetched in the background, every 10 s until had, so that a
// server starts while an issuer is away and refuses its tokens until it
// answers; keys are fetched again when a token names one not yet seen; the
// claims are mapped to the user by claim and prefix or CEL expressions,
// and checked by the rules given.
//
// On top of Kubernetes' mapping, leasehold refuses a user with no name,
// and a user name or group that starts with "system:": those belong to the
// server's own identities and Kubernetes' (system:masters would make an
// issuer's user cluster-admin).
type JWT struct {
	issuers []jwtIssuer
	stop    context.CancelFunc
}

type jwtIssuer struct {
	url   string
	authn oidc.AuthenticatorTokenWithHealthCheck
}

var _ Authenticator = (*JWT)(nil)

// JWTOptions are NewJWT's.
type JWTOptions struct {
	// SigningAlgs are the algorithms tokens may be signed with; default
	// RS256.
	SigningAlgs []string
	// Logger says when each issuer is first reached (Kubernetes'
	// authenticator logs, through klog, why it is not).
	Logger *slog.Logger
	// Clock paces the look for that; default real.
	Clock clock.WithTicker
	// KeySets, by issuer URL, are the keys of issuers that are then never
	// asked for their discovery document or keys, and are reached at once
	// (tests).
	KeySets map[string]gooidc.KeySet
}

// NewJWT starts an authenticator for each of authns, which live until ctx
// ends or Stop.
func NewJWT(ctx context.Context, authns []apiserver.JWTAuthenticator, opts JWTOptions) (*JWT, error) {
	if err := checkAlgs(opts.SigningAlgs); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	ctx, stop := context.WithCancel(ctx)
	j := &JWT{stop: stop}
	for i, a := range authns {
		opts := oidc.Options{JWTAuthenticator: a, SupportedSigningAlgs: opts.SigningAlgs, Compiler: celCompiler(), KeySet: opts.KeySets[a.Issuer.URL]}
		if a.Issuer.CertificateAuthority != "" {
			ca, err := dynamiccertificates.NewStaticCAContent("jwt-issuer", []byte(a.Issuer.CertificateAuthority))
			if err != nil {
				stop()
				return nil, fmt.Errorf("jwt[%d].issuer.certificateAuthority: %w", i, err)
			}
			opts.CAContentProvider = ca
		}
		authn, err := oidc.New(ctx, opts)
		if err != nil {
			stop()
			return nil, fmt.Errorf("jwt[%d]: %w", i, err)
		}
		j.issuers = append(j.issuers, jwtIssuer{url: a.Issuer.URL, authn: authn})
	}
	go j.logReached(ctx, opts.Logger, opts.Clock)
	return j, nil
}

// logReached logs each issuer once it has been reached, looking every
// second until all have been.
func (j *JWT) logReached(ctx context.Context, log *slog.Logger, clk clock.WithTicker) {
	logged := make([]bool, len(j.issuers))
	look := func() bool {
		all := true
		for i, is := range j.issuers {
			switch {
			case logged[i]:
			case is.authn.HealthCheck() == nil:
				log.Info("JWT issuer reached; its tokens are taken", "issuer", is.url)
				logged[i] = true
			default:
				all = false
			}
		}
		return all
	}
	if look() {
		return
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	tick.Every(ctx, clk, time.Second, func() {
		if look() {
			stop()
		}
	})
}

// Stop stops fetching the issuers' keys; tokens are refused from then on.
func (j *JWT) Stop() { j.stop() }

// Unhealthy lists the issuers whose discovery document has not been had
// yet, with why.
func (j *JWT) Unhealthy() []error {
	var errs []error
	for _, is := range j.issuers {
		if err := is.authn.HealthCheck(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Authenticate implements Authenticator. A bearer token that is not a JWT
// of one of the issuers is not this authenticator's to judge.
func (j *JWT) Authenticate(r *http.Request) (*User, bool, error) {
	token, ok := BearerToken(r)
	if !ok || strings.Count(token, ".") != 2 {
		return nil, false, nil
	}
	var firstErr error
	for _, is := range j.issuers {
		resp, ok, err := is.authn.AuthenticateToken(r.Context(), token)
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
		case ok:
			info := resp.User
			u := &User{Name: info.GetName(), UID: info.GetUID(), Groups: info.GetGroups(), Extra: info.GetExtra()}
			if err := ownedBySystem(u); err != nil {
				return nil, false, fmt.Errorf("jwt: issuer %s: %w", is.url, err)
			}
			return u, true, nil
		}
	}
	return nil, false, firstErr
}

// ownedBySystem refuses a user with no name, or one named or grouped as
// the server's identities and Kubernetes' are.
func ownedBySystem(u *User) error {
	if u.Name == "" {
		return errors.New("the user name is empty")
	}
	if strings.HasPrefix(u.Name, "system:") {
		return fmt.Errorf("user name %q starts with system:", u.Name)
	}
	for _, g := range u.Groups {
		if strings.HasPrefix(g, "system:") {
			return fmt.Errorf("group %q starts with system:", g)
		}
	}
	return nil
}

// AuthenticationConfig is kube-apiserver's --authentication-config: an
// AuthenticationConfiguration file of JWT issuers and of which requests
// may be anonymous, read again every pki.FileCheckInterval while the server
// runs, as kube-apiserver reloads it. A file that changed and fails to
// parse or validate leaves the configuration in use as it was.
type AuthenticationConfig struct {
	path  string
	clock clock.WithTicker
	log   *slog.Logger
	// reloaded counts reloads by status (success, failure).
	reloaded func(status string)
	keySets  map[string]gooidc.KeySet

	// seen is the file's contents last read, by Reload.
	seen string
	cur  atomic.Pointer[authnState]
}

type authnState struct {
	jwt       *JWT
	anonymous *apiserver.AnonymousAuthConfig
}

// AuthenticationConfigOptions are NewAuthenticationConfig's.
type AuthenticationConfigOptions struct {
	// Clock paces the reloads and the wait for a new issuer; default real.
	Clock clock.WithTicker
	// Logger reports reloads.
	Logger *slog.Logger
	// Reloaded, when set, is called after each reload with its status,
	// success or failure.
	Reloaded func(status string)
	// KeySets are JWTOptions.KeySets (tests).
	KeySets map[string]gooidc.KeySet
}

// NewAuthenticationConfig reads and validates the file at path and starts
// its issuers' authenticators, which live until ctx ends; a file that
// cannot be read, parsed or validated is an error.
func NewAuthenticationConfig(ctx context.Context, path string, opts AuthenticationConfigOptions) (*AuthenticationConfig, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Reloaded == nil {
		opts.Reloaded = func(string) {}
	}
	c := &AuthenticationConfig{path: path, clock: opts.Clock, log: opts.Logger, reloaded: opts.Reloaded, keySets: opts.KeySets}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	st, err := c.build(ctx, data)
	if err != nil {
		return nil, err
	}
	c.seen = string(data)
	c.cur.Store(st)
	return c, nil
}

func (c *AuthenticationConfig) build(ctx context.Context, data []byte) (*authnState, error) {
	cfg, err := ParseAuthenticationConfig(data)
	if err != nil {
		return nil, err
	}
	j, err := NewJWT(ctx, cfg.JWT, JWTOptions{Logger: c.log, Clock: c.clock, KeySets: c.keySets})
	if err != nil {
		return nil, err
	}
	return &authnState{jwt: j, anonymous: cfg.Anonymous}, nil
}

func (c *AuthenticationConfig) state() *authnState { return c.cur.Load() }

// HasAnonymous reports whether the file says anything of anonymous
// requests (which --anonymous-auth may then not).
func (c *AuthenticationConfig) HasAnonymous() bool { return c.state().anonymous != nil }

// JWT is the file's JWT issuers, as they are at each request.
func (c *AuthenticationConfig) JWT() Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (*User, bool, error) { return c.state().jwt.Authenticate(r) })
}

// Anonymous is the file's anonymous requests, as they are at each
// request: none unless enabled; with conditions, only requests for one of
// their paths. Put it last in a Union, as Anonymous.
func (c *AuthenticationConfig) Anonymous() Authenticator {
	return AuthenticatorFunc(func(r *http.Request) (*User, bool, error) {
		a := c.state().anonymous
		if a == nil || !a.Enabled {
			return nil, false, nil
		}
		if len(a.Conditions) > 0 && !slices.ContainsFunc(a.Conditions, func(cond apiserver.AnonymousAuthCondition) bool { return cond.Path == r.URL.Path }) {
			return nil, false, nil
		}
		return Anonymous{}.Authenticate(r)
	})
}

// NewIssuerWait is how long a reload waits for the issuers of a new file
// to be reached before it puts the file in use, so that tokens of an
// issuer kept are not refused meanwhile. An issuer still away then is
// reached in the background, as at a start.
const NewIssuerWait = 10 * time.Second

// Run reads the file again every pki.FileCheckInterval (10 s) until ctx
// ends.
func (c *AuthenticationConfig) Run(ctx context.Context) {
	tick.Every(ctx, c.clock, pki.FileCheckInterval, func() { c.Reload(ctx) })
	c.state().jwt.Stop()
}

// Reload reads the file again and, if it changed, puts it in use once
// valid, and reports whether it did. A file that does not parse or
// validate is reported once (in the log and to Reloaded), not at each
// check. Run calls it; it is not safe to call from several goroutines at
// once.
func (c *AuthenticationConfig) Reload(ctx context.Context) bool {
	data, err := os.ReadFile(c.path)
	if err != nil {
		data = []byte("unreadable: " + err.Error())
	}
	if string(data) == c.seen {
		return false
	}
	c.seen = string(data)
	var st *authnState
	if err == nil {
		st, err = c.build(ctx, data)
	}
	if err != nil {
		c.log.Error("authentication config not reloaded; the one in use stays", "file", c.path, "err", err)
		c.reloaded("failure")
		return false
	}
	c.awaitIssuers(ctx, st.jwt)
	c.cur.Swap(st).jwt.Stop()
	c.log.Info("authentication config reloaded", "file", c.path, "jwtIssuers", len(st.jwt.issuers))
	c.reloaded("success")
	return true
}

// awaitIssuers waits up to NewIssuerWait for j's issuers to be reached,
// and logs those still away.
func (c *AuthenticationConfig) awaitIssuers(ctx context.Context, j *JWT) {
	deadline := c.clock.Now().Add(NewIssuerWait)
	for {
		errs := j.Unhealthy()
		if len(errs) == 0 {
			return
		}
		if !c.clock.Now().Before(deadline) {
			c.log.Warn("issuers of the new authentication config not reached yet; their tokens are refused until they are", "file", c.path, "err", errors.Join(errs...))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-c.clock.After(100 * time.Millisecond):
		}
	}
}
