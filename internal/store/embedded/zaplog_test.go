package embedded

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// TestRepeatedWarnings: a message etcd logs in a loop is logged a few times
// a second, then again in the next second. Other messages are not held
// back.
func TestRepeatedWarnings(t *testing.T) {
	var out bytes.Buffer
	core := sampled(&zapSlog{log: slog.New(slog.NewTextHandler(&out, nil)), closing: new(atomic.Bool)})
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
