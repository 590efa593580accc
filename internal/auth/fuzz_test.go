package auth

import (
	"crypto/x509"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	rbacv1 "k8s.io/api/rbac/v1"
)

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x ", "Basic a", "", "Bearer a b", "Bearer \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := parseBearer(h)
		if ok && (tok == "" || strings.ContainsAny(tok, " \t")) {
			t.Errorf("parseBearer(%q) = %q", h, tok)
		}
	})
}

func FuzzWebSocketBearer(f *testing.F) {
	for _, s := range []string{WebSocketBearerPrefix + "YWJj, x", "x," + WebSocketBearerPrefix, WebSocketBearerPrefix + "a+b/", WebSocketBearerPrefix + "_w", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := &http.Request{Header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {h}}}
		token, others, err := webSocketBearer(r)
		if err != nil {
			return
		}
		if !utf8.ValidString(token) {
			t.Errorf("webSocketBearer(%q) = %q, not UTF-8", h, token)
		}
		for _, p := range others {
			if strings.HasPrefix(p, WebSocketBearerPrefix) {
				t.Errorf("webSocketBearer(%q) left the token's subprotocol among the others: %q", h, others)
			}
		}
	})
}

func FuzzParseTokenFile(f *testing.F) {
	for _, s := range []string{"t,u,1\n", "t,u,1,\"a,b\"\n", "# c\n,x,y\n", "\"unterminated,u,1\n", "a,b\na,b,c,d,e\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks, err := ParseTokenFile(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, u := range toks.users {
			if u.Name == "" {
				t.Errorf("a token with an empty user name from %q", s)
			}
		}
	})
}

func FuzzParseImpersonation(f *testing.F) {
	f.Add("Impersonate-User", "alice", "Impersonate-Group", "devs")
	f.Add("Impersonate-Extra-%41b", "x", "Impersonate-Uid", "1")
	f.Add("Impersonate-Group", "system:masters", "X", "y")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{}
		h[k1] = []string{v1}
		h[k2] = []string{v2}
		imp, err := ParseImpersonation(h)
		if err != nil || imp == nil {
			return
		}
		if imp.User == "" {
			t.Fatal("impersonation without a user")
		}
		checks := imp.ImpersonationChecks()
		if len(checks) < 1+len(imp.Groups) {
			t.Errorf("%d checks for %+v", len(checks), imp)
		}
		u := imp.ImpersonatedUser()
		if u.Name != imp.User {
			t.Errorf("impersonated %q, asked %q", u.Name, imp.User)
		}
	})
}

// FuzzCertUser reads identities from arbitrary certificate bytes.
func FuzzCertUser(f *testing.F) {
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, der []byte) {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return
		}
		u, ok, err := CertUser(c)
		if ok && (err != nil || u.Name == "" || u.Name != c.Subject.CommonName) {
			t.Errorf("CertUser = %+v, %v, %v", u, ok, err)
		}
	})
}

// FuzzRuleAllows checks that matching never panics and that "*" rules
// allow every resource request.
func FuzzRuleAllows(f *testing.F) {
	f.Add("get", "coordination.k8s.io", "leases", "status", "x", "get", "*/status")
	f.Fuzz(func(t *testing.T, verb, group, resource, sub, name, ruleVerb, ruleResource string) {
		a := Attributes{Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: sub, Name: name}
		RuleAllows(a, &rbacv1.PolicyRule{Verbs: []string{ruleVerb}, APIGroups: []string{group}, Resources: []string{ruleResource}, ResourceNames: []string{name}})
		if !RuleAllows(a, &rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}) {
			t.Errorf("* denies %+v", a)
		}
	})
}
