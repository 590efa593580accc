package embedded

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/utils/clock"
)

// zapSlog is a zapcore.Core that hands etcd's log entries to slog, so the
// whole process logs in one format. Entries below warning are dropped (etcd
// is chatty at info), and so are the errors etcd logs while it is being
// closed on purpose, and the repeats of one message beyond a few a second.
type zapSlog struct {
	log     *slog.Logger
	fields  []zapcore.Field
	closing *atomic.Bool // shared with the cores made by With
	repeats *repeats     // shared with the cores made by With
}

var _ zapcore.Core = (*zapSlog)(nil)

func (z *zapSlog) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (z *zapSlog) With(fields []zapcore.Field) zapcore.Core {
	return &zapSlog{log: z.log, fields: append(append([]zapcore.Field(nil), z.fields...), fields...), closing: z.closing, repeats: z.repeats}
}

func (z *zapSlog) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if z.Enabled(e.Level) {
		return ce.AddCore(e, z)
	}
	return ce
}

// quiet are warnings etcd gives for choices leasehold makes on purpose: one
// port for gRPC and HTTP on loopback, and the simple auth token (auth is off).
var quiet = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (z *zapSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if z.closing.Load() || quiet[e.Message] {
		return nil
	}
	ok, dropped := z.repeats.admit(e.Message)
	if !ok {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range z.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	if dropped > 0 {
		attrs = append(attrs, "suppressedRepeats", dropped)
	}
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	z.log.Log(context.Background(), level, e.Message, attrs...)
	return nil
}

func (z *zapSlog) Sync() error { return nil }

// repeats bounds how often one message is logged. etcd retries some
// requests in a tight loop: while a restarted member applies a backlog, its
// attempt to publish itself failed 283 times in one second, each a warning.
// Up to repeatBurst entries of a message are logged per repeatWindow; the
// first one logged after a window carries how many were left out.
type repeats struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[string]*burst
}

type burst struct {
	start         time.Time
	logged, extra int
}

const (
	repeatWindow = time.Second
	repeatBurst  = 3
	// repeatMessages bounds the messages remembered; etcd's are a few
	// dozen distinct strings.
	repeatMessages = 1000
)

func newRepeats(clk clock.PassiveClock) *repeats {
	return &repeats{clock: clk, seen: map[string]*burst{}}
}

// admit says whether an entry with msg is logged now and, if so, how many
// entries of msg were left out before it.
func (r *repeats) admit(msg string) (ok bool, leftOut int) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.seen[msg]
	if b == nil || now.Sub(b.start) >= repeatWindow {
		if b != nil {
			leftOut = b.extra
		} else if len(r.seen) >= repeatMessages {
			clear(r.seen)
		}
		r.seen[msg] = &burst{start: now, logged: 1}
		return true, leftOut
	}
	if b.logged < repeatBurst {
		b.logged++
		return true, 0
	}
	b.extra++
	return false, 0
}
