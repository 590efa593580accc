package tick

import (
	"context"
	"runtime"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestEvery(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		Every(ctx, clk, time.Second, func() { calls <- clk.Now() })
		close(done)
	}()
	for !clk.HasWaiters() { // the ticker, made by Every's goroutine
		runtime.Gosched()
	}
	clk.Step(999 * time.Millisecond)
	for i := 1; i <= 3; i++ {
		select {
		case at := <-calls:
			t.Fatalf("a call at %v, before its interval passed", at)
		default:
		}
		clk.Step(time.Millisecond)
		if at := <-calls; !at.Equal(time.Unix(int64(i), 0)) {
			t.Fatalf("call %d at %v", i, at)
		}
		clk.Step(999 * time.Millisecond)
	}
	cancel()
	<-done
}

// TestStart: the ticker exists when Start returns, so a step right after
// it calls f, with no wait for the goroutine to begin.
func TestStart(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan struct{}, 1)
	Start(ctx, clk, time.Second, func() { calls <- struct{}{} })
	if !clk.HasWaiters() {
		t.Fatal("no ticker when Start returned")
	}
	clk.Step(time.Second)
	select {
	case <-calls:
	case <-time.After(time.Minute):
		t.Fatal("f not called after a step of the interval")
	}
}
