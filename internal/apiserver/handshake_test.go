package apiserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/leakcheck"
	"github.com/leasehold/leasehold/internal/pki/pkitest"
)

// servingTLS is a server's TLS configuration with a certificate of a
// new CA, offering HTTP/2 and HTTP/1.1, and a pool trusting that CA.
func servingTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	serving, roots := pkitest.Serving(t)
	return &tls.Config{Certificates: []tls.Certificate{serving}, NextProtos: []string{"h2", "http/1.1"}}, roots
}

// handshakeServer serves, through HandshakeFirst on a loopback port, a
// handler that answers with the request's protocol, and returns the
// listener and a pool trusting the server's certificate.
func handshakeServer(t *testing.T, clk clock.PassiveClock, timeout time.Duration) (net.Listener, *x509.CertPool) {
	t.Helper()
	tc, pool := servingTLS(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := HandshakeFirst(inner, tc, timeout, clk, slog.New(slog.DiscardHandler))
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || !r.TLS.HandshakeComplete {
				t.Errorf("%s request without its connection's TLS state", r.Proto)
			}
			io.WriteString(w, r.Proto)
		}),
		TLSConfig: tc,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		// A listener closed first ends Serve with its own error.
		if err := <-served; !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			t.Errorf("Serve returned %v, want %v", err, http.ErrServerClosed)
		}
	})
	return ln, pool
}

// get asks ln's server for / over HTTP/2, or HTTP/1.1 when h1, and returns
// the protocol the handler saw.
func get(t *testing.T, ln net.Listener, pool *x509.CertPool, h1 bool) string {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: !h1}
	if h1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("https://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// silent connects to ln and sends nothing, as a client that never starts
// its handshake.
func silent(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server has closed c, waiting for at
// most a minute for it (the test fails rather than hangs).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// An HTTP server on HandshakeFirst serves HTTP/2 and HTTP/1.1 over TLS,
// with each request's TLS state, while a client that never starts its
// handshake waits on a goroutine of its own.
func TestHandshakeFirst(t *testing.T) {
	ln, pool := handshakeServer(t, clock.RealClock{}, time.Minute)
	silent(t, ln)
	if got := get(t, ln, pool, false); got != "HTTP/2.0" {
		t.Errorf("over HTTP/2 the handler saw %q", got)
	}
	if got := get(t, ln, pool, true); got != "HTTP/1.1" {
		t.Errorf("over HTTP/1.1 the handler saw %q", got)
	}
}

// A handshake not complete by the clock's now plus the timeout ends with
// its connection. The clock is an hour behind, so that a minute's timeout
// has passed already.
func TestHandshakeFirstTimeout(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now().Add(-time.Hour))
	ln, _ := handshakeServer(t, clk, time.Minute)
	if c := silent(t, ln); !closedByServer(c) {
		t.Error("the handshake that never started is still open after its deadline")
	}
}

// A timeout of 0 sets no deadline: with the clock an hour behind,
// handshakes still complete.
func TestHandshakeFirstNoTimeout(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now().Add(-time.Hour))
	ln, pool := handshakeServer(t, clk, 0)
	if got := get(t, ln, pool, false); got != "HTTP/2.0" {
		t.Errorf("the handler saw %q", got)
	}
}

// Close ends the handshakes under way and leaves no goroutine behind; Accept
// then says the listener is closed.
func TestHandshakeFirstClose(t *testing.T) {
	ln, pool := handshakeServer(t, clock.RealClock{}, time.Hour)
	c := silent(t, ln)
	// Connections are accepted in order, so the silent one's handshake
	// is under way once the next client has been served.
	get(t, ln, pool, false)
	ln.Close()
	if !closedByServer(c) {
		t.Error("the handshake under way at Close is still open")
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want %v", err, net.ErrClosed)
	}
	if leaked := leakcheck.Leaked(5*time.Second, "apiserver.(*handshakeListener)"); leaked != "" {
		t.Errorf("goroutines left running after Close:\n%s", leaked)
	}
}

// failingListener fails its first Accept with err, then accepts from the
// Listener it wraps.
type failingListener struct {
	net.Listener
	err error
}

func (l *failingListener) Accept() (net.Conn, error) {
	if err := l.err; err != nil {
		l.err = nil
		return nil, err
	}
	return l.Listener.Accept()
}

// An error of the listener underneath reaches Accept, and accepting goes
// on after it, as http.Server does after a temporary error: the next
// connection comes out of Accept with its handshake complete.
func TestHandshakeFirstListenerError(t *testing.T) {
	tc, pool := servingTLS(t)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	full := errors.New("accept: too many open files")
	ln := HandshakeFirst(&failingListener{Listener: inner, err: full}, tc, time.Minute, clock.RealClock{}, slog.New(slog.DiscardHandler))
	defer ln.Close()
	if _, err := ln.Accept(); !errors.Is(err, full) {
		t.Fatalf("Accept: %v, want %v", err, full)
	}
	dialed := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost"})
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*tls.Conn); !ok || !tc.ConnectionState().HandshakeComplete {
		t.Errorf("Accept gave %T before its handshake completed", c)
	}
	if err := <-dialed; err != nil {
		t.Error(err)
	}
}
