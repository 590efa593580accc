package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Impersonation headers, Kubernetes' own.
const (
	HeaderImpersonateUser        = "Impersonate-User"
	HeaderImpersonateUID         = "Impersonate-Uid"
	HeaderImpersonateGroup       = "Impersonate-Group"
	HeaderImpersonateExtraPrefix = "Impersonate-Extra-"
)

// Impersonation is what a request's Impersonate-* headers ask for.
type Impersonation struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// ParseImpersonation reads the Impersonate-* headers. It returns nil when
// there are none, and an error when they are inconsistent (groups, a uid
// or extras without a user).
func ParseImpersonation(h http.Header) (*Impersonation, error) {
	var imp Impersonation
	any := false
	for k, vs := range h {
		ck := http.CanonicalHeaderKey(k)
		switch {
		case ck == HeaderImpersonateUser:
			any = true
			if len(vs) > 0 {
				imp.User = vs[0]
			}
		case ck == HeaderImpersonateUID:
			any = true
			if len(vs) > 0 {
				imp.UID = vs[0]
			}
		case ck == HeaderImpersonateGroup:
			any = true
			imp.Groups = append(imp.Groups, vs...)
		case strings.HasPrefix(ck, HeaderImpersonateExtraPrefix):
			any = true
			key := strings.ToLower(ck[len(HeaderImpersonateExtraPrefix):])
			// Keys are percent-encoded so they may hold any character.
			if dk, err := url.PathUnescape(key); err == nil {
				key = dk
			}
			if key == "" {
				return nil, errors.New("empty Impersonate-Extra- key")
			}
			if imp.Extra == nil {
				imp.Extra = map[string][]string{}
			}
			imp.Extra[key] = append(imp.Extra[key], vs...)
		}
	}
	if !any {
		return nil, nil
	}
	if imp.User == "" {
		return nil, fmt.Errorf("requested impersonation of groups, uid or extras without impersonating a user")
	}
	return &imp, nil
}

// ImpersonationChecks lists the authorization checks an impersonation
// needs, as Kubernetes makes them: verb impersonate on users (or
// serviceaccounts in their namespace for system:serviceaccount:ns:name),
// groups, uids and userextras/<key>, each named by the impersonated value.
// Each check's User is left for the caller to fill in.
func (imp *Impersonation) ImpersonationChecks() []Attributes {
	var out []Attributes
	user := Attributes{Verb: "impersonate", ResourceRequest: true, Resource: "users", Name: imp.User}
	if rest, ok := strings.CutPrefix(imp.User, ServiceAccountPrefix); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok && ns != "" && name != "" && !strings.Contains(name, ":") {
			user = Attributes{Verb: "impersonate", ResourceRequest: true, Resource: "serviceaccounts", Namespace: ns, Name: name}
		}
	}
	out = append(out, user)
	for _, g := range imp.Groups {
		out = append(out, Attributes{Verb: "impersonate", ResourceRequest: true, Resource: "groups", Name: g})
	}
	if imp.UID != "" {
		out = append(out, Attributes{Verb: "impersonate", ResourceRequest: true, APIGroup: "authentication.k8s.io", Resource: "uids", Name: imp.UID})
	}
	for k, vs := range imp.Extra {
		for _, v := range vs {
			out = append(out, Attributes{Verb: "impersonate", ResourceRequest: true, APIGroup: "authentication.k8s.io", Resource: "userextras", Subresource: k, Name: v})
		}
	}
	return out
}

// ImpersonatedUser returns the user the request acts as: the named user and
// groups, plus system:authenticated (or, for system:anonymous,
// system:unauthenticated), plus system:serviceaccounts and
// system:serviceaccounts:<ns> for a service account.
func (imp *Impersonation) ImpersonatedUser() *User {
	u := &User{Name: imp.User, UID: imp.UID, Extra: imp.Extra}
	u.Groups = append(u.Groups, imp.Groups...)
	if rest, ok := strings.CutPrefix(imp.User, ServiceAccountPrefix); ok {
		if ns, _, ok := strings.Cut(rest, ":"); ok && len(imp.Groups) == 0 {
			u.Groups = append(u.Groups, GroupServiceAccounts, GroupServiceAccounts+":"+ns)
		}
	}
	if imp.User == UserAnonymous {
		if !u.InGroup(GroupUnauthenticated) {
			u.Groups = append(u.Groups, GroupUnauthenticated)
		}
	} else if !u.InGroup(GroupAuthenticated) && !u.InGroup(GroupUnauthenticated) {
		// As Kubernetes: one impersonating system:unauthenticated is
		// not made authenticated too.
		u.Groups = append(u.Groups, GroupAuthenticated)
	}
	return u
}
