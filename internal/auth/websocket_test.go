package auth

import (
	"encoding/base64"
	"net/http/httptest"
	"testing"
)

func TestWebSocketProtocol(t *testing.T) {
	tokens := NewTokens()
	alice := &User{Name: "alice", Groups: []string{GroupAuthenticated}}
	tokens.Add("good-token", alice)
	a := Union{tokens, WebSocketProtocol{Tokens: tokens}, Anonymous{}}
	bearerProtocol := func(token string) string {
		return WebSocketBearerPrefix + base64.RawURLEncoding.EncodeToString([]byte(token))
	}
	ws := func(protocols ...string) map[string][]string {
		return map[string][]string{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": protocols}
	}
	tests := []struct {
		name   string
		header map[string][]string
		user   string // "" when refused
		// protocols is the request's Sec-WebSocket-Protocol afterwards.
		protocols []string
	}{
		{"the token and another subprotocol", ws(bearerProtocol("good-token") + ", base64.binary.k8s.io"), "alice", []string{"base64.binary.k8s.io"}},
		{"in two headers", ws("base64.binary.k8s.io", bearerProtocol("good-token")), "alice", []string{"base64.binary.k8s.io"}},
		{"no subprotocol besides", ws(bearerProtocol("good-token")), "", nil},
		{"an unknown token", ws(bearerProtocol("bad-token"), "x"), "", nil},
		{"two tokens", ws(bearerProtocol("good-token"), bearerProtocol("good-token"), "x"), "", nil},
		{"not base64url", ws(WebSocketBearerPrefix+"a+b/", "x"), "", nil},
		{"not UTF-8", ws(WebSocketBearerPrefix+base64.RawURLEncoding.EncodeToString([]byte{0xff, 0xfe}), "x"), "", nil},
		{"no token: anonymous", ws("base64.binary.k8s.io"), UserAnonymous, []string{"base64.binary.k8s.io"}},
		{"not a WebSocket: anonymous", map[string][]string{"Sec-Websocket-Protocol": {bearerProtocol("good-token") + ",x"}}, UserAnonymous, []string{bearerProtocol("good-token") + ",x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/v1/namespaces?watch=1", nil)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			u, ok, err := a.Authenticate(r)
			switch {
			case tt.user == "" && (ok || err == nil):
				t.Fatalf("Authenticate = %v, %v, %v; want it refused with an error", u, ok, err)
			case tt.user != "" && (!ok || u.Name != tt.user):
				t.Fatalf("Authenticate = %v, %v, %v; want %s", u, ok, err, tt.user)
			}
			if r.Header.Get("Authorization") != "" {
				t.Errorf("the request has an Authorization header now: %q", r.Header.Get("Authorization"))
			}
			if tt.protocols != nil {
				got := r.Header.Values("Sec-WebSocket-Protocol")
				if len(got) != len(tt.protocols) || got[0] != tt.protocols[0] {
					t.Errorf("Sec-WebSocket-Protocol afterwards %q, want %q", got, tt.protocols)
				}
			}
		})
	}
}

func TestIsWebSocketRequest(t *testing.T) {
	tests := []struct {
		connection, upgrade string
		want                bool
	}{
		{"Upgrade", "websocket", true},
		{"keep-alive, upgrade", "WebSocket", true},
		{"keep-alive", "websocket", false},
		{"Upgrade", "h2c", false},
		{"", "", false},
		{"upgraded", "websocket", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Connection", tt.connection)
		r.Header.Set("Upgrade", tt.upgrade)
		if got := IsWebSocketRequest(r); got != tt.want {
			t.Errorf("Connection %q, Upgrade %q: %v, want %v", tt.connection, tt.upgrade, got, tt.want)
		}
	}
}
