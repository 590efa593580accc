package embedded

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestRepeatedWarnings: a message etcd logs in a loop is logged a few times
// a second; the next one logged says how many were left out. Other
// messages are not held back.
func TestRepeatedWarnings(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	var out bytes.Buffer
	z := &zapSlog{log: slog.New(slog.NewTextHandler(&out, nil)), closing: new(atomic.Bool), repeats: newRepeats(clk)}
	warn := func(msg string) {
		t.Helper()
		if err := z.Write(zapcore.Entry{Level: zapcore.WarnLevel, Message: msg}, nil); err != nil {
			t.Fatal(err)
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
	clk.SetTime(clk.Now().Add(repeatWindow))
	warn("failed to publish local member to cluster through raft")
	if !strings.Contains(out.String(), "suppressedRepeats=97") {
		t.Errorf("the first entry after the window does not count the 97 left out:\n%s", out.String())
	}
}
