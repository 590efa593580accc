package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// startHTTPServer serves h with newHTTPServer and serveTLS on a loopback
// port, and returns the server, its address and the roots to verify it
// with. onState, if not nil, is told of every connection state after the
// server's own hook.
func startHTTPServer(t *testing.T, h http.Handler, clk clock.Clock, onState func(net.Conn, http.ConnState)) (*http.Server, string, *x509.CertPool) {
	t.Helper()
	serving, roots := pkitest.Serving(t)
	srv := newHTTPServer(h, &tls.Config{Certificates: []tls.Certificate{serving}}, clk, slog.New(slog.DiscardHandler))
	if own := srv.ConnState; onState != nil {
		srv.ConnState = func(c net.Conn, state http.ConnState) {
			if own != nil {
				own(c, state)
			}
			onState(c, state)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveTLS(srv, ln, srv.TLSConfig, clk, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})
	return srv, ln.Addr().String(), roots
}

// dialTLS completes a TLS handshake with addr offering proto by ALPN.
func dialTLS(t *testing.T, addr string, roots *x509.CertPool, proto string) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{proto}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// h2Start sends conn's HTTP/2 preface and settings and returns a framer
// on it.
func h2Start(t *testing.T, conn net.Conn) *http2.Framer {
	t.Helper()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// h2Framer serves h as startHTTPServer does and returns a framer on an
// HTTP/2 connection to it whose preface and settings are sent.
func h2Framer(t *testing.T, h http.Handler) *http2.Framer {
	t.Helper()
	_, addr, roots := startHTTPServer(t, h, clock.RealClock{}, nil)
	return h2Start(t, dialTLS(t, addr, roots, "h2"))
}

// requestBlock is the HPACK block of a request's pseudo-headers.
func requestBlock(method string) []byte {
	var req bytes.Buffer
	enc := hpack.NewEncoder(&req)
	for _, f := range [][2]string{{":method", method}, {":scheme", "https"}, {":authority", "leasehold"}, {":path", "/"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return req.Bytes()
}

// The server's HTTP/2 responses use no entry of HPACK's dynamic table and
// add none to it, so that neither side keeps one for headers that change
// with every response (Audit-Id). Ten responses on one connection, read
// frame by frame, are decoded with a table of one byte, which no entry
// fits: a reference to an entry the server kept, or a table grown back,
// fails to decode. With net/http's default the second response refers to
// the headers the first one added.
func TestResponseHeadersUseNoDynamicTable(t *testing.T) {
	n := 0
	fr := h2Framer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++ // one stream at a time
		w.Header().Set("Audit-Id", fmt.Sprintf("audit-%d", n))
		w.Header().Set("Cache-Control", "no-cache, private")
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		w.Write([]byte("body"))
	}))
	dec := hpack.NewDecoder(1, nil)
	get := requestBlock("GET")
	for stream := uint32(1); stream <= 19; stream += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: get, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		// Read until this stream's response has ended.
		for done := false; !done; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.HeadersFrame:
				if !f.HeadersEnded() {
					t.Fatal("a response's headers span CONTINUATION frames; this test reads one frame")
				}
				fields, err := dec.DecodeFull(f.HeaderBlockFragment())
				if err != nil {
					t.Fatalf("stream %d: %v", stream, err)
				}
				if len(fields) == 0 || fields[0].Name != ":status" {
					t.Fatalf("stream %d: fields %v", stream, fields)
				}
				done = f.StreamEnded()
			case *http2.DataFrame:
				done = f.StreamEnded()
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			}
		}
	}
}

