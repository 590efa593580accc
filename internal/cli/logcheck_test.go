package cli

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// stuckWriter blocks each write until it is released.
type stuckWriter struct{ entered, release chan struct{} }

func (s stuckWriter) Write(p []byte) (int, error) {
	s.entered <- struct{}{}
	<-s.release
	return len(p), nil
}

// TestLogCheck: the log check passes while writes go through, and fails
// once one write has been blocked for two minutes, until it returns.
func TestLogCheck(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	out := stuckWriter{entered: make(chan struct{}), release: make(chan struct{})}
	w := newWatchedWriter(out, clk)
	if w.Name() != "log" {
		t.Errorf("Name() = %q, want log", w.Name())
	}
	if err := w.Check(nil); err != nil {
		t.Fatalf("before any write: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := w.Write([]byte("line\n")); err != nil {
			t.Error(err)
		}
	}()
	<-out.entered
	clk.SetTime(clk.Now().Add(logBlockedAfter - time.Second))
	if err := w.Check(nil); err != nil {
		t.Errorf("a write blocked for %v: %v, want nil", logBlockedAfter-time.Second, err)
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if err := w.Check(nil); err == nil || err.Error() != "logging blocked" {
		t.Errorf("a write blocked for %v: %v, want logging blocked", logBlockedAfter, err)
	}
	close(out.release)
	<-done
	if err := w.Check(nil); err != nil {
		t.Errorf("after the write returned: %v", err)
	}
}
