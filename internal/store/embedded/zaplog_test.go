package embedded

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestRepeatedWarnings: a message etcd logs in a loop is logged a few times
// a second, then again in the next second. Other messages are not held
// back.
func TestRepeatedWarnings(t *testing.T) {
	var out bytes.Buffer
	core := sampled(newZapSlog(slog.New(slog.NewTextHandler(&out, nil))))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	warn := func(msg string) {
		t.Helper()
		ent := zapcore.Entry{Level: zapcore.WarnLevel, Message: msg, Time: now}
		if ce := core.Check(ent, nil); ce != nil {
			ce.Write()
		}
	}
	for range 100 {
		warn("failed to publish local member to cluster through raft")
	}
	warn("apply request took too long")
	if got := strings.Count(out.String(), "failed to publish"); got != repeatBurst {
		t.Errorf("%d of 100 repeats logged within a second, want %d:\n%s", got, repeatBurst, out.String())
	}
	if !strings.Contains(out.String(), "apply request took too long") {
		t.Errorf("another message was held back:\n%s", out.String())
	}
	out.Reset()
	now = now.Add(repeatWindow)
	warn("failed to publish local member to cluster through raft")
	if !strings.Contains(out.String(), "failed to publish") {
		t.Errorf("the message is still held back in the next second:\n%s", out.String())
	}
}

// TestFirstStartQuiet: what a new member logs before its first raft term is
// stored is dropped, and nothing else is.
func TestFirstStartQuiet(t *testing.T) {
	var out bytes.Buffer
	core := newZapSlog(slog.New(slog.NewTextHandler(&out, nil)))
	log := func(level zapcore.Level, msg string, fields ...zapcore.Field) {
		t.Helper()
		if ce := core.Check(zapcore.Entry{Level: level, Message: msg}, nil); ce != nil {
			ce.Write(fields...)
		}
	}
	log(zapcore.WarnLevel, "18872ab49415b7e4 cannot campaign at term 1 since there are still pending configuration changes to apply")
	log(zapcore.WarnLevel, "Failed to detect schema version", zap.Error(errors.New("missing term information")))
	log(zapcore.ErrorLevel, "failed to update storage version", zap.String("cluster-version", "3.7.0"),
		zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	if out.Len() > 0 {
		t.Errorf("a first start's entries were logged:\n%s", out.String())
	}
	log(zapcore.WarnLevel, "18872ab49415b7e4 cannot campaign at term 5 since there are still pending configuration changes to apply")
	log(zapcore.ErrorLevel, "failed to update storage version", zap.Error(errors.New("permission denied")))
	if got := strings.Count(out.String(), "\n"); got != 2 {
		t.Errorf("%d of 2 other entries logged:\n%s", got, out.String())
	}
}

// TestFreshStartLogsNoFirstStartNoise: a member started on a new directory
// logs none of the entries above by the time it has served a write.
func TestFreshStartLogsNoFirstStartNoise(t *testing.T) {
	var out syncbuf.Buffer
	e, err := Start(Config{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := e.Client().Put(context.Background(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "missing term information") || strings.Contains(s, "cannot campaign at term 1") {
		t.Errorf("a fresh start logged:\n%s", s)
	}
}

// TestFatalEntry: an entry etcd panics after is logged as its last, with
// its error, and kept for the start that fails on it to return.
func TestFatalEntry(t *testing.T) {
	var out bytes.Buffer
	zs := newZapSlog(slog.New(slog.NewTextHandler(&out, nil)))
	lg := zap.New(sampled(zs))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("zap did not panic after a Panic entry")
			}
		}()
		lg.Panic("failed to create WAL", zap.Error(errors.New("no space left on device")))
	}()
	if !strings.Contains(out.String(), `msg="failed to create WAL"`) || !strings.Contains(out.String(), "fatal=true") {
		t.Errorf("logged %q", out.String())
	}
	if got := zs.fatal.Load(); got == nil || *got != "failed to create WAL: no space left on device" {
		t.Errorf("kept %v", got)
	}
}
