package leakcheck

import (
	"testing"
	"time"
)

type worker struct{ started, stop chan struct{} }

func (w *worker) run() {
	close(w.started)
	<-w.stop
}

func TestLeaked(t *testing.T) {
	w := &worker{started: make(chan struct{}), stop: make(chan struct{})}
	go w.run()
	// Until it runs, a goroutine's stack names the go statement's wrapper
	// (TestLeaked.gowrap1), not the function it will call.
	<-w.started
	if got := Leaked(0, "leakcheck.(*worker).run"); got == "" {
		t.Fatal("a running goroutine was not reported")
	}
	close(w.stop)
	if got := Leaked(5*time.Second, "leakcheck.(*worker).run"); got != "" {
		t.Fatalf("a finished goroutine was reported:\n%s", got)
	}
}
