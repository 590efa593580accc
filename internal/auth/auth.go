// Package auth says who a request comes from (authentication) and whether
// they may do what they ask (authorization). The API server calls an
// Authenticator on every request and puts the User in the request context.
package auth

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
)

// User is an authenticated identity, as Kubernetes' user.Info.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// Well-known groups.
const (
	GroupMasters       = "system:masters"
	GroupAuthenticated = "system:authenticated"
	GroupNodes         = "system:nodes"
)

// Authenticator identifies the sender of a request. ok is false when the
// request carries no credentials this authenticator understands; err is set
// when it carries bad ones.
type Authenticator interface {
	Authenticate(r *http.Request) (u *User, ok bool, err error)
}

// Tokens authenticates bearer tokens against a fixed set. Tokens are kept as
// SHA-256 digests, never in clear.
type Tokens struct {
	users map[[sha256.Size]byte]*User
}

var _ Authenticator = (*Tokens)(nil)

// NewTokens returns an empty token set.
func NewTokens() *Tokens { return &Tokens{users: map[[sha256.Size]byte]*User{}} }

// Add makes token authenticate as u.
func (t *Tokens) Add(token string, u *User) { t.users[sha256.Sum256([]byte(token))] = u }

// AddDigest makes the token whose SHA-256 digest is sum authenticate as u,
// for tokens kept only as digests on disk.
func (t *Tokens) AddDigest(sum [sha256.Size]byte, u *User) { t.users[sum] = u }

// Authenticate implements Authenticator.
func (t *Tokens) Authenticate(r *http.Request) (*User, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, false, nil
	}
	scheme, token, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return nil, false, nil
	}
	// Looking up the digest reveals nothing about the token through timing.
	if u, ok := t.users[sha256.Sum256([]byte(strings.TrimSpace(token)))]; ok {
		return u, true, nil
	}
	return nil, false, errInvalidToken
}

type authError string

func (e authError) Error() string { return string(e) }

const errInvalidToken = authError("invalid bearer token")

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
