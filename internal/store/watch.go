package store

import (
	"context"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// WatchOptions select what Watch delivers.
type WatchOptions struct {
	// Namespace restricts to one namespace; "" is all.
	Namespace string
	// ResourceVersion: "" starts from a fresh consistent state, "0" from any
	// cached state (both first deliver the current objects as ADDED events);
	// "N" delivers every change after resourceVersion N.
	ResourceVersion string
	// SendInitialEvents, when set, says explicitly whether the current
	// objects come first as ADDED events (the watch-list protocol).
	SendInitialEvents *bool
	// Bookmarks asks for periodic BOOKMARK events carrying the revision.
	Bookmarks bool
	// Filter keeps objects for which it returns true; an object that stops
	// matching is delivered as DELETED, one that starts matching as ADDED.
	// With Kind.SetSameView, it must tell apart only what that function
	// compares.
	Filter func(obj runtime.Object) bool
	// BufferSize is how many events may wait for a slow reader before the
	// watch is closed; default 1024.
	BufferSize int
	// Changed, when set, holds back a MODIFIED event whose object it
	// reports unchanged from the version before, for readers that look at
	// only part of an object (the garbage collector: owners, finalizers and
	// deletion, which a renewal leaves alone). Only the watch cache's live
	// events are held back; those it replays, and those of a watch served
	// from etcd, are delivered, having no version before at hand. A reader
	// that passes Changed should ask for Bookmarks, which carry its
	// revision forward while its events are held back.
	Changed func(prev, obj runtime.Object) bool
}

// Watch is an open watch. Initial events come first; then Events delivers
// changes until it is closed (the client should watch again from the last
// resourceVersion it saw).
type Watch struct {
	Initial []*Event
	// InitialRV is the resourceVersion Initial reflects.
	InitialRV int64
	Events    <-chan *Event
	stop      func()
}

// Stop ends the watch and releases it.
func (w *Watch) Stop() { w.stop() }

type watcher struct {
	prefix    string
	filter    func(runtime.Object) bool
	changed   func(prev, obj runtime.Object) bool
	minRV     int64
	bookmarks bool
	ch        chan *Event
	closed    bool
}

// Watch opens a watch on the kind.
func (k *Kind) Watch(ctx context.Context, opts WatchOptions) (*Watch, error) {
	c := k.cache
	if opts.BufferSize <= 0 {
		opts.BufferSize = 1024
	}
	w := &watcher{prefix: k.Prefix(opts.Namespace), filter: opts.Filter, changed: opts.Changed, bookmarks: opts.Bookmarks, ch: make(chan *Event, opts.BufferSize)}
	rv := opts.ResourceVersion
	initial := rv == "" || rv == "0"
	if opts.SendInitialEvents != nil {
		initial = *opts.SendInitialEvents
	}
	var minRV int64
	switch rv {
	case "":
		cur, err := k.s.CurrentRevision(ctx)
		if err != nil {
			return nil, err
		}
		minRV = revisionRV(cur)
	case "0":
	default:
		n, err := ParseResourceVersion(rv)
		if err != nil {
			return nil, err
		}
		minRV = n
	}
	if c == nil {
		return k.watchUncached(ctx, w, opts.Namespace, initial, minRV)
	}
	if initial {
		if err := c.waitFor(ctx, minRV); err != nil {
			return nil, err
		}
	} else {
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	c.mu.Lock()
	out := &Watch{Events: w.ch}
	var state []entry // the initial state, made into events once unlocked
	if rv == "0" && !initial {
		// From any revision, without the objects as they are: from now.
		minRV = c.rv
	}
	switch {
	case initial:
		state = slices.Clone(keyRange(c.orderedLocked(), w.prefix))
		w.minRV = c.rv
	case minRV >= c.windowStart:
		for i := range c.n {
			e := c.eventLocked(i)
			if e.RV <= minRV || !strings.HasPrefix(k.keyOf(e.Object), w.prefix) {
				continue
			}
			if te := w.transform(e); te != nil {
				out.Initial = append(out.Initial, te)
			}
		}
		w.minRV = max(minRV, c.rv)
	default:
		c.mu.Unlock()
		return k.watchEtcd(ctx, w, minRV)
	}
	out.InitialRV = c.rv
	c.watchers[w] = struct{}{}
	watchers.WithLabelValues(k.resource.Group, k.resource.Resource).Inc()
	c.mu.Unlock()
	for _, e := range state {
		if w.filter == nil || w.filter(e.obj) {
			out.Initial = append(out.Initial, &Event{Type: watch.Added, Object: e.obj, RV: ResourceVersion(e.obj)})
		}
	}
	out.stop = func() {
		c.mu.Lock()
		c.closeWatcherLocked(w)
		c.mu.Unlock()
	}
	return out, nil
}

func (k *Kind) keyOf(obj runtime.Object) string {
	m, err := metaAccessor(obj)
	if err != nil {
		return ""
	}
	return k.Key(m.GetNamespace(), m.GetName())
}

func (c *cache) closeWatcherLocked(w *watcher) {
	if w.closed {
		return
	}
	w.closed = true
	close(w.ch)
	if _, ok := c.watchers[w]; ok {
		delete(c.watchers, w)
		watchers.WithLabelValues(c.k.resource.Group, c.k.resource.Resource).Dec()
	}
}

// offerLocked queues e for w; prev is the object's version before e (nil
// when it had none).
func (w *watcher) offerLocked(c *cache, key string, e *Event, prev runtime.Object) {
	if e.RV <= w.minRV || !strings.HasPrefix(key, w.prefix) {
		return
	}
	te := w.transform(e)
	if te == nil {
		return
	}
	if te.Type == watch.Modified && w.changed != nil && prev != nil && !w.changed(prev, te.Object) {
		return
	}
	select {
	case w.ch <- te:
	default:
		watchersTerminated.WithLabelValues(c.k.resource.Group, c.k.resource.Resource).Inc()
		c.closeWatcherLocked(w)
	}
}

// transform adapts a shared event to this watcher's filter.
func (w *watcher) transform(e *Event) *Event {
	if w.filter == nil {
		return e
	}
	if e.Type == watch.Deleted {
		if e.prev != nil && w.filter(e.prev) {
			return e
		}
		return nil
	}
	curIn := w.filter(e.Object)
	prevIn := e.sameView && curIn || e.prev != nil && w.filter(e.prev)
	switch {
	case curIn && (prevIn || e.Type == watch.Added):
		return e
	case curIn:
		return &Event{Type: watch.Added, Object: e.Object, RV: e.RV}
	case prevIn:
		gone := e.prev.DeepCopyObject()
		setResourceVersion(gone, e.RV)
		return &Event{Type: watch.Deleted, Object: gone, RV: e.RV}
	}
	return nil
}

// sendBookmarks offers every watcher that asked for them a BOOKMARK at the
// cache's revision; a full watcher simply misses this one.
func (c *cache) sendBookmarks() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.watchers) == 0 {
		return
	}
	e := c.k.Bookmark(c.rv)
	for w := range c.watchers {
		if w.bookmarks && c.rv > w.minRV {
			select {
			case w.ch <- e:
			default:
			}
		}
	}
}

