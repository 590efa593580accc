package apiserver

import (
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// CloseSilentAtShutdown makes srv's Shutdown close, grace after it
// begins, the connections that have sent nothing since their TLS
// handshake: neither an HTTP/2 preface nor the first byte of an HTTP/1.1
// request. Shutdown waits for every connection it does not count idle.
// net/http counts such an HTTP/1.1 connection idle only after 5 s, and an
// HTTP/2 one never: it waits for the preface for 10 s. A client that
// completed TLS and went quiet (a prober, or one stopped by a debugger)
// held a shutdown that long. The handshakes of HandshakeFirst are over
// before net/http sees a connection, so a client that means to send
// anything has sent it well within a second.
//
// It chains srv.ConnState, which must be set before, if at all.
func CloseSilentAtShutdown(srv *http.Server, clk clock.Clock, grace time.Duration) {
	s := &silentConns{conns: map[net.Conn]struct{}{}}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, state http.ConnState) {
		s.track(c, state)
		if next != nil {
			next(c, state)
		}
	}
	// Shutdown runs each of these on a goroutine of its own, once it has
	// closed the listeners: no connection comes after.
	srv.RegisterOnShutdown(func() {
		<-clk.After(grace)
		s.closeAll()
	})
}

// silentConns holds the connections whose last state is http.StateNew.
type silentConns struct {
	// n is len(conns), so that the state changes of connections that
	// left it (two a request on an HTTP/2 connection that goes idle
	// between requests) take no lock while none is new. A connection's
	// StateNew is reported before anything else of it, so n counts it
	// before its next change is reported.
	n     atomic.Int64
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (s *silentConns) track(c net.Conn, state http.ConnState) {
	if state != http.StateNew && s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == http.StateNew {
		s.conns[c] = struct{}{}
	} else {
		delete(s.conns, c)
	}
	s.n.Store(int64(len(s.conns)))
}

// closeAll closes the connections outside the lock: a TLS close writes
// an alert first, and others' state changes need not wait for it.
func (s *silentConns) closeAll() {
	s.mu.Lock()
	conns := slices.Collect(maps.Keys(s.conns))
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
