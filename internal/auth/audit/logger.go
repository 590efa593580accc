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

// The events made and those lost carry kube-apiserver's names and labels,
// so that an alert on lost audit events written for it works here.
var (
	eventsMade = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "apiserver_audit_event_total",
		Help: "Audit events made for the audit backends (the log and the webhook).",
	})
	eventsLost = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_audit_error_total",
		Help: "Audit events a backend lost, by plugin: log (its buffer was full, or the log could not be written) or webhook (its buffer was full, or it did not take them).",
	}, []string{"plugin"})
	eventsWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_audit_events_total",
		Help: "Audit events written to the audit log.",
	})
	webhookSent = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_audit_webhook_events_sent_total",
		Help: "Audit events the audit webhook took.",
	})
	logLost, webhookLost = eventsLost.WithLabelValues("log"), eventsLost.WithLabelValues("webhook")
)

// Collectors are the audit log's Prometheus metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{eventsMade, eventsLost, eventsWritten, webhookSent}
}

// Config configures a Logger. Zero values mean defaults.
type Config struct {
	// Out receives one JSON event per line. If it is an io.Closer, Run
	// closes it when it ends. Required unless Webhook is set.
	Out io.Writer
	// Webhook, when set, also sends every event to a remote service.
	Webhook *WebhookConfig
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

// WebhookConfig sends events to a remote service in batches, as
// kube-apiserver's --audit-webhook-* flags do in their batch mode: an
// audit.k8s.io/v1 EventList of up to MaxBatch events, sent once it is full
// or MaxWait after its first event. A batch that cannot be sent is dropped
// and counted; events that find the buffer full are too.
type WebhookConfig struct {
	// Post sends one EventList (JSON). Required.
	Post func(ctx context.Context, body []byte) error
	// BufferSize is how many events may wait; default 10000.
	BufferSize int
	// MaxBatch is the most events in one batch; default 400.
	MaxBatch int
	// MaxWait is how long a batch waits to fill; default 30 s.
	MaxWait time.Duration
}

// webhookShutdownTimeout bounds the sending of the last batches at a stop.
const webhookShutdownTimeout = 10 * time.Second

// Logger accepts events from request handlers and writes them.
type Logger struct {
	cfg    Config
	ch     chan *Event
	hook   chan *Event  // nil without a webhook
	mu     sync.RWMutex // guards closed against sends
	closed bool
	done   chan struct{}
}

// New validates cfg.
func New(cfg Config) (*Logger, error) {
	if cfg.Out == nil && cfg.Webhook == nil {
		return nil, errors.New("audit: Out or Webhook is required")
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
	l := &Logger{cfg: cfg, done: make(chan struct{})}
	if cfg.Out != nil {
		l.ch = make(chan *Event, cfg.BufferSize)
	}
	if wh := cfg.Webhook; wh != nil {
		if wh.Post == nil {
			return nil, errors.New("audit: Webhook.Post is required")
		}
		if wh.BufferSize <= 0 {
			wh.BufferSize = 10000
		}
		if wh.MaxBatch <= 0 {
			wh.MaxBatch = 400
		}
		if wh.MaxWait <= 0 {
			wh.MaxWait = 30 * time.Second
		}
		l.hook = make(chan *Event, wh.BufferSize)
	}
	return l, nil
}

// Policy returns the policy in force.
func (l *Logger) Policy() *Policy { return l.cfg.Policy }

// Log queues ev without blocking; when the buffer is full, or the Logger
// has stopped, the event is dropped and counted. ev must not be changed
// afterwards.
func (l *Logger) Log(ev *Event) {
	eventsMade.Inc()
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		if l.ch != nil {
			logLost.Inc()
		}
		if l.hook != nil {
			webhookLost.Inc()
		}
		return
	}
	if l.ch != nil {
		select {
		case l.ch <- ev:
		default:
			logLost.Inc()
		}
	}
	if l.hook != nil {
		select {
		case l.hook <- ev:
		default:
			webhookLost.Inc()
		}
	}
}

// Run writes queued events until ctx ends, then writes what is still
// queued and returns.
func (l *Logger) Run(ctx context.Context) error {
	defer close(l.done)
	var hookDone chan struct{}
	if l.hook != nil {
		hookDone = make(chan struct{})
		go func() { l.runWebhook(ctx); close(hookDone) }()
		defer func() { <-hookDone }()
	}
	if l.ch == nil {
		<-ctx.Done()
		l.stop()
		return nil
	}
	w := bufio.NewWriterSize(l.cfg.Out, 64<<10)
	var line []byte
	// A bufio.Writer keeps its first write error and fails every write
	// after it: after an error the buffer is dropped and started afresh,
	// so that one failure (a full disk, a rotation that failed) does not
	// end the audit log.
	write := func(ev *Event) {
		var err error
		if line, err = ev.appendJSON(line[:0]); err != nil {
			logLost.Inc()
			l.cfg.Logger.Error("encoding audit event", "err", err)
			return
		}
		line = append(line, '\n')
		if _, err = w.Write(line); err != nil {
			logLost.Inc()
			l.cfg.Logger.Error("writing audit event", "err", err)
			w.Reset(l.cfg.Out)
			return
		}
		eventsWritten.Inc()
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
			l.stop()
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

// stop makes Log drop what comes after it.
func (l *Logger) stop() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// runWebhook sends queued events in batches until ctx ends, then sends
// what is still queued and returns.
func (l *Logger) runWebhook(ctx context.Context) {
	wh := l.cfg.Webhook
	batch := make([]*Event, 0, wh.MaxBatch)
	var body []byte
	send := func(ctx context.Context) {
		var err error
		if body, err = appendEventList(body[:0], batch); err == nil {
			err = wh.Post(ctx, body)
		}
		if err != nil {
			webhookLost.Add(float64(len(batch)))
			l.cfg.Logger.Error("sending audit events to the webhook; dropped them", "events", len(batch), "err", err)
		} else {
			webhookSent.Add(float64(len(batch)))
		}
		clear(batch)
		batch = batch[:0]
	}
	for ctx.Err() == nil {
		select {
		case ev := <-l.hook:
			batch = append(batch, ev)
			t := l.cfg.Clock.NewTimer(wh.MaxWait)
		fill:
			for len(batch) < wh.MaxBatch {
				select {
				case ev := <-l.hook:
					batch = append(batch, ev)
				case <-t.C():
					break fill
				case <-ctx.Done():
					break fill
				}
			}
			t.Stop()
			if ctx.Err() == nil {
				send(ctx)
			}
		case <-ctx.Done():
		}
	}
	// Stopping: what is queued goes with a deadline of its own.
	l.stop()
	sctx, cancel := context.WithTimeout(context.Background(), webhookShutdownTimeout)
	defer cancel()
	for {
		select {
		case ev := <-l.hook:
			batch = append(batch, ev)
			if len(batch) == wh.MaxBatch {
				send(sctx)
			}
			continue
		default:
		}
		if len(batch) > 0 {
			send(sctx)
		}
		return
	}
}

// appendEventList appends events as one audit.k8s.io/v1 EventList.
func appendEventList(b []byte, events []*Event) ([]byte, error) {
	b = append(b, `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`...)
	for i, ev := range events {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = ev.appendJSON(b); err != nil {
			return b, err
		}
	}
	return append(b, "]}"...), nil
}
