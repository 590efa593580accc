package apiserver

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
)

// TestProbabilisticGoaway: a request chosen gets its response, and the
// client's next request goes on a new connection; one not chosen, a
// watch, or one to the skipped address leaves the connection open.
func TestProbabilisticGoaway(t *testing.T) {
	for _, tc := range []struct {
		name     string
		draw     float64
		path     string
		skipSelf bool
		wantNew  int // connections for 5 requests
	}{
		{"every request chosen", 0, "/api/v1/nodes", false, 5},
		{"none chosen", 0.5, "/api/v1/nodes", false, 1},
		{"watches never", 0, "/api/v1/nodes?watch=true", false, 1},
		{"watches by path never", 0, "/api/v1/watch/nodes", false, 1},
		{"the skipped address never", 0, "/api/v1/nodes", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var skip string
			srv := httptest.NewUnstartedServer(nil)
			if tc.skipSelf {
				skip = srv.Listener.Addr().String()
			}
			srv.Config.Handler = ProbabilisticGoaway(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "ok")
			}), 0.02, func() float64 { return tc.draw }, skip)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := srv.Client()
			client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: client.Transport.(*http.Transport).TLSClientConfig.RootCAs, NextProtos: []string{"h2"}}
			fresh := 0
			trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				if !i.Reused {
					fresh++
				}
			}}
			for range 5 {
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "GET", srv.URL+tc.path, nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != 2 || string(body) != "ok" {
					t.Fatalf("HTTP/%d %q", resp.ProtoMajor, body)
				}
			}
			if fresh != tc.wantNew {
				t.Errorf("%d connections for 5 requests, want %d", fresh, tc.wantNew)
			}
		})
	}
}
