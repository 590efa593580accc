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
//
// A Reflector gathers every page of a list before it writes any, which
// costs an informer nothing, since its store keeps every object anyway,
// but holds the whole list at once for a controller that keeps only a
// little of each object. A Feed reads the pages itself and hands each
// page's objects to Seen before it reads the next, so that what it holds
// at once is one page (pageSize objects); the Reflector then receives an
// empty list with the list's resourceVersion.
// Where the objects are copies made for this reader, read from etcd (Nodes
// served without a watch cache), that is the difference between one page
// and 100 000 decoded Nodes in memory at every start. A list that fails
// part way is read again from its first page, and the handler may then see
// some objects twice, the second time as new as the first or newer.
package feed

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
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

	// mu is held while a page is handed to the handler, which happens on
	// the goroutine the Reflector lists on, and by Run to wait for that.
	mu sync.Mutex
	// listed holds the uids of the list being read, for Relisted; nil
	// during the first list.
	listed map[types.UID]struct{}
}

// pageSize is how many objects a Feed asks for in each page of a list.
const pageSize = 500

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
	lw := &pagedLister{ListerWatcherWithContext: cache.ToListerWatcherWithContext(cfg.ListerWatcher), f: f,
		noWatchList: watchlist.DoesClientNotSupportWatchListSemantics(cfg.ListerWatcher)}
	// No expected type: the collector's feeds carry any kind, as metadata.
	f.r = cache.NewReflectorWithOptions(lw, nil, (*handlerStore)(f), cache.ReflectorOptions{Clock: cfg.Clock, Backoff: backoff})
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
	// The Reflector returns as soon as ctx ends, perhaps while its list
	// goroutine still reads: wait for the page being handed over, if any.
	// No other gets through, since ctx has ended (pagedLister.hand).
	f.mu.Lock()
	defer f.mu.Unlock()
	return nil
}

// pagedLister is the ListerWatcher the Feed's Reflector reads through. Its
// List reads the whole list page by page, hands each page's objects to the
// handler as it comes, and answers the Reflector with an empty list of the
// same resourceVersion; the Reflector's Replace then ends the list.
//
// client-go's pager.EachListItem pages too, but it reads pages ahead on a
// goroutine of its own, does not tell the list's resourceVersion, and
// sends the first page's resourceVersion again with every continue token,
// which pager.List clears (as this does) because the API server refuses
// the pair.
type pagedLister struct {
	cache.ListerWatcherWithContext
	f           *Feed
	noWatchList bool
}

// IsWatchListSemanticsUnSupported tells the Reflector what the Feed's own
// ListerWatcher tells of itself.
func (p *pagedLister) IsWatchListSemanticsUnSupported() bool { return p.noWatchList }

// List and Watch are the forms without a context that cache.ListerWatcher
// still asks for; the Reflector calls those with one.
func (p *pagedLister) List(opts metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), opts)
}

func (p *pagedLister) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), opts)
}

func (p *pagedLister) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	f := p.f
	first := !f.synced.Load()
	var listed map[types.UID]struct{}
	if !first {
		listed = make(map[types.UID]struct{})
	}
	opts.Limit = pageSize
	if rv := opts.ResourceVersion; rv != "" && rv != "0" && opts.ResourceVersionMatch == "" {
		// With a limit, a bare resourceVersion asks for exactly that
		// state, from etcd; the Reflector asks for one at least as new.
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	}
	for {
		page, err := p.ListerWatcherWithContext.ListWithContext(ctx, opts)
		if err != nil {
			return nil, err
		}
		lm, err := meta.ListAccessor(page)
		if err != nil {
			return nil, err
		}
		if err := p.hand(ctx, page, first, listed); err != nil {
			return nil, err
		}
		if lm.GetContinue() == "" {
			f.mu.Lock()
			f.listed = listed
			f.mu.Unlock()
			return &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: lm.GetResourceVersion()}}, nil
		}
		opts.Continue = lm.GetContinue()
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
}

// hand gives one page's objects to the handler, noting their uids in
// listed when it is not nil.
func (p *pagedLister) hand(ctx context.Context, page runtime.Object, initial bool, listed map[types.UID]struct{}) error {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	// Run ends once ctx has: a page read after that goes nowhere.
	if err := ctx.Err(); err != nil {
		return err
	}
	return meta.EachListItem(page, func(obj runtime.Object) error { return f.listedObject(obj, initial, listed) })
}

// listedObject hands obj of a list to the handler, noting its uid in
// listed when that is not nil.
func (f *Feed) listedObject(obj runtime.Object, initial bool, listed map[types.UID]struct{}) error {
	if listed != nil {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		listed[m.GetUID()] = struct{}{}
	}
	f.h.Seen(obj, initial)
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

// Replace ends a list: the pagedLister has handed its objects to the
// handler already, and items holds those that came another way (the
// initial events of a watch-list stream). After every list but the first
// it then tells the handler which uids the list held.
func (s *handlerStore) Replace(items []any, _ string) error {
	first := !s.synced.Load()
	s.mu.Lock()
	listed := s.listed
	s.listed = nil
	s.mu.Unlock()
	if !first && listed == nil {
		listed = make(map[types.UID]struct{}, len(items))
	}
	for _, item := range items {
		if err := (*Feed)(s).listedObject(item.(runtime.Object), first, listed); err != nil {
			return err
		}
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
