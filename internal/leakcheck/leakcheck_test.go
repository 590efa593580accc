package leakcheck

import (
	"testing"
	"time"
)

type worker struct{ stop chan struct{} }

func (w *worker) run() { <-w.stop }

func TestLeaked(t *testing.T) {
	w := &worker{stop: make(chan struct{})}
	go w.run()
	if got := Leaked(0, "leakcheck.(*worker).run"); got == "" {
		t.Fatal("a running goroutine was not reported")
	}
	close(w.stop)
	if got := Leaked(5*time.Second, "leakcheck.(*worker).run"); got != "" {
		t.Fatalf("a finished goroutine was reported:\n%s", got)
	}
}
