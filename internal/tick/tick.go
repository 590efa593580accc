// Package tick runs a function at a fixed interval by an injected clock.
package tick

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// Every calls f every interval, by clk, until ctx ends; the first call
// comes an interval after Every starts. A call that takes longer than
// interval delays the next instead of piling up behind it.
func Every(ctx context.Context, clk clock.WithTicker, interval time.Duration, f func()) {
	loop(ctx, clk.NewTicker(interval), f)
}

// Start is Every on a goroutine of its own, whose ticker exists when
// Start returns: a fake clock stepped after it always reaches it.
func Start(ctx context.Context, clk clock.WithTicker, interval time.Duration, f func()) {
	t := clk.NewTicker(interval)
	go loop(ctx, t, f)
}

func loop(ctx context.Context, t clock.Ticker, f func()) {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f()
		}
	}
}
