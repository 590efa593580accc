package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapSlog is a zapcore.Core that hands etcd's log entries to slog, so the
// whole process logs in one format. Entries below warning are dropped (etcd
// is chatty at info), and so are the errors etcd logs while it is being
// closed on purpose; sampled drops the repeats of one message beyond a few
// a second.
type zapSlog struct {
	log     *slog.Logger
	fields  []zapcore.Field
	closing *atomic.Bool // shared with the cores made by With
	// fatal is the last entry etcd logged before it panics or exits, with
	// its error: what a start that fails that way returns.
	fatal *atomic.Pointer[string] // shared with the cores made by With
	// abandoned is set once a start has failed (see stopHook).
	abandoned *atomic.Bool
}

func newZapSlog(log *slog.Logger) *zapSlog {
	return &zapSlog{log: log, closing: new(atomic.Bool), fatal: new(atomic.Pointer[string]), abandoned: new(atomic.Bool)}
}

// memberLogger is the logger of an embedded member: its entries go to z, and
// its fatal and panic entries stop what logged them through stopHook.
func memberLogger(z *zapSlog) *zap.Logger {
	return zap.New(sampled(z),
		zap.WithFatalHook(stopHook{z.abandoned, zapcore.WriteThenFatal}),
		zap.WithPanicHook(stopHook{z.abandoned, zapcore.WriteThenPanic}))
}

// stopHook does what etcd means by a fatal or panic entry (the process
// exits, or the goroutine panics), except in a member whose start has
// failed: there it ends the goroutine alone. A start fails where etcd
// panics (it cannot create its write-ahead log, for one), and the
// goroutines it had started by then run on: its backend commits what it
// holds a tenth of a second later, fails in the same way, and would exit
// the process before the server has said why its start failed.
type stopHook struct {
	abandoned *atomic.Bool
	next      zapcore.CheckWriteHook
}

func (h stopHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	if h.abandoned.Load() {
		runtime.Goexit()
	}
	h.next.OnWrite(ce, fields)
}

var _ zapcore.Core = (*zapSlog)(nil)

// ClientLogger returns a logger for an etcd client (clientv3.Config.Logger)
// that logs through log as the embedded member does: warnings and errors
// only, in the process's format, and a few a second of any one message.
func ClientLogger(log *slog.Logger) *zap.Logger {
	return zap.New(sampled(newZapSlog(log)))
}

func (z *zapSlog) Enabled(l zapcore.Level) bool { return l >= zapcore.WarnLevel }

func (z *zapSlog) With(fields []zapcore.Field) zapcore.Core {
	return &zapSlog{log: z.log, fields: append(append([]zapcore.Field(nil), z.fields...), fields...), closing: z.closing, fatal: z.fatal, abandoned: z.abandoned}
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

// firstStart tells the entries a new member logs before its first raft term
// is stored, and only then: raft's first campaign comes before the member
// has applied its own joining (it campaigns again right after), and etcd's
// storage version check finds no term yet ("missing term information", as
// error or reason) and succeeds on a later round. A fresh data directory
// logged a warning and an error that way on most starts.
func firstStart(e zapcore.Entry, fields map[string]any) bool {
	if strings.HasSuffix(e.Message, "cannot campaign at term 1 since there are still pending configuration changes to apply") {
		return true
	}
	err, _ := fields["error"].(string)
	return strings.HasSuffix(err, "missing term information")
}

func (z *zapSlog) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if z.closing.Load() || quiet[e.Message] {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range z.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	if firstStart(e, enc.Fields) {
		return nil
	}
	if e.Level >= zapcore.DPanicLevel {
		what := e.Message
		if err, ok := enc.Fields["error"]; ok {
			what = fmt.Sprintf("%s: %v", what, err)
		}
		z.fatal.Store(&what)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, k, enc.Fields[k])
	}
	level := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		level = slog.LevelError
	}
	if e.Level >= zapcore.PanicLevel {
		// etcd panics or exits the process after this entry: its last.
		attrs = append(attrs, "fatal", true)
	}
	z.log.Log(context.Background(), level, e.Message, attrs...)
	return nil
}

func (z *zapSlog) Sync() error { return nil }

// etcd retries some requests in a tight loop: while a restarted member
// applies a backlog, its attempt to publish itself failed 283 times in one
// second, each a warning. sampled logs up to repeatBurst entries of one
// message per repeatWindow and drops the rest (zap's sampler).
const (
	repeatWindow = time.Second
	repeatBurst  = 3
)

func sampled(core zapcore.Core) zapcore.Core {
	return zapcore.NewSamplerWithOptions(core, repeatWindow, repeatBurst, 0)
}
