package auth

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// IsWebSocketRequest reports whether r asks to become a WebSocket
// ("Connection: Upgrade" and "Upgrade: websocket"), as kube-apiserver
// recognises one.
func IsWebSocketRequest(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade")
}

// WebSocketBearerPrefix starts the WebSocket subprotocol that carries a
// bearer token, the token following in unpadded base64url: a browser
// cannot set an Authorization header on a WebSocket, so Kubernetes'
// clients put the token there.
const WebSocketBearerPrefix = "base64url.bearer.authorization.k8s.io."

const protocolHeader = "Sec-Websocket-Protocol" // canonical form

// WebSocketProtocol authenticates a WebSocket request by the bearer token
// in its subprotocols, with the token authenticators Tokens, as
// kube-apiserver does. The request must offer another subprotocol besides,
// the one the server will answer with; once the token is accepted it is
// taken out of the request's subprotocols, so that it is never echoed.
type WebSocketProtocol struct {
	Tokens Authenticator
}

var _ Authenticator = WebSocketProtocol{}

// Authenticate implements Authenticator.
func (a WebSocketProtocol) Authenticate(r *http.Request) (*User, bool, error) {
	token, others, err := webSocketBearer(r)
	if err != nil || token == "" {
		return nil, false, err
	}
	if len(others) == 0 {
		return nil, false, errors.New("missing additional subprotocol")
	}
	// The token authenticators read an Authorization header: they get a
	// copy of the request with one.
	c := *r
	c.Header = r.Header.Clone()
	c.Header.Set("Authorization", "Bearer "+token)
	u, ok, err := a.Tokens.Authenticate(&c)
	if !ok {
		if err == nil {
			err = ErrInvalidToken
		}
		return nil, false, err
	}
	r.Header.Set(protocolHeader, strings.Join(others, ","))
	return u, true, nil
}

// webSocketBearer returns the token of a WebSocket request's bearer
// subprotocol ("" when it has none) and its other subprotocols.
func webSocketBearer(r *http.Request) (token string, others []string, err error) {
	if !IsWebSocketRequest(r) {
		return "", nil, nil
	}
	seen := false
	for _, h := range r.Header[protocolHeader] {
		for p := range strings.SplitSeq(h, ",") {
			p = strings.TrimSpace(p)
			encoded, ok := strings.CutPrefix(p, WebSocketBearerPrefix)
			if !ok {
				others = append(others, p)
				continue
			}
			if seen {
				return "", nil, errors.New("multiple base64.bearer.authorization tokens specified")
			}
			seen = true
			b, err := base64.RawURLEncoding.DecodeString(encoded)
			if err != nil {
				return "", nil, errors.New("invalid base64.bearer.authorization token encoding")
			}
			if !utf8.Valid(b) {
				return "", nil, errors.New("invalid base64.bearer.authorization token")
			}
			token = string(b)
		}
	}
	return token, others, nil
}
