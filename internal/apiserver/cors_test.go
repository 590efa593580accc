package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

func TestParseCORSOrigins(t *testing.T) {
	for _, expr := range []string{`^https://example\.com(:|$)`, `//example\.com$`, `//[a-z]+\.example\.com:`} {
		if _, err := apiserver.ParseCORSOrigins([]string{expr}); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}
	// Not pinned at one end or the other (a scheme's "://" pins both, as
	// kube-apiserver reads them), not a regular expression.
	for _, expr := range []string{`example\.com`, `^example\.com`, `example\.com$`, `^https://a(`} {
		if _, err := apiserver.ParseCORSOrigins([]string{expr}); err == nil {
			t.Errorf("%s accepted", expr)
		}
	}
}

// TestCORS answers a page of an allowed origin as kube-apiserver does: its
// preflight with 204 before authentication, its requests with the CORS
// headers; other origins get neither.
func TestCORS(t *testing.T) {
	origins, err := apiserver.ParseCORSOrigins([]string{`^https://ops\.example\.com(:|$)`})
	if err != nil {
		t.Fatal(err)
	}
	s := apiservertest.Start(t, apiservertest.Options{CORSAllowedOrigins: origins})
	plain := apiservertest.Start(t, apiservertest.Options{})
	tlsConfig, err := rest.TLSConfigFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	t.Cleanup(client.CloseIdleConnections)
	const path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	tests := []struct {
		name          string
		srv           *apiservertest.Server
		method        string
		origin, token string
		code          int
		allowed       bool
	}{
		{"preflight", s, "OPTIONS", "https://ops.example.com", "", http.StatusNoContent, true},
		{"preflight with a port", s, "OPTIONS", "https://ops.example.com:8443", "", http.StatusNoContent, true},
		{"the request", s, "GET", "https://ops.example.com", apiservertest.AdminToken, http.StatusOK, true},
		{"the request without credentials", s, "GET", "https://ops.example.com", "", http.StatusUnauthorized, true},
		{"preflight from another origin", s, "OPTIONS", "https://ops.example.com.evil.test", "", http.StatusUnauthorized, false},
		{"a request from another origin", s, "GET", "https://evil.test", apiservertest.AdminToken, http.StatusOK, false},
		{"no Origin", s, "GET", "", apiservertest.AdminToken, http.StatusOK, false},
		{"no origins allowed", plain, "OPTIONS", "https://ops.example.com", "", http.StatusUnauthorized, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.srv.URL+path, nil)
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.method == "OPTIONS" {
				req.Header.Set("Access-Control-Request-Method", "GET")
				req.Header.Set("Access-Control-Request-Headers", "authorization")
			}
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, body := roundTrip(t, client, req)
			if resp.StatusCode != tt.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.code, body)
			}
			h := resp.Header
			if !tt.allowed {
				for k := range h {
					if strings.HasPrefix(k, "Access-Control-") {
						t.Errorf("%s: %q, want no CORS headers", k, h.Get(k))
					}
				}
				return
			}
			if h.Get("Access-Control-Allow-Origin") != tt.origin || h.Get("Access-Control-Allow-Credentials") != "true" ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") ||
				!strings.Contains(h.Get("Access-Control-Allow-Methods"), "PATCH") || h.Get("Access-Control-Expose-Headers") != "Date" {
				t.Errorf("CORS headers %v", h)
			}
		})
	}
}

func FuzzParseCORSOrigins(f *testing.F) {
	for _, s := range []string{`^https://example\.com(:|$)`, `example\.com`, `//a:`, `^(`, `$^`} {
		f.Add(s, "https://example.com")
	}
	f.Fuzz(func(t *testing.T, expr, origin string) {
		res, err := apiserver.ParseCORSOrigins([]string{expr})
		if err != nil {
			return
		}
		if len(res) != 1 {
			t.Fatalf("%q: %d expressions", expr, len(res))
		}
		pinned := (strings.Contains(expr, "^") || strings.Contains(expr, "//")) && (strings.Contains(expr, "$") || strings.Contains(expr, ":"))
		if !pinned {
			t.Errorf("%q accepted, but pins neither end", expr)
		}
		res[0].MatchString(origin)
	})
}