// Bookmark returns a BOOKMARK event at resourceVersion rv: an empty object
// of the kind carrying only the resourceVersion.
func (k *Kind) Bookmark(rv int64) *Event {
	obj := k.newObj()
	setResourceVersion(obj, rv)
	return &Event{Type: watch.Bookmark, Object: obj, RV: rv}
}

// watchUncached serves a watch of a kind without a watch cache from etcd:
// with initial events, the objects of a list at the latest revision (which
// must not be older than minRV), then the changes after it; without, the
// changes after minRV (after the current revision when minRV is 0).
func (k *Kind) watchUncached(ctx context.Context, w *watcher, namespace string, initial bool, minRV int64) (*Watch, error) {
	from := minRV
	var events []*Event
	if initial {
		res, err := k.listEtcd(ctx, ListOptions{Namespace: namespace, Filter: w.filter}, 0, w.prefix)
		if err != nil {
			return nil, err
		}
		if res.ResourceVersion < minRV {
			return nil, tooLargeResourceVersion(minRV, res.ResourceVersion)
		}
		for _, obj := range res.Items {
			events = append(events, &Event{Type: watch.Added, Object: obj, RV: ResourceVersion(obj)})
		}
		from = res.ResourceVersion
	} else if from == 0 {
		cur, err := k.s.CurrentRevision(ctx)
		if err != nil {
			return nil, err
		}
		from = revisionRV(cur)
	}
	out, err := k.watchEtcd(ctx, w, from)
	if err != nil {
		return nil, err
	}
	out.Initial, out.InitialRV = events, from
	return out, nil
}

// watchEtcd serves a watch from a resourceVersion older than the cache's
// window (or of a kind without a cache) straight from etcd, or fails with
// ErrCompacted when etcd no longer has it. It watches the whole kind, as
// the cache does, to place the kind's deletions in each revision as every
// other watch of it does (nextPlace), and keeps what is under w.prefix.
func (k *Kind) watchEtcd(ctx context.Context, w *watcher, from int64) (*Watch, error) {
	// The first revision with changes after from: from's own, unless from
	// is its end; etcd's first is 1 (a watch from 0 would start now).
	start := max(revisionOf(from+1), 1)
	if _, err := k.s.client.Get(ctx, w.prefix, clientv3.WithRev(max(start-1, 1)), clientv3.WithLimit(1), clientv3.WithKeysOnly()); err != nil {
		return nil, mapEtcdError(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(w.ch)
		wch := k.s.client.Watch(wctx, k.prefix, clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithPrevKV())
		var rev int64
		var place int
		for resp := range wch {
			if resp.Err() != nil || resp.CompactRevision != 0 {
				return
			}
			for _, ev := range resp.Events {
				rev, place = nextPlace(ev, rev, place)
				rv := changeRV(rev, place)
				if rv <= from || !strings.HasPrefix(string(ev.Kv.Key), w.prefix) {
					continue
				}
				e := &Event{RV: rv}
				if ev.PrevKv != nil {
					e.prev, _ = k.decode(ev.PrevKv)
				}
				if ev.Type == clientv3.EventTypeDelete {
					if e.prev == nil {
						continue
					}
					e.Type, e.Object = watch.Deleted, e.prev.DeepCopyObject()
					setResourceVersion(e.Object, rv)
				} else {
					obj, err := k.decodeAt(ev.Kv, rv)
					if err != nil {
						continue
					}
					e.Type, e.Object = watch.Modified, obj
					if ev.IsCreate() {
						e.Type = watch.Added
					}
				}
				if te := w.transform(e); te != nil {
					select {
					case w.ch <- te:
					case <-wctx.Done():
						return
					}
				}
			}
		}
	}()
	return &Watch{Events: w.ch, stop: cancel}, nil
}

// SetStop sets what Stop does, for wrappers that derive a Watch from another.
func (w *Watch) SetStop(stop func()) { w.stop = stop }
