package apiserver_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"golang.org/x/net/websocket"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// frame is one WebSocket message and whether it was sent as text.
type frame struct {
	data []byte
	text bool
}

// frames receives messages as they came, text or binary.
var frames = websocket.Codec{
	Unmarshal: func(data []byte, payloadType byte, v any) error {
		*v.(*frame) = frame{data: data, text: payloadType == websocket.TextFrame}
		return nil
	},
}

// dialWatch opens a watch over a WebSocket as a browser would: an Origin,
// and the bearer token as a subprotocol beside base64.binary.k8s.io.
func dialWatch(t *testing.T, s *apiservertest.Server, path, accept string) *websocket.Conn {
	t.Helper()
	cfg, err := websocket.NewConfig("wss://"+strings.TrimPrefix(s.URL, "https://")+path, "https://dashboard.example")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TlsConfig, err = rest.TLSConfigFor(s.Config); err != nil {
		t.Fatal(err)
	}
	cfg.Protocol = []string{auth.WebSocketBearerPrefix + base64.RawURLEncoding.EncodeToString([]byte(apiservertest.AdminToken)), "base64.binary.k8s.io"}
	if accept != "" {
		cfg.Header = http.Header{"Accept": {accept}}
	}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if got := ws.Config().Protocol; len(got) != 1 || got[0] != "base64.binary.k8s.io" {
		t.Errorf("the server chose the subprotocols %q, want [base64.binary.k8s.io]", got)
	}
	ws.SetReadDeadline(time.Now().Add(wait))
	return ws
}

func receive(t *testing.T, ws *websocket.Conn) frame {
	t.Helper()
	var f frame
	if err := frames.Receive(ws, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestWatchWebSocket watches over a WebSocket, as kube-apiserver serves
// browsers: authenticated by the token in a subprotocol, each event one
// message, text for JSON and binary for protobuf, and the watch ends when
// the client goes.
func TestWatchWebSocket(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx := testContext(t)
	leases := s.Client(t, "").CoordinationV1().Leases("default")
	l, err := leases.Create(ctx, newLease("ws", "a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := "/apis/coordination.k8s.io/v1/namespaces/default/leases?watch=1&resourceVersion=" + l.ResourceVersion

	jsonWatch := dialWatch(t, s, path, "")
	protoWatch := dialWatch(t, s, path, protobuf)
	l.Spec.HolderIdentity = ptr.To("b")
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	f := receive(t, jsonWatch)
	var ev struct {
		Type   string
		Object coordinationv1.Lease
	}
	if err := json.Unmarshal(f.data, &ev); err != nil {
		t.Fatalf("JSON message %q: %v", f.data, err)
	}
	if !f.text || ev.Type != "MODIFIED" || ptr.Deref(ev.Object.Spec.HolderIdentity, "") != "b" {
		t.Errorf("JSON message: text %v, %s of holder %q; want a text message, MODIFIED of holder b", f.text, ev.Type, ptr.Deref(ev.Object.Spec.HolderIdentity, ""))
	}

	f = receive(t, protoWatch)
	var pev metav1.WatchEvent
	if err := pev.Unmarshal(f.data); err != nil {
		t.Fatalf("protobuf message (%d bytes): %v", len(f.data), err)
	}
	obj, err := runtime.Decode(registry.Codecs.UniversalDeserializer(), pev.Object.Raw)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*coordinationv1.Lease)
	if f.text || pev.Type != "MODIFIED" || !ok || ptr.Deref(got.Spec.HolderIdentity, "") != "b" {
		t.Errorf("protobuf message: text %v, %s of %T; want a binary message, MODIFIED of a Lease held by b", f.text, pev.Type, obj)
	}

	jsonWatch.Close()
	protoWatch.Close()
	if leaked := leakcheck.Leaked(5*time.Second, "websocket.Server.serveWebSocket"); leaked != "" {
		t.Errorf("watches still served after their clients closed:\n%s", leaked)
	}

	// A handshake without an Origin is refused, as kube-apiserver refuses
	// it, and leaves no watch open in the cache.
	before := cacheWatchers(t)
	tlsConfig, err := rest.TLSConfigFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig.NextProtos = []string{"http/1.1"}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	t.Cleanup(client.CloseIdleConnections)
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+apiservertest.AdminToken)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if resp, body := roundTrip(t, client, req); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a WebSocket without an Origin: %s %q, want 403", resp.Status, body)
	}
	// The handler stops its watch once x/net has answered.
	poll(t, "the refused handshake's watch to stop", func() (bool, error) { return cacheWatchers(t) == before, nil })
}

// cacheWatchers reads leasehold_watch_cache_watchers for leases.
func cacheWatchers(t *testing.T) float64 {
	t.Helper()
	return metricValue(t, store.Collectors(), "leasehold_watch_cache_watchers", map[string]string{"resource": "leases"})
}
