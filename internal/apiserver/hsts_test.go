package apiserver_test

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

func TestHSTSHeader(t *testing.T) {
	tests := []struct {
		directives []string
		want       string
		ok         bool
	}{
		{nil, "", true},
		{[]string{"max-age=31536000", "includeSubDomains", "preload"}, "max-age=31536000; includeSubDomains; preload", true},
		{[]string{"max-age=0"}, "max-age=0", true},
		{[]string{"includeSubDomains"}, "", false},
		{[]string{"max-age=1y"}, "", false},
		{[]string{"max-age=-1"}, "", false},
		{[]string{"max-age=+5"}, "", false},
		{[]string{"max-age=60", "includesubdomains"}, "", false},
	}
	for _, tt := range tests {
		got, err := apiserver.HSTSHeader(tt.directives)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("HSTSHeader(%q) = %q, %v; want %q, ok %v", tt.directives, got, err, tt.want, tt.ok)
		}
	}
}

// TestHSTS sends the header on every response, an error's and a public
// path's too, as kube-apiserver does.
func TestHSTS(t *testing.T) {
	const hsts = "max-age=31536000; includeSubDomains"
	s := apiservertest.Start(t, apiservertest.Options{HSTS: hsts})
	tlsConfig, err := rest.TLSConfigFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	t.Cleanup(client.CloseIdleConnections)
	for _, tc := range []struct {
		path, token string
		code        int
	}{
		{"/api/v1/namespaces", apiservertest.AdminToken, http.StatusOK},
		{"/api/v1/namespaces", "", http.StatusUnauthorized},
		{"/healthz", "", http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", s.URL+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, body := roundTrip(t, client, req)
		if resp.StatusCode != tc.code || resp.Header.Get("Strict-Transport-Security") != hsts {
			t.Errorf("GET %s: %d, Strict-Transport-Security %q; want %d and %q (%s)", tc.path, resp.StatusCode, resp.Header.Get("Strict-Transport-Security"), tc.code, hsts, body)
		}
	}
}

func FuzzHSTSHeader(f *testing.F) {
	f.Add("max-age=60,includeSubDomains")
	f.Add("preload,max-age=x")
	f.Fuzz(func(t *testing.T, list string) {
		directives := strings.Split(list, ",")
		h, err := apiserver.HSTSHeader(directives)
		if err != nil {
			return
		}
		if !strings.Contains(h, "max-age=") || strings.ContainsAny(h, "\r\n") {
			t.Errorf("HSTSHeader(%q) = %q", directives, h)
		}
	})
}
