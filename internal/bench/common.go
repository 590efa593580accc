package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/version"
)

// Defaults shared by the scenarios.
const (
	DefaultConnections      = 8
	DefaultDuration         = 30 * time.Second
	DefaultProgressInterval = time.Second
	// Protobuf is the content type the scenarios speak, as Kubernetes' own
	// components do.
	Protobuf = "application/vnd.kubernetes.protobuf"
)

// Common configures what every scenario shares. Zero values mean defaults.
type Common struct {
	// REST reaches the API server under test: its host, credentials and TLS
	// settings are used, the rest is set by the scenario (protobuf, no
	// client-side rate limit, one transport per connection). Required.
	REST *rest.Config
	// Connections is the number of HTTP/2 connections the scenario's
	// clients share; default 8.
	Connections int
	// Duration is how long the measurement runs; default 30s.
	Duration time.Duration
	// Progress receives one line per ProgressInterval while the scenario
	// runs; nil prints nothing.
	Progress io.Writer
	// ProgressInterval is the time between two progress lines; default 1s.
	ProgressInterval time.Duration
	// ServerPID is the server process, for its CPU time and memory. 0 looks
	// for the process listening on REST's port when REST.Host is on this
	// machine; -1 reads no process here. A server not read here is measured
	// from its /metrics, when it gives its process's series there.
	ServerPID int
	// EtcdPID is the server's etcd process, when it runs apart from the
	// server on this machine (an external etcd), for its CPU time and
	// memory over the same measurement; 0 measures none.
	EtcdPID int
	// Clock times everything; default the real clock.
	Clock clock.WithTicker
	// Logger; default discard.
	Logger *slog.Logger
}

func (c *Common) setDefaults() error {
	if c.REST == nil {
		return errors.New("bench: a REST config is required")
	}
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.Connections < 0 {
		return fmt.Errorf("bench: connections %d must be positive", c.Connections)
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Duration < 0 {
		return fmt.Errorf("bench: duration %v must be positive", c.Duration)
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.EtcdPID < 0 {
		return fmt.Errorf("bench: etcd pid %d must not be negative", c.EtcdPID)
	}
	if c.ProgressInterval < 0 {
		return fmt.Errorf("bench: progress interval %v must be positive", c.ProgressInterval)
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// meters measure the processes of a scenario over its measurement: the
// server when it is known, its etcd when named, and this load generator;
// and, from the server's /metrics, its garbage collector and, when it
// runs elsewhere, its process.
type meters struct {
	server, etcd, self procMeter
	metrics            metricsMeter
}

func (c *Common) startMeters(ctx context.Context, now time.Time) meters {
	m := meters{self: startProcMeter(0, now), metrics: c.startMetricsMeter(ctx, now)}
	pid := c.ServerPID
	if pid == 0 {
		pid = findServerPID(c.REST.Host)
	}
	if pid > 0 {
		m.server = startProcMeter(pid, now)
	}
	if c.EtcdPID > 0 {
		m.etcd = startProcMeter(c.EtcdPID, now)
	}
	return m
}

// stop sets r's process figures, ops being what the scenario did. The
// server's come from /proc when it runs on this machine, from its /metrics
// otherwise.
func (m meters) stop(ctx context.Context, now time.Time, ops uint64, r *Report) {
	r.LoadGenerator = m.self.stop(now, ops)
	r.ServerProcess = m.server.stop(now, ops)
	r.EtcdProcess = m.etcd.stop(now, ops)
	var fromMetrics *ProcessStats
	r.ServerCollector, fromMetrics, r.ServerEtcdPuts = m.metrics.stop(ctx, now, ops)
	if r.ServerProcess == nil {
		r.ServerProcess = fromMetrics
	}
	r.ServerToLoadCPU = r.serverToLoadCPU()
}

// serverSampler returns a function that gives the server's cores since the
// call before and its RSS, from /proc when the server runs on this machine,
// else from its /metrics (see procMeter.sampler and metricsMeter.sampler).
func (m meters) serverSampler(ctx context.Context) func(now time.Time) (cores float64, rss uint64, ok bool) {
	if m.server.ok {
		return m.server.sampler()
	}
	return m.metrics.sampler(ctx)
}

// pool is a small set of clientsets, each with its own transport and so its
// own HTTP/2 connection; many goroutines share each one.
type pool struct {
	clients []kubernetes.Interface
}

// newPool builds n clientsets from base. client-go caches transports by TLS
// settings, which would put every clientset on one connection; a dialer of
// its own makes each transport distinct.
func newPool(base *rest.Config, n int, scenario string) (*pool, error) {
	p := &pool{}
	for range n {
		rc := rest.CopyConfig(base)
		rc.ContentType = Protobuf
		rc.AcceptContentTypes = Protobuf + ",application/json"
		rc.QPS = -1
		rc.Burst = 0
		rc.RateLimiter = nil
		rc.UserAgent = "leasehold-bench/" + version.Version + " (" + scenario + ")"
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		rc.Dial = d.DialContext
		c, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		p.clients = append(p.clients, c)
	}
	return p, nil
}

// get returns the clientset for worker i.
func (p *pool) get(i int) kubernetes.Interface { return p.clients[i%len(p.clients)] }

// meter counts a scenario's operations, errors and latencies; all methods
// are safe for concurrent use.
type meter struct {
	ops  atomic.Uint64
	errs atomic.Uint64
	lat  Histogram

	mu      sync.Mutex
	samples []string // first distinct error messages
}

const maxErrorSamples = 5

func (m *meter) ok(d time.Duration) {
	m.ops.Add(1)
	m.lat.Record(d)
}

func (m *meter) fail(err error) {
	m.errs.Add(1)
	if errors.Is(err, context.Canceled) {
		return
	}
	msg := err.Error()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) >= maxErrorSamples {
		return
	}
	for _, s := range m.samples {
		if s == msg {
			return
		}
	}
	m.samples = append(m.samples, msg)
}

func (m *meter) errorSamples() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.samples...)
}

// progress prints a line per interval about m until ctx ends: elapsed time,
// operations, operations per second and p99 latency over the last
// interval, errors, and whatever extra adds. It returns when ctx ends.
func progress(ctx context.Context, c *Common, label string, m *meter, extra func() string) {
	if c.Progress == nil {
		return
	}
	start := c.Clock.Now()
	t := c.Clock.NewTicker(c.ProgressInterval)
	defer t.Stop()
	prevOps, prevAt, prev := m.ops.Load(), start, m.lat.Snapshot()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			ops, cur := m.ops.Load(), m.lat.Snapshot()
			rate := float64(ops-prevOps) / now.Sub(prevAt).Seconds()
			line := fmt.Sprintf("%-10s %6.1fs  ops %10d  ops/s %8.0f  errors %6d  p99 %8.2fms",
				label, now.Sub(start).Seconds(), ops, rate, m.errs.Load(), ms(cur.Sub(prev).Quantile(0.99)))
			if extra != nil {
				line += "  " + extra()
			}
			fmt.Fprintln(c.Progress, line)
			prevOps, prevAt, prev = ops, now, cur
		}
	}
}

// sleepUntil waits on clk until t or until ctx ends; it reports whether t
// was reached.
func sleepUntil(ctx context.Context, clk clock.Clock, t time.Time) bool {
	d := t.Sub(clk.Now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := clk.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C():
		return true
	}
}
