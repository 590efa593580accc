package apiserver_test

import (
	"crypto/tls"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/server/healthz"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/auth"
)

// TestHealthEndpoints: /healthz, /livez and /readyz answer as
// kube-apiserver's do: "ok" to anyone, each check on a line with
// ?verbose, in kube-apiserver's order, a check left out with ?exclude, one
// check alone at ROOT/NAME for those allowed (system:monitoring, not
// alice), /readyz alone failing once the server stops being ready, and
// all three once the log is blocked, with the reasons withheld.
func TestHealthEndpoints(t *testing.T) {
	const monitorToken = "monitor-token"
	users := authUsers()
	users[monitorToken] = &auth.User{Name: "prometheus", Groups: []string{"system:monitoring", auth.GroupAuthenticated}}
	logBlocked := new(atomic.Bool)
	logCheck := healthz.NamedCheck("log", func(*http.Request) error {
		if logBlocked.Load() {
			return errors.New("logging blocked")
		}
		return nil
	})
	s := apiservertest.Start(t, apiservertest.Options{Users: users, LogCheck: logCheck})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	t.Cleanup(client.CloseIdleConnections)
	get := func(token, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, body := roundTrip(t, client, req)
		return resp.StatusCode, string(body)
	}
	type answer struct {
		code int
		body string
	}
	check := func(when string, cases map[string]answer, token string) {
		t.Helper()
		for path, want := range cases {
			if code, body := get(token, path); code != want.code || (want.body != "" && body != want.body) {
				t.Errorf("%s: GET %s = %d %q; want %d %q", when, path, code, body, want.code, want.body)
			}
		}
	}

	check("anonymous", map[string]answer{
		"/healthz":        {200, "ok"},
		"/livez":          {200, "ok"},
		"/readyz":         {200, "ok"},
		"/readyz?verbose": {200, "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]shutdown ok\nreadyz check passed\n"},
		"/livez?verbose":  {200, "[+]ping ok\n[+]log ok\n[+]etcd ok\nlivez check passed\n"},
		"/livez?verbose&exclude=etcd&exclude=kms": {200, "[+]ping ok\n[+]log ok\n[+]etcd excluded: ok\n" +
			`warn: some health checks cannot be excluded: no matches for "kms"` + "\nlivez check passed\n"},
		// A single check tells its reason when it fails: not for anyone.
		"/readyz/etcd": {401, ""},
	}, "")
	check("alice", map[string]answer{"/readyz/etcd": {403, ""}, "/readyz?verbose": {200, ""}}, aliceToken)
	check("system:monitoring", map[string]answer{
		"/healthz/etcd":          {200, "ok"},
		"/livez/ping":            {200, "ok"},
		"/readyz/etcd":           {200, "ok"},
		"/readyz/log":            {200, "ok"},
		"/readyz/etcd-readiness": {200, "ok"},
		"/readyz/nothing":        {404, ""},
	}, monitorToken)

	s.API.StopReadiness()
	check("stopping", map[string]answer{
		"/readyz":                  {500, "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		"/readyz?verbose":          {500, "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n"},
		"/readyz?exclude=shutdown": {200, "ok"},
		"/livez":                   {200, "ok"},
		"/healthz":                 {200, "ok"},
	}, "")
	check("stopping, system:monitoring", map[string]answer{
		"/readyz/shutdown": {500, "internal server error: process is shutting down\n"},
	}, monitorToken)
	logBlocked.Store(true)
	check("log blocked", map[string]answer{
		"/livez":                   {500, "[+]ping ok\n[-]log failed: reason withheld\n[+]etcd ok\nlivez check failed\n"},
		"/healthz":                 {500, ""},
		"/readyz?exclude=shutdown": {500, ""},
	}, "")
	check("log blocked, system:monitoring", map[string]answer{
		"/livez/log": {500, "internal server error: logging blocked\n"},
	}, monitorToken)
	// The server still serves.
	if code, _ := get(apiservertest.AdminToken, "/apis/coordination.k8s.io/v1/namespaces/default/leases"); code != http.StatusOK {
		t.Errorf("a list while not ready: %d, want 200", code)
	}
}
