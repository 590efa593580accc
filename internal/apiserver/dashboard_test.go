package apiserver_test

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

func TestDashboardFiles(t *testing.T) {
	files := fstest.MapFS{
		"index.html": {Data: []byte("<!doctype html><title>x</title>")},
		"app.js":     {Data: []byte("'use strict';")},
		"style.css":  {Data: []byte("body {}")},
		"sub/x.txt":  {Data: []byte("x")},
	}
	s := apiservertest.Start(t, apiservertest.Options{Dashboard: files})
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(client.CloseIdleConnections)

	for _, tc := range []struct {
		method, path string
		code         int
		contentType  string // prefix
		body         string // for files
		reason       metav1.StatusReason
		location     string
	}{
		{method: "GET", path: "/dashboard/", code: 200, contentType: "text/html", body: "<!doctype html><title>x</title>"},
		{method: "HEAD", path: "/dashboard/", code: 200, contentType: "text/html"},
		{method: "GET", path: "/dashboard/app.js", code: 200, contentType: "text/javascript", body: "'use strict';"},
		{method: "GET", path: "/dashboard/style.css", code: 200, contentType: "text/css", body: "body {}"},
		{method: "GET", path: "/dashboard/sub/x.txt", code: 200, contentType: "text/plain", body: "x"},
		{method: "GET", path: "/dashboard", code: 301, location: "/dashboard/"},
		{method: "GET", path: "/dashboard/index.html", code: 301, location: "./"},
		{method: "GET", path: "/dashboard/sub", code: 404, reason: metav1.StatusReasonNotFound},
		{method: "GET", path: "/dashboard/sub/", code: 404, reason: metav1.StatusReasonNotFound},
		{method: "GET", path: "/dashboard/missing.js", code: 404, reason: metav1.StatusReasonNotFound},
		{method: "GET", path: "/dashboard/..%2fapi", code: 404, reason: metav1.StatusReasonNotFound},
		{method: "POST", path: "/dashboard/", code: 405, reason: metav1.StatusReasonMethodNotAllowed},
		{method: "DELETE", path: "/dashboard/app.js", code: 405, reason: metav1.StatusReasonMethodNotAllowed},
		// The rest of the API still wants credentials.
		{method: "GET", path: "/dashboardx", code: 401, reason: metav1.StatusReasonUnauthorized},
		{method: "GET", path: "/api/v1/nodes", code: 401, reason: metav1.StatusReasonUnauthorized},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, s.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, body := roundTrip(t, client, req)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tc.code, body)
			}
			if tc.location != "" {
				if got := resp.Header.Get("Location"); got != tc.location {
					t.Errorf("Location %q, want %q", got, tc.location)
				}
			}
			if tc.reason != "" {
				var st metav1.Status
				if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" {
					t.Fatalf("not a Status: %s (%v)", body, err)
				}
				if st.Reason != tc.reason || st.Code != int32(tc.code) {
					t.Errorf("Status reason %q code %d, want %q %d", st.Reason, st.Code, tc.reason, tc.code)
				}
				return
			}
			if tc.code != 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, tc.contentType) {
				t.Errorf("Content-Type %q, want %s", got, tc.contentType)
			}
			if string(body) != tc.body {
				t.Errorf("body %q, want %q", body, tc.body)
			}
			for h, want := range map[string]string{
				"X-Content-Type-Options": "nosniff",
				"X-Frame-Options":        "DENY",
				"Referrer-Policy":        "no-referrer",
			} {
				if got := resp.Header.Get(h); got != want {
					t.Errorf("%s %q, want %q", h, got, want)
				}
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
		})
	}
}

func TestDashboardOff(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(s.URL + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /dashboard/ without a dashboard or credentials: %d, want 401", resp.StatusCode)
	}
}
