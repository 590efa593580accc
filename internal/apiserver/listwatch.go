package apiserver

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// ListerWatcher feeds an informer of the server's own controllers straight
// from the watch cache: the list and the watch events carry the cached
// objects themselves, with no encoding, HTTP or decoding in between, and
// the informer's store shares them with the cache instead of holding a
// decoded copy of every object. Those objects must never be modified; copy
// one before changing it, as client-go asks of every informer's objects.
//
// Reads bypass authentication, authorization, audit and the in-flight
// limits: they are the server's own. Writes still go through the API.
// Label and field selectors work as in the API (an invalid one is a 400),
// filtering the cache's objects. The resource must have storage of its own
// (not a view of another resource's). A resource served without a watch
// cache (Config.WatchCacheSizes) is read from etcd: its objects are then
// copies for this reader alone (SharesObjects is false).
func (s *Server) ListerWatcher(gvr schema.GroupVersionResource, namespace string) (cache.ListerWatcher, error) {
	return s.ListerWatcherWith(gvr, namespace)
}

// ListerWatcherWith is ListerWatcher with options that tune what its
// watches deliver (OnlyChanges).
func (s *Server) ListerWatcherWith(gvr schema.GroupVersionResource, namespace string, opts ...ReadOption) (cache.ListerWatcher, error) {
	r, k, err := s.ownStorage(gvr)
	if err != nil {
		return nil, err
	}
	if !r.Namespaced {
		namespace = ""
	}
	lw := &listWatch{s: s, r: r, k: k, namespace: namespace}
	for _, o := range opts {
		o(lw)
	}
	return lw, nil
}

// CutOff tells since when the watch cache of gvr has not followed etcd
// (store.Kind.CutOff): zero while it does, and for a resource without one.
func (s *Server) CutOff(gvr schema.GroupVersionResource) time.Time {
	if _, k, err := s.ownStorage(gvr); err == nil {
		return k.CutOff()
	}
	return time.Time{}
}

// ownStorage is the resource gvr and its storage, which must be its own
// (not a view of another resource's).
func (s *Server) ownStorage(gvr schema.GroupVersionResource) (*registry.Resource, *store.Kind, error) {
	r, ok := registry.Lookup(gvr.GroupVersion(), gvr.Resource)
	if !ok {
		return nil, nil, fmt.Errorf("apiserver: no resource %s", gvr)
	}
	k, ok := s.kinds[r].(*store.Kind)
	if !ok {
		return nil, nil, fmt.Errorf("apiserver: %s has no storage of its own", gvr)
	}
	return r, k, nil
}

// A ReadOption tunes a ListerWatcher.
type ReadOption func(*listWatch)

// OnlyChanges makes the watches hold back a MODIFIED event when changed
// reports no difference that matters to the reader between the object's
// version before and the new one: a reader of owners and finalizers need
// not wake for every renewal of a Lease. The informer's store then keeps
// the older version, and its resourceVersion moves on with the bookmarks
// (every 10 s), which client-go's Reflector asks for. Events replayed when
// a watch resumes, and every event of a resource read from etcd, are
// delivered as they are (store.WatchOptions.Changed).
func OnlyChanges(changed func(prev, obj runtime.Object) bool) ReadOption {
	return func(lw *listWatch) { lw.changed = changed }
}

type listWatch struct {
	s         *Server
	r         *registry.Resource
	k         *store.Kind
	namespace string
	changed   func(prev, obj runtime.Object) bool
}

