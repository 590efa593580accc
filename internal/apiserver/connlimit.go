package apiserver

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/netutil"
	"k8s.io/utils/clock"
)

var (
	openConnections = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_apiserver_connections",
		Help: "Client connections the serving port holds open now.",
	})
	connectionLimit = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasehold_apiserver_connections_limit",
		Help: "Client connections the serving port holds open at most; more wait to be accepted.",
	})
)

// ConnectionCollectors are the metrics of LimitConnections.
func ConnectionCollectors() []prometheus.Collector {
	return []prometheus.Collector{openConnections, connectionLimit}
}

// ConnectionBudget is how many client connections a server may hold open
// at once when its process may have openFiles files open: every
// connection takes a descriptor, and so do etcd's write-ahead log, its
// snapshots and database, the audit log and the server's own clients.
// An embedded etcd that cannot open the file of its next snapshot stops
// the whole process, so connections get all but a twentieth of the
// descriptors, leaving at least 1 024 (or half, when there are fewer than
// 2 048) to the rest; it is never less than one.
func ConnectionBudget(openFiles uint64) int {
	reserve := min(max(openFiles/20, 1024), openFiles/2)
	return int(max(min(openFiles-reserve, 1<<31-1), 1))
}

// LimitConnections returns ln accepting at most n connections at once:
// once n are open, the next waits in the kernel's queue of the listening
// socket until one of them closes. It keeps leasehold_apiserver_connections
// up to date and warns, at most once a minute, when the limit holds a
// connection back.
func LimitConnections(ln net.Listener, n int, clk clock.PassiveClock, log *slog.Logger) net.Listener {
	connectionLimit.Set(float64(n))
	c := &countingListener{Listener: ln, n: int64(n), clock: clk, log: log}
	return netutil.LimitListener(c, n)
}

// fullWarnEvery is how often a listener at its limit warns.
const fullWarnEvery = time.Minute

// countingListener counts the connections it has accepted that are still
// open. netutil's listener, around it, takes a slot before each Accept, so
// a count of n means the next client waits.
type countingListener struct {
	net.Listener
	n        int64
	open     atomic.Int64
	clock    clock.PassiveClock
	log      *slog.Logger
	lastWarn atomic.Int64 // Unix nanoseconds of the last warning
}

func (l *countingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if open := l.open.Add(1); open >= l.n {
		l.warnFull(open)
	}
	openConnections.Inc()
	return &countedConn{Conn: conn, l: l}, nil
}

func (l *countingListener) warnFull(open int64) {
	now, last := l.clock.Now().UnixNano(), l.lastWarn.Load()
	if last != 0 && time.Duration(now-last) < fullWarnEvery {
		return
	}
	if l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn("serving the most client connections allowed; more wait to be accepted until some close (raise the open-file limit, ulimit -n, or set --max-connections)", "connections", open)
	}
}

// countedConn gives its slot back once, however often it is closed.
type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		openConnections.Dec()
	})
	return err
}
