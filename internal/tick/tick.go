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
	t := clk.NewTicker(interval)
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
