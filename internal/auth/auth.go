// Package auth says who a request comes from (authentication), whether they
// may do what they ask (authorization: RBAC and the Node authorizer), and
// what a node may write (node restriction). The API server calls an
// Authenticator on every request, puts the User in the request context, and
// asks an Authorizer about the request's Attributes.
//
// Authenticators: bearer tokens (a fixed set, Kubernetes' --token-auth-file
// CSV, and the hashed token store that `leasehold token` maintains), X.509
// client certificates signed by the server's CA (CN is the user, O the
// groups), and anonymous requests when enabled. Secrets are compared only as
// SHA-256 digests and never appear in errors or logs.
//
// The token store (TokenStore) is the one component here with a goroutine:
// Run polls the file's modification time and size every second on the
// injected clock and reloads it when either changes, until ctx ends. A
// token it does not know makes it check the file at once as well, at most
// once every 10 ms.
package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// User is an authenticated identity, as Kubernetes' user.Info.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// InGroup reports whether u is a member of group.
func (u *User) InGroup(group string) bool { return u != nil && slices.Contains(u.Groups, group) }

// Well-known users and groups, Kubernetes' own.
const (
	GroupMasters         = "system:masters"
	GroupAuthenticated   = "system:authenticated"
	GroupUnauthenticated = "system:unauthenticated"
	GroupNodes           = "system:nodes"
	GroupServiceAccounts = "system:serviceaccounts"
	UserAnonymous        = "system:anonymous"
	// NodeUserPrefix starts the user name of a node: system:node:<name>.
	NodeUserPrefix = "system:node:"
	// ServiceAccountPrefix starts a service account's user name:
	// system:serviceaccount:<namespace>:<name>.
	ServiceAccountPrefix = "system:serviceaccount:"
)

// NodeUser returns the identity of node name: system:node:<name> in the
// groups system:nodes and system:authenticated.
func NodeUser(name string) *User {
	return &User{Name: NodeUserPrefix + name, Groups: []string{GroupNodes, GroupAuthenticated}}
}

// NodeName returns the node name of a node identity, or false when u is not
// one (it must be named system:node:<name> and be in system:nodes).
func NodeName(u *User) (string, bool) {
	if u == nil || !u.InGroup(GroupNodes) || !strings.HasPrefix(u.Name, NodeUserPrefix) {
		return "", false
	}
	name := strings.TrimPrefix(u.Name, NodeUserPrefix)
	return name, name != ""
}

// Authenticator identifies the sender of a request. ok is false when the
// request carries no credentials this authenticator understands; err is set
// when it carries bad ones.
type Authenticator interface {
	Authenticate(r *http.Request) (u *User, ok bool, err error)
}

// AuthenticatorFunc is a function that is an Authenticator.
type AuthenticatorFunc func(r *http.Request) (*User, bool, error)

// Authenticate implements Authenticator.
func (f AuthenticatorFunc) Authenticate(r *http.Request) (*User, bool, error) { return f(r) }

// Tokens authenticates bearer tokens against a set kept in memory. Tokens
// are kept as SHA-256 digests, never in clear. It is safe for concurrent
// use.
type Tokens struct {
	mu    sync.RWMutex
	users map[[sha256.Size]byte]*User
	// expires holds the tokens that expire, and when; clock tells the
	// time for them.
	expires map[[sha256.Size]byte]time.Time
	clock   clock.PassiveClock
}

var _ Authenticator = (*Tokens)(nil)

// NewTokens returns an empty token set.
func NewTokens() *Tokens {
	return &Tokens{users: map[[sha256.Size]byte]*User{}, clock: clock.RealClock{}}
}

// Add makes token authenticate as u.
func (t *Tokens) Add(token string, u *User) { t.AddDigest(sha256.Sum256([]byte(token)), u) }

// AddDigest makes the token whose SHA-256 digest is sum authenticate as u,
// for tokens kept only as digests on disk.
func (t *Tokens) AddDigest(sum [sha256.Size]byte, u *User) {
	t.mu.Lock()
	t.users[sum] = u
	t.mu.Unlock()
}

// set makes the token whose digest is sum authenticate as u until
// expires (nil: until removed).
func (t *Tokens) set(sum [sha256.Size]byte, u *User, expires *time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.users[sum] = u
	switch {
	case expires != nil && t.expires == nil:
		t.expires = map[[sha256.Size]byte]time.Time{sum: *expires}
	case expires != nil:
		t.expires[sum] = *expires
	default:
		delete(t.expires, sum)
	}
}

// remove makes the token whose digest is sum authenticate no more.
func (t *Tokens) remove(sum [sha256.Size]byte) {
	t.mu.Lock()
	delete(t.users, sum)
	delete(t.expires, sum)
	t.mu.Unlock()
}

// len is the number of tokens.
func (t *Tokens) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.users)
}

