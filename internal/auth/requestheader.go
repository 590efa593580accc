package auth

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"k8s.io/utils/clock"
)

// RequestHeaderConfig configures RequestHeader: kube-apiserver's
// --requestheader-* flags.
type RequestHeaderConfig struct {
	// Roots returns the CAs the proxy's client certificate must chain to
	// now (--requestheader-client-ca-file).
	Roots func() *x509.CertPool
	// AllowedNames are the common names the proxy's certificate may have;
	// empty allows any the CAs signed.
	AllowedNames []string
	// UsernameHeaders are read in order: the first one set names the user.
	UsernameHeaders []string
	// UIDHeaders are read in order: the first one set is the user's uid.
	UIDHeaders []string
	// GroupHeaders each give groups, one a value; all of their values are
	// the user's groups.
	GroupHeaders []string
	// ExtraHeaderPrefixes start headers of extra user information: the rest
	// of the name, lower-cased and unescaped, is the key.
	ExtraHeaderPrefixes []string
	// Clock checks certificates' validity; nil is the real clock.
	Clock clock.PassiveClock
}

// RequestHeader authenticates requests that an authenticating proxy in
// front of the server forwards: the proxy proves itself with a client
// certificate of its own CA, and names the user it authenticated in
// headers, as kube-apiserver's request header authenticator reads them.
// Headers from anyone else are never read. On success the headers are
// removed from the request.
type RequestHeader struct {
	cfg RequestHeaderConfig
}

var _ Authenticator = (*RequestHeader)(nil)

// NewRequestHeader returns the authenticator of cfg.
func NewRequestHeader(cfg RequestHeaderConfig) *RequestHeader {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &RequestHeader{cfg: cfg}
}

// Authenticate implements Authenticator. A request without a user header
// or without a client certificate is not the proxy's: it is left to the
// others. One whose certificate the proxy's CAs did not sign, or whose name
// is not allowed, fails, unless another authenticator takes its own
// credentials.
func (a *RequestHeader) Authenticate(r *http.Request) (*User, bool, error) {
	name := ""
	for _, h := range a.cfg.UsernameHeaders {
		if name = strings.TrimSpace(r.Header.Get(h)); name != "" {
			break
		}
	}
	if name == "" || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	chain := r.TLS.PeerCertificates
	if err := verifyClientChain(chain, a.cfg.Roots(), a.cfg.Clock.Now()); err != nil {
		return nil, false, fmt.Errorf("request header: verifying the proxy's client certificate: %w", err)
	}
	if cn := chain[0].Subject.CommonName; len(a.cfg.AllowedNames) > 0 && !slices.Contains(a.cfg.AllowedNames, cn) {
		return nil, false, fmt.Errorf("request header: the client certificate's common name %q is not one of the allowed names", cn)
	}
	u := &User{Name: name}
	for _, h := range a.cfg.UIDHeaders {
		if u.UID = strings.TrimSpace(r.Header.Get(h)); u.UID != "" {
			break
		}
	}
	for _, h := range a.cfg.GroupHeaders {
		for _, g := range r.Header.Values(h) {
			if g = strings.TrimSpace(g); g != "" {
				u.Groups = append(u.Groups, g)
			}
		}
	}
	for key, values := range r.Header {
		for _, prefix := range a.cfg.ExtraHeaderPrefixes {
			rest, ok := cutPrefixFold(key, prefix)
			if !ok || rest == "" {
				continue
			}
			k, err := url.PathUnescape(rest)
			if err != nil {
				k = rest
			}
			if u.Extra == nil {
				u.Extra = map[string][]string{}
			}
			k = strings.ToLower(k)
			u.Extra[k] = append(u.Extra[k], values...)
		}
	}
	a.clear(r.Header)
	return u, true, nil
}

// clear removes the headers RequestHeader reads, once it has read them.
func (a *RequestHeader) clear(h http.Header) {
	for _, name := range slices.Concat(a.cfg.UsernameHeaders, a.cfg.UIDHeaders, a.cfg.GroupHeaders) {
		h.Del(name)
	}
	for key := range h {
		for _, prefix := range a.cfg.ExtraHeaderPrefixes {
			if _, ok := cutPrefixFold(key, prefix); ok {
				delete(h, key)
			}
		}
	}
}

// cutPrefixFold is strings.CutPrefix with the prefix matched without
// regard to case, as header names are.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}
