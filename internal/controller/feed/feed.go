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
// A Feed is client-go's Reflector writing into the handler instead of a
// store: the Reflector lists (in pages, through the API), watches from the
// list's resourceVersion with bookmarks, watches again after a watch ends,
// lists again when the server no longer has the resourceVersion it asks
// for, and backs off after failures, all as it does for an informer. The
// Feed turns what it would write to a store into calls of the handler: the
// objects of a list to Seen and then, after every list but the first, to
// Relisted, which forgets whatever the handler holds of objects not listed;
// an added or changed object to Seen, a deleted one to Gone. HasSynced
// reports whether the first list has been handed to the handler.
package feed

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
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
	// Clock is the Reflector's (watch timeouts, retries of a watch);
	// default the real clock.
	Clock clock.Clock
	// Logger receives the Reflector's log; default slog.Default().
	Logger *slog.Logger
}

// Feed follows one resource for one Handler.
type Feed struct {
	r       *cache.Reflector
	h       Handler
	log     *slog.Logger
	synced  atomic.Bool
	running atomic.Bool
}

// New validates cfg and returns a Feed; Run starts it.
func New(cfg Config) (*Feed, error) {
	if cfg.ListerWatcher == nil {
		return nil, errors.New("feed: ListerWatcher is required")
	}
	if cfg.Handler.Seen == nil || cfg.Handler.Gone == nil || cfg.Handler.Relisted == nil {
		return nil, errors.New("feed: Handler needs Seen, Gone and Relisted")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return newFeed(cfg, nil), nil
}

// newFeed makes the Feed of a valid cfg; backoff, when set, replaces the
// Reflector's between lists (which waits on the real clock whatever Clock).
func newFeed(cfg Config, backoff *wait.Backoff) *Feed {
	f := &Feed{h: cfg.Handler, log: cfg.Logger}
	// No expected type: the collector's feeds carry any kind, as metadata.
	f.r = cache.NewReflectorWithOptions(cfg.ListerWatcher, nil, (*handlerStore)(f), cache.ReflectorOptions{Clock: cfg.Clock, Backoff: backoff})
	return f
}

// HasSynced reports whether the first list has been handed to the handler.
func (f *Feed) HasSynced() bool { return f.synced.Load() }

// Run follows the resource until ctx ends, then returns nil. It may be
// called once.
func (f *Feed) Run(ctx context.Context) error {
	if !f.running.CompareAndSwap(false, true) {
		return errors.New("feed: Run called twice")
	}
	f.r.RunWithContext(klog.NewContext(ctx, logr.FromSlogHandler(f.log.Handler())))
	return nil
}

// handlerStore is what the Reflector writes to: the Feed's handler.
type handlerStore Feed

var _ cache.ReflectorStore = (*handlerStore)(nil)

func (s *handlerStore) Add(obj any) error {
	s.h.Seen(obj.(runtime.Object), false)
	return nil
}

func (s *handlerStore) Update(obj any) error {
	s.h.Seen(obj.(runtime.Object), false)
	return nil
}

func (s *handlerStore) Delete(obj any) error {
	s.h.Gone(obj.(runtime.Object))
	return nil
}

// Replace hands a list's objects to the handler; after every list but the
// first it then tells the handler which uids the list held.
func (s *handlerStore) Replace(items []any, _ string) error {
	first := !s.synced.Load()
	var listed map[types.UID]struct{}
	if !first {
		listed = make(map[types.UID]struct{}, len(items))
	}
	for _, item := range items {
		obj := item.(runtime.Object)
		if listed != nil {
			m, err := meta.Accessor(obj)
			if err != nil {
				return err
			}
			listed[m.GetUID()] = struct{}{}
		}
		s.h.Seen(obj, first)
	}
	if first {
		s.synced.Store(true)
	} else {
		s.h.Relisted(func(uid types.UID) bool { _, ok := listed[uid]; return ok })
	}
	return nil
}

// Resync does nothing: the Reflector calls it only with a resync period,
// and a Feed has none.
func (s *handlerStore) Resync() error { return nil }

// ListWatch makes a ListerWatcher of a client's List and Watch, for a feed
// that reads through the API (typed clients and the metadata client alike).
// client is the clientset they come from, which tells the Reflector
// whether it serves watch-list streams (a fake one does not).
func ListWatch[L runtime.Object](client any, list func(context.Context, metav1.ListOptions) (L, error), watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, o)
		},
		WatchFuncWithContext: watchFunc,
	}, client)
}
