package apiserver

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// HandshakeFirst returns ln serving TLS with config, whose Accept gives
// only connections whose handshake has completed. Each handshake runs on
// a goroutine of its own that ends with it, and must complete within
// timeout (0: no limit, as net/http's own).
//
// net/http's server runs the handshake on the goroutine that then serves
// the connection for as long as it lasts, and that goroutine keeps the
// stack the handshake grew. With 5 000 HTTP/2 connections at rest, their
// goroutines held 20.6 KiB of stack a connection when net/http shook
// hands and 12.4 KiB when the handshakes ran on goroutines of their own;
// Go's collector lets the heap grow by as much again as the stacks hold.
// Serve a listener of HandshakeFirst with http.Server.Serve, not
// ServeTLS: its connections are already TLS.
func HandshakeFirst(ln net.Listener, config *tls.Config, timeout time.Duration, clk clock.PassiveClock, log *slog.Logger) net.Listener {
	l := &handshakeListener{
		Listener: ln, config: config, timeout: timeout, clock: clk, log: log,
		ready: make(chan net.Conn), errs: make(chan error),
		done: make(chan struct{}), pending: map[net.Conn]struct{}{},
	}
	go l.acceptLoop()
	return l
}

type handshakeListener struct {
	net.Listener
	config  *tls.Config
	timeout time.Duration
	clock   clock.PassiveClock
	log     *slog.Logger

	ready chan net.Conn // handshakes completed
	errs  chan error    // the inner listener's, one at a time
	done  chan struct{} // closed by Close

	closeOnce sync.Once
	mu        sync.Mutex
	closed    bool
	pending   map[net.Conn]struct{} // handshakes under way, closed by Close
}

func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.ready:
		return conn, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// acceptLoop accepts connections and starts their handshakes. An error
// of the inner listener waits for the next Accept, so http.Server's
// back-off after a temporary error (too many open files) holds this loop
// back as well; after a lasting one the server calls Accept no more, and
// the loop waits for Close.
func (l *handshakeListener) acceptLoop() {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err:
				continue
			case <-l.done:
				return
			}
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			conn.Close()
			return
		}
		l.pending[conn] = struct{}{}
		l.mu.Unlock()
		go l.handshake(conn)
	}
}

func (l *handshakeListener) handshake(raw net.Conn) {
	conn := tls.Server(raw, l.config)
	var err error
	if l.timeout > 0 {
		err = raw.SetDeadline(l.clock.Now().Add(l.timeout))
	}
	if err == nil {
		err = conn.Handshake()
	}
	if err == nil && l.timeout > 0 {
		err = raw.SetDeadline(time.Time{})
	}
	l.mu.Lock()
	delete(l.pending, raw)
	l.mu.Unlock()
	if err != nil {
		// As net/http reports a failed handshake: at debug level, since
		// scanners and clients that give up cause most.
		l.log.Debug("TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	select {
	case l.ready <- conn:
	case <-l.done:
		raw.Close()
	}
}

// Close stops accepting, closes the inner listener and ends the
// handshakes under way.
func (l *handshakeListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.mu.Lock()
		l.closed = true
		for conn := range l.pending {
			conn.Close()
		}
		l.mu.Unlock()
	})
	return l.Listener.Close()
}