// The deprecated forms, for cache.ListerWatcher.
func (lw *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

// SharesObjects reports whether the objects lw hands out are the watch
// cache's own, shared with every reader (and never modified), so that a
// controller may hold them at no cost; for a resource served from etcd
// alone each is a copy decoded for this reader.
func (lw *listWatch) SharesObjects() bool { return lw.k.WatchCacheEnabled() }

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and
// then watch: a list from the cache costs no more than the initial events
// of a watch-list would.
func (lw *listWatch) IsWatchListSemanticsUnSupported() bool { return true }

// ListWithContext returns every object of the namespace from the cache,
// however opts pages (a list from memory is one consistent snapshot). A
// resource without a watch cache is read from etcd in the pages opts asks
// for, each page read at the first page's revision.
func (lw *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	pred, err := lw.filter(opts)
	if err != nil {
		return nil, err
	}
	rv := opts.ResourceVersion
	match := opts.ResourceVersionMatch
	if match == metav1.ResourceVersionMatchExact || (match == "" && opts.Limit > 0 && rv != "" && rv != "0") {
		// Only etcd has the state at an exact past revision (which a bare
		// resourceVersion with a limit asks for too); a controller wants
		// the newest it can have at least as new as that.
		match = metav1.ResourceVersionMatchNotOlderThan
	}
	// The informer keeps what the list returns: wait for the cache's own
	// objects rather than decode a second copy of each from etcd.
	if err := lw.k.WaitFilled(ctx); err != nil {
		return nil, lw.apiError(err)
	}
	so := store.ListOptions{Namespace: lw.namespace, ResourceVersion: rv, Match: match, Filter: pred}
	if !lw.SharesObjects() {
		// Copies decoded for this reader alone, read from etcd in the
		// pages asked for (the controllers' feeds ask for 500 at a time),
		// one page at a time: at a start the feeds of two controllers read
		// every Node at once, beside the watch caches' fill, and one after
		// the other they left the start's heap 40 MB smaller at its
		// largest (100 000 nodes, docs/PERFORMANCE.md).
		so.Limit, so.Continue = opts.Limit, opts.Continue
		lw.s.uncachedLists.Lock()
		defer lw.s.uncachedLists.Unlock()
	}
	res, err := lw.k.List(ctx, so)
	if err != nil {
		return nil, lw.apiError(err)
	}
	return &itemList{ListMeta: metav1.ListMeta{ResourceVersion: fmt.Sprint(res.ResourceVersion), Continue: res.Continue,
		RemainingItemCount: res.RemainingItemCount}, Items: res.Items}, nil
}

// WatchWithContext watches the cache from opts.ResourceVersion.
func (lw *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	pred, err := lw.filter(opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := lw.k.Watch(ctx, store.WatchOptions{
		Namespace: lw.namespace, ResourceVersion: opts.ResourceVersion, SendInitialEvents: opts.SendInitialEvents,
		Bookmarks: opts.AllowWatchBookmarks, Filter: pred,
		// In-process readers keep up or are restarted from the ring; a
		// deeper buffer than a remote watch's rides out a GC pause at
		// thousands of writes a second, and costs a pointer an event.
		BufferSize: inProcessWatchBuffer,
		Changed:    lw.changed,
	})
	if err != nil {
		cancel()
		return nil, lw.apiError(err)
	}
	result := make(chan watch.Event)
	out := watch.NewProxyWatcher(result)
	go func() {
		defer cancel()
		relay(ctx, w, result, out.StopChan(), lw.s.shutdown)
	}()
	return out, nil
}

const inProcessWatchBuffer = 8192

// filter parses opts' selectors as the API does, into the predicate the
// store applies (nil when there are none).
func (lw *listWatch) filter(opts metav1.ListOptions) (func(runtime.Object) bool, error) {
	ls, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	fs, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	return filter(lw.r, ls, fs)
}

func (lw *listWatch) apiError(err error) error {
	st := statusFor(err, lw.r.GroupResource(), "")
	return &apierrors.StatusError{ErrStatus: *st}
}

// relay delivers a store watch's initial events, then its changes, to
// result until the store ends the watch (its reader fell behind, or the
// cache relisted), the watcher is stopped, ctx ends or the server shuts
// down. It then closes result; the reflector watches again from the last
// revision it saw.
func relay(ctx context.Context, sw *store.Watch, result chan<- watch.Event, stopped, shutdown <-chan struct{}) {
	defer close(result)
	defer sw.Stop()
	send := func(e *store.Event) bool {
		select {
		case result <- watch.Event{Type: e.Type, Object: e.Object}:
			return true
		case <-stopped:
		case <-ctx.Done():
		case <-shutdown:
		}
		return false
	}
	for _, e := range sw.Initial {
		if !send(e) {
			return
		}
	}
	for {
		select {
		case e, ok := <-sw.Events:
			if !ok || !send(e) {
				return
			}
		case <-stopped:
			return
		case <-ctx.Done():
			return
		case <-shutdown:
			return
		}
	}
}