// The server reads frames of at most 16 KiB, HTTP/2's default, where
// net/http's own default is 1 MiB: the largest frame a connection has read
// stays allocated for as long as it lasts, whatever the request's answer.
// A DATA frame one byte larger ends the connection with FRAME_SIZE_ERROR.
func TestRequestFramesAreBounded(t *testing.T) {
	// The handler answers once it has read the whole body, so an answer
	// means the frame was read.
	fr := h2Framer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: requestBlock("PUT"), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	// Frames larger than the server's setting are refused by this side too.
	fr.SetMaxReadFrameSize(1 << 20)
	if err := fr.WriteData(1, true, make([]byte, 16<<10+1)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection ended without a GOAWAY: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeFrameSize {
				t.Errorf("GOAWAY %v, want %v", f.ErrCode, http2.ErrCodeFrameSize)
			}
			return
		case *http2.HeadersFrame:
			t.Fatalf("the server read a DATA frame of %d bytes and answered the request", 16<<10+1)
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		}
	}
}

// A shutdown closes the connections that completed TLS and then sent
// nothing, a second after it begins. net/http alone would wait 10 s for an
// HTTP/2 preface, and 5 s for an HTTP/1.1 request, before it counted them
// idle. A connection that did send its preface is told to go away, as
// before.
func TestShutdownClosesSilentConnections(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	accepted := make(chan struct{}, 3)
	srv, addr, roots := startHTTPServer(t, http.NotFoundHandler(), clk, func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			accepted <- struct{}{}
		}
	})
	silentH2 := dialTLS(t, addr, roots, "h2")
	silentH1 := dialTLS(t, addr, roots, "http/1.1")
	fr := h2Start(t, dialTLS(t, addr, roots, "h2"))
	// Once the server acknowledges the settings it has read the preface.
	for acked := false; !acked; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := f.(*http2.SettingsFrame); ok {
			acked = f.IsAck()
		}
	}
	for range 3 {
		<-accepted
	}

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the connection that sent its preface ended without a GOAWAY: %v", err)
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			break
		}
	}
	// The silent connections are closed when the shutdown's second has
	// passed on the clock. The deadlines below only keep a failing test
	// from hanging.
	bound := time.Now().Add(5 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(bound) {
			t.Fatal("the shutdown waits for nothing on the clock")
		}
		runtime.Gosched()
	}
	clk.Step(time.Second)
	for name, conn := range map[string]*tls.Conn{"HTTP/2": silentH2, "HTTP/1.1": silentH1} {
		conn.SetReadDeadline(bound)
		_, err := io.Copy(io.Discard, conn) // the server's settings, if any, then the end
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the silent %s connection is still open", name)
		}
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Until(bound)):
		t.Fatal("Shutdown has not returned")
	}
}

// TestLoopbackClosesItsConnections: the server's own clients close their
// HTTP/2 connection when they are done, so that a shutdown need not wait
// the second net/http gives a client to close one after its GOAWAY.
func TestLoopbackClosesItsConnections(t *testing.T) {
	serving, caPEM := pkitest.ServingPEM(t)
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}), &tls.Config{Certificates: []tls.Certificate{serving}}, clock.RealClock{}, slog.New(slog.DiscardHandler))
	closed := make(chan struct{}, 1)
	own := srv.ConnState
	srv.ConnState = func(c net.Conn, state http.ConnState) {
		own(c, state)
		if state == http.StateClosed {
			closed <- struct{}{}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- serveTLS(srv, ln, srv.TLSConfig, clock.RealClock{}, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})

	l := &loopback{tokens: map[string]string{"someone": "a-token"}}
	if err := l.serveAt(ln.Addr().String(), caPEM); err != nil {
		t.Fatal(err)
	}
	client, err := rest.HTTPClientFor(l.config("someone"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		resp, err := client.Get(l.host)
		if err != nil {
			t.Fatal(err)
		}
		proto, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if string(proto) != "HTTP/2.0" {
			t.Fatalf("the request came over %s, not HTTP/2", proto)
		}
	}
	l.closeConnections()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // only keeps a failing test from hanging
		t.Fatal("the connection is still open")
	}
	select {
	case <-closed:
		t.Fatal("the clients used more than one connection")
	default:
	}
}