// replaceEntries swaps the whole set for the tokens of a store's entries,
// whose digests are valid hex (as parsed).
func (t *Tokens) replaceEntries(entries []StoredToken) {
	users := make(map[[sha256.Size]byte]*User, len(entries))
	var expires map[[sha256.Size]byte]time.Time
	for _, e := range entries {
		sum, _ := hex.DecodeString(e.SHA256)
		users[[sha256.Size]byte(sum)] = e.user()
		if e.Expires != nil {
			if expires == nil {
				expires = map[[sha256.Size]byte]time.Time{}
			}
			expires[[sha256.Size]byte(sum)] = *e.Expires
		}
	}
	t.replace(users, expires)
}

// replace swaps the whole set, for reloads; expires says when the tokens
// that expire do.
func (t *Tokens) replace(users map[[sha256.Size]byte]*User, expires map[[sha256.Size]byte]time.Time) {
	t.mu.Lock()
	t.users, t.expires = users, expires
	t.mu.Unlock()
}

// Authenticate implements Authenticator.
func (t *Tokens) Authenticate(r *http.Request) (*User, bool, error) {
	token, ok := BearerToken(r)
	if !ok {
		return nil, false, nil
	}
	sum := sha256.Sum256([]byte(token))
	t.mu.RLock()
	u, found := t.users[sum]
	expires, expiring := t.expires[sum]
	t.mu.RUnlock()
	// Looking up the digest reveals nothing about the token through timing.
	switch {
	case !found:
		return nil, false, ErrInvalidToken
	case expiring && !t.clock.Now().Before(expires):
		return nil, false, ErrTokenExpired
	}
	return u, true, nil
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header, as Kubernetes reads it (scheme case-insensitive, surrounding
// spaces ignored, nothing after the token).
func BearerToken(r *http.Request) (string, bool) {
	return parseBearer(r.Header.Get("Authorization"))
}

func parseBearer(h string) (string, bool) {
	if h == "" {
		return "", false
	}
	scheme, token, found := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !found || !strings.EqualFold(scheme, "bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

type authError string

func (e authError) Error() string { return string(e) }

// ErrInvalidToken is the error of a bearer token nobody knows.
const ErrInvalidToken = authError("invalid bearer token")

// ErrTokenExpired is the error of a bearer token past its expiry.
const ErrTokenExpired = authError("bearer token has expired")

// Later is an Authenticator put in its place in a Union before it can be
// made (the token store in an etcd not yet reached): until Set, it
// recognises nothing.
type Later struct{ a atomic.Pointer[Authenticator] }

var _ Authenticator = (*Later)(nil)

// Set makes a the authenticator.
func (l *Later) Set(a Authenticator) { l.a.Store(&a) }

// Authenticate implements Authenticator.
func (l *Later) Authenticate(r *http.Request) (*User, bool, error) {
	if a := l.a.Load(); a != nil {
		return (*a).Authenticate(r)
	}
	return nil, false, nil
}

// Union tries each authenticator in order: the first that recognises the
// request's credentials decides. A request whose credentials some
// authenticator rejects fails, even if another would accept them, unless a
// later one accepts. Every authenticated user is put in
// system:authenticated.
type Union []Authenticator

var _ Authenticator = Union(nil)

// Authenticate implements Authenticator.
func (a Union) Authenticate(r *http.Request) (*User, bool, error) {
	var firstErr error
	for _, x := range a {
		u, ok, err := x.Authenticate(r)
		switch {
		case err != nil:
			if firstErr == nil {
				firstErr = err
			}
		case ok:
			return withAuthenticated(u), true, nil
		}
	}
	return nil, false, firstErr
}

func withAuthenticated(u *User) *User {
	if u.Name == UserAnonymous || u.InGroup(GroupAuthenticated) {
		return u
	}
	c := *u
	c.Groups = append(slices.Clip(u.Groups), GroupAuthenticated)
	return &c
}

// Anonymous authenticates every request without credentials as
// system:anonymous in system:unauthenticated. Put it last in a Union and
// only when anonymous requests are enabled: a request with an
// Authorization header, a WebSocket bearer subprotocol or a client
// certificate is never anonymous, so credentials the authenticators
// before it refused get 401, as kube-apiserver answers them.
type Anonymous struct{}

var _ Authenticator = Anonymous{}

// Authenticate implements Authenticator.
func (Anonymous) Authenticate(r *http.Request) (*User, bool, error) {
	if r.Header.Get("Authorization") != "" || (r.TLS != nil && len(r.TLS.PeerCertificates) > 0) {
		return nil, false, nil
	}
	if token, _, err := webSocketBearer(r); token != "" || err != nil {
		return nil, false, nil
	}
	return &User{Name: UserAnonymous, Groups: []string{GroupUnauthenticated}}, true, nil
}

type userKey struct{}

// WithUser returns ctx carrying u.
func WithUser(ctx context.Context, u *User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user in ctx, or nil.
func UserFrom(ctx context.Context) *User {
	u, _ := ctx.Value(userKey{}).(*User)
	return u
}
