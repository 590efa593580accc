package audit

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

var (
	eventsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_audit_events_total",
		Help: "Audit events written to the audit log.",
	})
	eventsDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_audit_events_dropped_total",
		Help: "Audit events dropped because the audit buffer was full or the log could not be written.",
	})
)

// Collectors are the audit log's Prometheus metrics.
func Collectors() []prometheus.Collector { return []prometheus.Collector{eventsTotal, eventsDropped} }

// Config configures a Logger. Zero values mean defaults.
type Config struct {
	// Out receives one JSON event per line. Required. If it is an
	// io.Closer, Run closes it when it ends.
	Out io.Writer
	// Policy decides what is recorded; default DefaultPolicy().
	Policy *Policy
	// BufferSize is how many events may wait to be written; default 10000.
	BufferSize int
	// BatchMaxWait is how long the writer, woken by an event, waits for
	// more before it writes them all at once: one write to Out and one
	// wake-up for the events of the wait instead of one each. 0 writes at
	// once; an event may then be written up to BatchMaxWait after it was
	// logged.
	BatchMaxWait time.Duration
	// Clock times BatchMaxWait; default the real clock.
	Clock clock.Clock
	// Logger for write errors; default slog.Default().
	Logger *slog.Logger
}

// Logger accepts events from request handlers and writes them.
type Logger struct {
	cfg    Config
	ch     chan *Event
	mu     sync.RWMutex // guards closed against sends
	closed bool
	done   chan struct{}
}

// New validates cfg.
func New(cfg Config) (*Logger, error) {
	if cfg.Out == nil {
		return nil, errors.New("audit: Out is required")
	}
	if cfg.Policy == nil {
		cfg.Policy = DefaultPolicy()
	}
	if cfg.BufferSize <= 0 {
		cfg.BufferSize = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BatchMaxWait < 0 {
		return nil, errors.New("audit: BatchMaxWait must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Logger{cfg: cfg, ch: make(chan *Event, cfg.BufferSize), done: make(chan struct{})}, nil
}

// Policy returns the policy in force.
func (l *Logger) Policy() *Policy { return l.cfg.Policy }

// Log queues ev without blocking; when the buffer is full, or the Logger
// has stopped, the event is dropped and counted. ev must not be changed
// afterwards.
func (l *Logger) Log(ev *Event) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		eventsDropped.Inc()
		return
	}
	select {
	case l.ch <- ev:
	default:
		eventsDropped.Inc()
	}
}

// Run writes queued events until ctx ends, then writes what is still
// queued and returns.
func (l *Logger) Run(ctx context.Context) error {
	defer close(l.done)
	w := bufio.NewWriterSize(l.cfg.Out, 64<<10)
	var line []byte
	// A bufio.Writer keeps its first write error and fails every write
	// after it: after an error the buffer is dropped and started afresh,
	// so that one failure (a full disk, a rotation that failed) does not
	// end the audit log.
	write := func(ev *Event) {
		var err error
		if line, err = ev.appendJSON(line[:0]); err != nil {
			eventsDropped.Inc()
			l.cfg.Logger.Error("encoding audit event", "err", err)
			return
		}
		line = append(line, '\n')
		if _, err = w.Write(line); err != nil {
			eventsDropped.Inc()
			l.cfg.Logger.Error("writing audit event", "err", err)
			w.Reset(l.cfg.Out)
			return
		}
		eventsTotal.Inc()
	}
	flush := func() {
		if err := w.Flush(); err != nil {
			l.cfg.Logger.Error("writing audit log", "err", err)
			w.Reset(l.cfg.Out)
		}
	}
	defer func() {
		if c, ok := l.cfg.Out.(io.Closer); ok {
			c.Close()
		}
	}()
	for {
		select {
		case ev := <-l.ch:
			write(ev)
			if l.cfg.BatchMaxWait > 0 {
				// Not receiving meanwhile, so the events of the wait
				// queue without waking this goroutine.
				t := l.cfg.Clock.NewTimer(l.cfg.BatchMaxWait)
				select {
				case <-t.C():
				case <-ctx.Done():
					t.Stop()
				}
			}
			// Write what else is queued, then flush once.
			for more := true; more; {
				select {
				case ev := <-l.ch:
					write(ev)
				default:
					more = false
				}
			}
			flush()
		case <-ctx.Done():
			l.mu.Lock()
			l.closed = true
			l.mu.Unlock()
			for {
				select {
				case ev := <-l.ch:
					write(ev)
				default:
					flush()
					return nil
				}
			}
		}
	}
}
