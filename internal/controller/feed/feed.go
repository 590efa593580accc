// Package feed follows one resource for a controller that keeps its own
// compact view of it: it lists the resource, then watches it from the
// list's resourceVersion, and hands every object to the controller's
// Handler, keeping none of them.
//
// A client-go informer keeps every object in a store keyed by
// namespace/name, so that it can answer Get and List and, after a relist,
// tell which objects went while it was not watching. A controller that
// answers those questions from a table of its own (the garbage collector's
// graph, the node lifecycle controller's health table) needs none of that:
// with 100 000 node Leases, an informer's store is 100 000 key strings and a
// map of 100 000 entries, a few megabytes and 100 000 heap objects for Go's
// collector to mark, and every change passes through its queue and its
// listeners' buffers before it reaches the handler. A Feed calls the handler
// from its own goroutine, in the order of the watch, and after a relist asks
// the handler itself to forget the objects the list no longer holds.
//
// # Model
//
// Run lists, calls Handler.Seen for every object listed, and then watches
// from the list's resourceVersion, with bookmarks, calling Seen for objects
// added or changed and Gone for objects deleted. When a watch ends it
// watches again from the last resourceVersion it saw. When the server no
// longer has that resourceVersion (410 Gone, or an expired one), Run lists
// again, calls Seen for every object listed and then Handler.Relisted, which
// forgets whatever the handler holds of objects not listed. Failed lists
// and watches, and watches that end with nothing delivered, are followed by
// a backoff that doubles from 800 ms to 30 s and starts again once a list
// or a watch has delivered something. HasSynced reports whether the first
// list has been handed to the handler.
package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Handler receives a Feed's objects, one call at a time, on the Feed's
// goroutine. The objects are the reader's own (for leasehold's watch
// cache, shared by all its readers): a handler must not modify them.
type Handler struct {
	// Seen is called with every object a list returns and every object a
	// watch adds or changes. initial is true for the objects of the first
	// list only.
	Seen func(obj runtime.Object, initial bool)
	// Gone is called with every object a watch deletes, in its last state.
	Gone func(obj runtime.Object)
	// Relisted is called after every list but the first, once Seen has had
	// all its objects: the handler forgets what it holds of the objects
	// for which listed (by uid) is false, which were deleted while the Feed
	// was not watching.
	Relisted func(listed func(types.UID) bool)
}

// Config configures a Feed.
type Config struct {
	// ListerWatcher lists and watches the resource. Required.
	ListerWatcher cache.ListerWatcher
	// Handler receives the objects. Seen, Gone and Relisted are required.
	Handler Handler
	// Clock times the backoff after failures; default the real clock.
	Clock clock.Clock
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Feed follows one resource for one Handler.
type Feed struct {
	lw      cache.ListerWatcherWithContext
	h       Handler
	clock   clock.Clock
	log     *slog.Logger
	synced  atomic.Bool
	running atomic.Bool
}

// Backoff after a failed list or watch.
const (
	minBackoff = 800 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Watches are renewed after a random time between minWatchTimeout and twice
// that, as client-go's reflector does, so that a remote server's watches do
// not all end at once.
const minWatchTimeout = 5 * time.Minute

// New validates cfg and returns a Feed; Run starts it.
func New(cfg Config) (*Feed, error) {
	if cfg.ListerWatcher == nil {
		return nil, errors.New("feed: ListerWatcher is required")
	}
	if cfg.Handler.Seen == nil || cfg.Handler.Gone == nil || cfg.Handler.Relisted == nil {
		return nil, errors.New("feed: Handler needs Seen, Gone and Relisted")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Feed{lw: cache.ToListerWatcherWithContext(cfg.ListerWatcher), h: cfg.Handler, clock: cfg.Clock, log: cfg.Logger}, nil
}

// HasSynced reports whether the first list has been handed to the handler.
func (f *Feed) HasSynced() bool { return f.synced.Load() }

// Run follows the resource until ctx ends, then returns nil. It may be
// called once.
func (f *Feed) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("feed: Run called twice")
	}
	rv := ""
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			t := f.clock.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
		}
		var err error
		delivered := true
		if rv == "" {
			rv, err = f.list(ctx)
		} else {
			rv, delivered, err = f.watch(ctx, rv)
		}
		switch {
		case ctx.Err() != nil:
		case err == nil && delivered:
			backoff = 0
		case err == nil:
			// A watch that ended with nothing delivered: wait before the
			// next, so that a server ending every watch is not asked again
			// and again at once.
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
		case expired(err):
			f.log.Info("watch fell behind the server's history; listing again", "err", err)
			rv, backoff = "", 0
		default:
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			f.log.Warn("feed failed; retrying", "err", err, "after", backoff)
		}
	}
	return nil
}

// list lists the resource, hands its objects to the handler and returns
// the list's resourceVersion.
func (f *Feed) list(ctx context.Context) (string, error) {
	list, err := f.lw.ListWithContext(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("feed: list: %w", err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", fmt.Errorf("feed: list: %w", err)
	}
	first := !f.synced.Load()
	var listed map[types.UID]struct{}
	if !first {
		listed = map[types.UID]struct{}{}
	}
	err = meta.EachListItem(list, func(obj runtime.Object) error {
		if listed != nil {
			m, err := meta.Accessor(obj)
			if err != nil {
				return err
			}
			listed[m.GetUID()] = struct{}{}
		}
		f.h.Seen(obj, first)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("feed: list: %w", err)
	}
	if first {
		f.synced.Store(true)
	} else {
		f.h.Relisted(func(uid types.UID) bool { _, ok := listed[uid]; return ok })
	}
	return lm.GetResourceVersion(), nil
}

// watch watches from rv until the watch ends, handing its objects to the
// handler. It returns the last resourceVersion seen and whether the watch
// delivered anything.
func (f *Feed) watch(ctx context.Context, rv string) (string, bool, error) {
	timeout := int64((minWatchTimeout + rand.N(minWatchTimeout)) / time.Second)
	w, err := f.lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
	if err != nil {
		return rv, false, fmt.Errorf("feed: watch: %w", err)
	}
	defer w.Stop()
	delivered := false
	for {
		select {
		case <-ctx.Done():
			return rv, delivered, nil
		case e, ok := <-w.ResultChan():
			if !ok {
				return rv, delivered, nil
			}
			if e.Type == watch.Error {
				return rv, delivered, fmt.Errorf("feed: watch: %w", apierrors.FromObject(e.Object))
			}
			m, err := meta.Accessor(e.Object)
			if err != nil {
				return rv, delivered, fmt.Errorf("feed: watch: %w", err)
			}
			delivered = true
			switch e.Type {
			case watch.Added, watch.Modified:
				f.h.Seen(e.Object, false)
			case watch.Deleted:
				f.h.Gone(e.Object)
			}
			if v := m.GetResourceVersion(); v != "" {
				rv = v
			}
		}
	}
}

// ListWatch makes a ListerWatcher of a client's List and Watch, for a feed
// that reads through the API (typed clients and the metadata client alike).
func ListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, o)
		},
		WatchFuncWithContext: watchFunc,
	}
}

// expired reports whether err says the server no longer has the
// resourceVersion asked for.
func expired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
