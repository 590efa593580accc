package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// watchFunc opens a watch from a resourceVersion.
type watchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)

// follow watches from resourceVersion rv until ctx ends, handing every
// Added, Modified and Deleted event to handle. A watch the server ends is
// resumed from the last resourceVersion seen (counted in restarts); a
// failure to open one is retried after 200ms. An Error event, such as 410
// Gone once rv is compacted, ends it with that error.
// opened, if not nil, is called once the first watch is open.
func follow(ctx context.Context, clk clock.Clock, open watchFunc, rv string, restarts *atomic.Uint64, opened func(), handle func(watch.Event)) error {
	first := true
	for ctx.Err() == nil {
		w, err := open(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: ptrInt64(3600)})
		if err != nil {
			if ctx.Err() == nil {
				sleepUntil(ctx, clk, clk.Now().Add(200*time.Millisecond))
			}
			continue
		}
		if !first {
			restarts.Add(1)
		} else if opened != nil {
			opened()
		}
		first = false
		for ev := range resultsUntil(ctx, w) {
			switch ev.Type {
			case watch.Error:
				w.Stop()
				return fmt.Errorf("watch from resourceVersion %s: %w", rv, apierrors.FromObject(ev.Object))
			case watch.Bookmark:
			default:
				handle(ev)
			}
			if a, err := meta.Accessor(ev.Object); err == nil && a.GetResourceVersion() != "" {
				rv = a.GetResourceVersion()
			}
		}
		w.Stop()
	}
	return nil
}

// resultsUntil yields w's events until w ends or ctx does.
func resultsUntil(ctx context.Context, w watch.Interface) func(func(watch.Event) bool) {
	return func(yield func(watch.Event) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok || !yield(ev) {
					return
				}
			}
		}
	}
}

func ptrInt64(v int64) *int64 { return &v }
