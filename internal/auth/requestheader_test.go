package auth_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

func TestRequestHeader(t *testing.T) {
	proxyCA := pkitest.Issue(t, "front-proxy-ca", nil, "ca")
	otherCA := pkitest.Issue(t, "client-ca", nil, "ca")
	pool := x509.NewCertPool()
	pool.AddCert(proxyCA.Cert)
	a := auth.NewRequestHeader(auth.RequestHeaderConfig{
		Roots:               func() *x509.CertPool { return pool },
		AllowedNames:        []string{"front-proxy", "spare-proxy"},
		UsernameHeaders:     []string{"X-Remote-User", "X-Other-User"},
		UIDHeaders:          []string{"X-Remote-Uid"},
		GroupHeaders:        []string{"X-Remote-Group"},
		ExtraHeaderPrefixes: []string{"X-Remote-Extra-"},
	})
	proxy := pkitest.Issue(t, "front-proxy", proxyCA, "client").Cert
	request := func(cert *x509.Certificate, headers map[string][]string) *http.Request {
		r := httptest.NewRequest("GET", "/api", nil)
		for k, vs := range headers {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
		if cert != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
		}
		return r
	}

	r := request(proxy, map[string][]string{
		"X-Remote-User":                   {"alice"},
		"X-Remote-Uid":                    {"a-1234"},
		"X-Remote-Group":                  {"devs", "ops"},
		"X-Remote-Extra-Scopes":           {"read", "write"},
		"X-Remote-Extra-Example.com%2fid": {"42"},
		"x-remote-extra-team":             {"a"},
		"Accept":                          {"application/json"},
	})
	u, ok, err := a.Authenticate(r)
	if err != nil || !ok {
		t.Fatalf("the proxy's request: %v, %v", ok, err)
	}
	want := &auth.User{Name: "alice", UID: "a-1234", Groups: []string{"devs", "ops"}, Extra: map[string][]string{"scopes": {"read", "write"}, "example.com/id": {"42"}, "team": {"a"}}}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("user %+v, want %+v", u, want)
	}
	for k := range r.Header {
		if k != "Accept" {
			t.Errorf("header %s left on the request", k)
		}
	}

	u, ok, err = a.Authenticate(request(proxy, map[string][]string{"X-Other-User": {"bob"}}))
	if err != nil || !ok || u.Name != "bob" || u.Groups != nil || u.Extra != nil {
		t.Errorf("the second user header: %+v, %v, %v; want bob", u, ok, err)
	}

	for _, tc := range []struct {
		name string
		r    *http.Request
		err  string // "" when the authenticator declines
	}{
		{"no user header", request(proxy, map[string][]string{"X-Remote-Group": {"system:masters"}}), ""},
		{"empty user header", request(proxy, map[string][]string{"X-Remote-User": {" "}}), ""},
		{"no certificate", request(nil, map[string][]string{"X-Remote-User": {"alice"}}), ""},
		{"a client of another CA", request(pkitest.Issue(t, "front-proxy", otherCA, "client").Cert, map[string][]string{"X-Remote-User": {"alice"}}), "verifying the proxy's client certificate"},
		{"a name not allowed", request(pkitest.Issue(t, "mallory", proxyCA, "client").Cert, map[string][]string{"X-Remote-User": {"alice"}}), `"mallory" is not one of the allowed names`},
		{"a server certificate", request(pkitest.Issue(t, "front-proxy", proxyCA, "server").Cert, map[string][]string{"X-Remote-User": {"alice"}}), "verifying the proxy's client certificate"},
	} {
		u, ok, err := a.Authenticate(tc.r)
		switch {
		case ok:
			t.Errorf("%s: authenticated as %+v", tc.name, u)
		case tc.err == "" && err != nil:
			t.Errorf("%s: error %v, want the request left to the others", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.err)
		}
		if tc.err != "" && tc.r.Header.Get("X-Remote-User") == "" {
			t.Errorf("%s: headers removed from a request not authenticated by them", tc.name)
		}
	}

	// Without allowed names any certificate of the proxy CAs will do.
	any := auth.NewRequestHeader(auth.RequestHeaderConfig{Roots: func() *x509.CertPool { return pool }, UsernameHeaders: []string{"X-Remote-User"}})
	if u, ok, err := any.Authenticate(request(pkitest.Issue(t, "mallory", proxyCA, "client").Cert, map[string][]string{"X-Remote-User": {"carol"}})); !ok || err != nil || u.Name != "carol" {
		t.Errorf("without allowed names: %+v, %v, %v; want carol", u, ok, err)
	}
}

// FuzzRequestHeader: whatever headers come, a request without the proxy's
// certificate is never authenticated by them, and one with it is the user
// its first user header names, with no header left behind.
func FuzzRequestHeader(f *testing.F) {
	f.Add("alice", "devs", "X-Remote-Extra-Scopes", "read")
	f.Add(" ", "", "X-Remote-Extra-%zz", "")
	f.Add("system:admin", "system:masters", "x-remote-extra-", "v")
	proxyCA := pkitest.Issue(f, "front-proxy-ca", nil, "ca")
	proxy := pkitest.Issue(f, "front-proxy", proxyCA, "client").Cert
	pool := x509.NewCertPool()
	pool.AddCert(proxyCA.Cert)
	a := auth.NewRequestHeader(auth.RequestHeaderConfig{
		Roots: func() *x509.CertPool { return pool }, UsernameHeaders: []string{"X-Remote-User"},
		GroupHeaders: []string{"X-Remote-Group"}, ExtraHeaderPrefixes: []string{"X-Remote-Extra-"},
	})
	f.Fuzz(func(t *testing.T, user, group, extraKey, extraValue string) {
		if k := http.CanonicalHeaderKey(extraKey); k == "X-Remote-User" || k == "X-Remote-Group" {
			return // would replace the headers above
		}
		for _, withCert := range []bool{false, true} {
			r := httptest.NewRequest("GET", "/api", nil)
			r.Header["X-Remote-User"] = []string{user}
			r.Header["X-Remote-Group"] = []string{group}
			r.Header[extraKey] = []string{extraValue}
			if withCert {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{proxy}}
			}
			u, ok, err := a.Authenticate(r)
			switch {
			case err != nil:
				t.Fatalf("error %v", err)
			case ok && !withCert:
				t.Fatalf("authenticated %+v without the proxy's certificate", u)
			case ok != (withCert && strings.TrimSpace(user) != ""):
				t.Fatalf("authenticated %v for user header %q", ok, user)
			case ok && u.Name != strings.TrimSpace(user):
				t.Fatalf("user %q for header %q", u.Name, user)
			case ok && (r.Header.Get("X-Remote-User") != "" || r.Header.Get("X-Remote-Group") != ""):
				t.Fatalf("headers left: %v", r.Header)
			}
		}
	})
}
