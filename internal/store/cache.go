package store

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// cache is the watch cache of one kind. One goroutine (run) follows etcd:
// it lists the kind's key range, then watches it from the next revision,
// applying each change to an in-memory copy of the current state and to a
// ring of recent events, and handing each event to the registered watchers.
// When etcd compacts past the cache (after a long disconnection) it lists
// again and closes every watcher, whose clients resume or relist.
//
// The ring's capacity follows the kind's rate of change, as kube-apiserver
// sizes its watch caches: it starts at minRing events, doubles (up to the
// configured size) when full of events younger than eventFresh, and halves
// (down to minRing) when full and even its newest quarter is older. A kind
// that changes fast keeps the configured number of events; one that
// changes slowly keeps about eventFresh of history, not thousands of
// superseded versions of its objects. A watch that resumes from before the
// ring's window is served from etcd.
//
// Lock order: c.mu only. Watchers' channels are written without blocking
// while c.mu is held; a watcher whose buffer is full is closed (its client
// reconnects from the last revision it saw, which the ring still holds).
type cache struct {
	k     *Kind
	clock clock.WithTicker
	log   *slog.Logger
	ready chan struct{}
	// watching is closed once the cache has asked etcd for its first watch,
	// after the fill: a progress notification requested before that would
	// reach the watch stream with no watch of the cache's to deliver it to.
	watching chan struct{}
	// cutOff is when the first of the lists and watches of etcd that
	// failed in a row failed, in Unix nanoseconds; 0 once etcd has
	// answered since (Kind.CutOff).
	cutOff atomic.Int64
	// acked is the highest resourceVersion of a write of the kind that
	// etcd acknowledged to this server (Kind.wrote). stalled is when the
	// cache was first found not to have reached such a write, in Unix
	// nanoseconds, once it has gone watchStall without (watchStalls); 0
	// otherwise (Kind.CutOff). stream is the watch stream of the cache's
	// latest watch of etcd (Store.watchStream).
	acked, stalled, stream atomic.Int64

	mu          sync.RWMutex
	items       map[string]runtime.Object
	order       order // items in key order, for lists
	rv          int64 // resourceVersion the state reflects: the end of a revision
	windowStart int64 // every event with a resourceVersion above this is in ring
	ring        []*Event
	head, n     int // ring holds n events starting at head
	watchers    map[*watcher]struct{}
	rvChanged   chan struct{} // closed and replaced whenever rv advances

	// minRing and maxRing bound the ring's capacity, len(ring), which
	// capacity exports (set by Store.Run, for a kind that keeps its cache).
	minRing, maxRing int
	capacity         prometheus.Gauge

	snapshots *listState[snapshotKey, *listSnapshot]

	share *sharer // used by run's goroutine alone
	// lastRev is the revision of the last change applied, and lastPlace
	// its place among the kind's changes in that revision (nextPlace).
	// Used by run's goroutine alone.
	lastRev   int64
	lastPlace int
	events    prometheus.Counter // the kind's series of cacheEvents
	stalls    prometheus.Counter // the kind's series of cacheStalls
	// objects are the kind's series of storageObjects and
	// resourceObjects, kept current by each change (set by Store.Run, for
	// a kind that keeps its cache; nil without).
	objects objectCounts
	// sameView, when set, tells whether two versions of an object look
	// the same to every watcher's Filter (see Kind.SetSameView).
	sameView func(old, new runtime.Object) bool

	// fillGate, when set (by tests), holds the first fill until it closes.
	fillGate <-chan struct{}
	// applyGate, when set (by tests), holds every change from etcd until
	// it closes: the cache lags.
	applyGate <-chan struct{}
}

// Event is one change of an object, shared by every watcher that receives
// it. Object must not be modified.
type Event struct {
	Type   watch.EventType
	Object runtime.Object
	// RV is the resourceVersion of the change (of the Object): its
	// revision and its place among the kind's changes in it (rv.go).
	RV int64
	// at is when the cache received the change, by its clock, in Unix
	// nanoseconds: as a time.Time it would take Event from 128 bytes to
	// 144, on every change.
	at int64
	// prev is the object before the change (nil when added); used to tell
	// watchers with a filter that an object left or entered their view.
	// It is nil as well when sameView is set.
	prev runtime.Object
	// sameView: the change left the object as every filter sees it (a
	// renewal), so whether it was in a watcher's view is whether it is.
	// The ring then does not hold the version before, which nothing else
	// holds once the change is applied: with 40 000 nodes renewing every
	// 10 s, the ring's 16 384 events held as many superseded leases, and
	// the live heap was 259-264 MB with them, 228-229 MB without.
	sameView bool
	memo     memo
}

// memo holds encodings of an event, computed once and shared by every
// watcher that wants the same encoding.
type memo struct {
	mu   sync.Mutex
	keys []string
	vals [][]byte
}

// Encoded returns the encoding of e named key, computing it with f once.
func (e *Event) Encoded(key string, f func() ([]byte, error)) ([]byte, error) {
	e.memo.mu.Lock()
	defer e.memo.mu.Unlock()
	for i, k := range e.memo.keys {
		if k == key {
			return e.memo.vals[i], nil
		}
	}
	b, err := f()
	if err != nil {
		return nil, err
	}
	e.memo.keys = append(e.memo.keys, key)
	e.memo.vals = append(e.memo.vals, b)
	return b, nil
}

// eventFresh is how much history a ring that can grow keeps at least:
// kube-apiserver's eventFreshDuration.
const eventFresh = 75 * time.Second

// defaultMinRing is the smallest capacity of a ring whose configured size
// is larger, kube-apiserver's lower bound.
const defaultMinRing = 100

func newCache(k *Kind, size int, clk clock.WithTicker, log *slog.Logger) *cache {
	minRing := min(defaultMinRing, size)
	return &cache{
		k: k, minRing: minRing, maxRing: size, clock: clk, log: log,
		ready:     make(chan struct{}),
		watching:  make(chan struct{}),
		items:     map[string]runtime.Object{},
		ring:      make([]*Event, minRing),
		share:     newSharer(),
		events:    cacheEvents.WithLabelValues(k.resource.Group, k.resource.Resource),
		stalls:    cacheStalls.WithLabelValues(k.resource.Group, k.resource.Resource),
		watchers:  map[*watcher]struct{}{},
		rvChanged: make(chan struct{}),
		snapshots: newListState[snapshotKey, *listSnapshot](clk),
	}
}

var errCompactedWatch = errors.New("watch compacted")

// errWatchMoved ends a watch of the cache's when the caches' watches move
// to another stream (Store.moveWatches).
var errWatchMoved = errors.New("watch moved to another stream")

// progressRetry is how long a read waiting for the cache to catch up waits
// for a progress notification before asking for another.
const progressRetry = 100 * time.Millisecond

// fillPage is how many objects a fill reads from etcd at once.
const fillPage = 10000

// resumeBackoff spaces the cache's attempts to list or watch etcd again
// after one failed. While etcd has no leader, a watch (which requires one)
// fails as soon as it is made: without the backoff every cache would make
// ten a second.
var resumeBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 10, Cap: 2 * time.Second}

func (c *cache) run(ctx context.Context, bookmarkInterval time.Duration) {
	watchdog := make(chan struct{})
	go func() {
		defer close(watchdog)
		c.watchStalls(ctx)
	}()
	defer func() { <-watchdog }()
	bookmarks := c.clock.NewTicker(bookmarkInterval)
	defer bookmarks.Stop()
	reload, first := true, true
	// failures counts the lists and watches that failed since etcd last
	// answered, the first at since; the first is logged as a warning, the
	// others at debug level, and the recovery once.
	failures, since, backoff := 0, time.Time{}, resumeBackoff
	failed := func(msg string, args ...any) {
		if failures++; failures == 1 {
			since = c.clock.Now()
			c.cutOff.Store(since.UnixNano())
			c.log.Warn(msg, args...)
		} else {
			c.log.Debug(msg, append(args, "failures", failures)...)
		}
		select {
		case <-ctx.Done():
		case <-c.clock.After(backoff.Step()):
		}
	}
	answered := func() {
		// Not cut off before the line says so, so that whoever finds the
		// line finds the cache following etcd.
		c.cutOff.Store(0)
		if failures > 0 {
			c.log.Info("watch cache: etcd answers again", "failures", failures, "after", c.clock.Since(since).Round(time.Millisecond))
		}
		failures, backoff = 0, resumeBackoff
	}
	for ctx.Err() == nil {
		if reload {
			if err := c.reload(ctx, first); err != nil {
				if ctx.Err() == nil {
					failed("watch cache: listing from etcd failed; retrying", "err", err)
				}
				continue
			}
			answered()
			if first {
				close(c.ready)
				first = false
			}
		}
		err := c.follow(ctx, bookmarks.C(), answered)
		reload = errors.Is(err, errCompactedWatch)
		if errors.Is(err, errWatchMoved) {
			// Not a failure: the watch resumes at once, where it was.
			continue
		}
		if err != nil && ctx.Err() == nil {
			failed("watch cache: etcd watch ended; resuming", "err", err, "relist", reload)
		}
	}
	c.mu.Lock()
	for w := range c.watchers {
		c.closeWatcherLocked(w)
	}
	c.mu.Unlock()
}

// watchStall is how long the cache may go without a change that etcd
// acknowledged to this server, a write of the kind at a revision above
// the cache's, before the cache counts as cut off from etcd (Kind.CutOff).
// A watch can hang rather than fail: a member that stops answering but
// keeps its connection open (a stopped process, a stalled machine) holds
// the watches sent to it until etcd's client gives it up (15 s), while
// writes go through the other members. Nothing on the watch tells that
// apart from a quiet kind, and etcd answers no progress request while
// nothing has been written since a watch began; the server's own writes
// do tell it, and a replica that runs the controllers writes their Lease
// every retry period (2 s). It is kube-apiserver's 3 s wait for a fresh
// watch cache, less a margin for the writes' own spacing.
const watchStall = 2 * time.Second

// stallCheck is how often watchStalls compares the cache's revision with
// the writes acknowledged.
const stallCheck = watchStall / 8

// watchStalls notices when the cache stops reaching the revisions of the
// writes etcd acknowledged to this server, and when it reaches them again:
// a hung watch, or a cache too slow to apply what etcd sends. Each check
// keeps one acknowledged revision the cache had not reached (probe) and
// when it was found; the cache counts as stalled once it has not reached
// it for watchStall. Until ctx ends.
//
// A stalled cache moves every cache's watch to a new stream, and again
// after each further watchStall without the probe: a new stream goes to a
// member the client's balancer picks then, which leaves out the members
// that stopped answering its probes (leasehold serve's followAnswering)
// well before its keepalive gives them up, while the old stream stays on
// the member it was opened on until then. Each watch resumes where it
// was, so a cache that was only slow loses nothing.
func (c *cache) watchStalls(ctx context.Context) {
	t := c.clock.NewTicker(stallCheck)
	defer t.Stop()
	var probe int64
	var since, moved time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		c.mu.RLock()
		rv := c.rv
		c.mu.RUnlock()
		now := c.clock.Now()
		if probe != 0 && rv >= probe {
			probe = 0
			// This goroutine alone sets stalled. It logs before it
			// changes stalled, here and below, so that whoever sees the
			// change (CutOff) finds the line and the count.
			if c.stalled.Load() != 0 {
				c.log.Info("watch cache: etcd's watch delivers again", "revision", revisionOf(rv), "after", now.Sub(since).Round(time.Millisecond))
				c.stalled.Store(0)
			}
		}
		if probe == 0 {
			if acked := c.acked.Load(); acked > rv {
				probe, since = acked, now
			}
			continue
		}
		if now.Sub(since) < watchStall {
			continue
		}
		if c.stalled.Load() == 0 {
			c.stalls.Inc()
			moved = time.Time{}
			c.log.Warn("watch cache: etcd's watch has not delivered a write etcd acknowledged; the cache does not follow etcd until it does",
				"revision", revisionOf(probe), "cacheRevision", revisionOf(rv), "for", now.Sub(since).Round(time.Millisecond))
			c.stalled.Store(since.UnixNano())
		}
		if moved.IsZero() || now.Sub(moved) >= watchStall {
			moved = now
			if stream := c.stream.Load(); c.k.s.moveWatches(stream) {
				c.log.Info("watch cache: moving the caches' etcd watches to a new stream", "stream", stream+1)
			}
		}
	}
}

// reload replaces the state with a fresh list from etcd.
func (c *cache) reload(ctx context.Context, first bool) error {
	if first && c.fillGate != nil {
		select {
		case <-c.fillGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	began := c.clock.Now()
	// Each page is decoded while etcd reads the next.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan *clientv3.GetResponse, 1)
	var fetchErr error
	go func() {
		defer close(pages)
		fetchErr = c.fetch(ctx, pages)
	}()
	var items map[string]runtime.Object
	var sorted []entry // etcd returns a range in key order
	var rev int64
	for resp := range pages {
		if items == nil {
			rev = resp.Header.Revision
			// The first page counts the whole range: size the map once
			// rather than grow it through every doubling.
			items = make(map[string]runtime.Object, resp.Count)
			sorted = make([]entry, 0, resp.Count)
		}
		for _, kv := range resp.Kvs {
			obj, err := c.k.decode(kv)
			if err != nil {
				c.log.Error("watch cache: skipping undecodable object", "key", string(kv.Key), "err", err)
				continue
			}
			key := string(kv.Key)
			c.share.share(obj, key, nil)
			items[key] = obj
			sorted = append(sorted, entry{key, obj})
		}
	}
	if fetchErr != nil {
		return fetchErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items, c.order = items, order{entries: sorted}
	c.countLocked()
	c.head, c.n = 0, 0
	c.windowStart = revisionRV(rev)
	if !first {
		// Watchers may have missed changes: make them start over.
		for w := range c.watchers {
			c.closeWatcherLocked(w)
		}
	}
	c.setRVLocked(revisionRV(rev))
	cacheInitializations.WithLabelValues(c.k.resource.Group, c.k.resource.Resource).Inc()
	c.log.Info("watch cache filled", "objects", len(items), "revision", rev, "took", c.clock.Since(began).Round(time.Millisecond))
	return nil
}

// fetch reads the kind's key range from etcd in pages, all at the revision
// of the first, and sends them to pages.
func (c *cache) fetch(ctx context.Context, pages chan<- *clientv3.GetResponse) error {
	start, end := c.k.prefix, clientv3.GetPrefixRangeEnd(c.k.prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(fillPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.k.s.client.Get(ctx, start, opts...)
		if err != nil {
			return err
		}
		rev = resp.Header.Revision
		select {
		case pages <- resp:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// follow watches etcd from the revision after the cache's and applies
// events until the watch fails; it calls created once etcd has made the
// watch.
func (c *cache) follow(ctx context.Context, bookmarks <-chan time.Time, created func()) error {
	c.mu.RLock()
	from := revisionOf(c.rv) + 1
	c.mu.RUnlock()
	stream, moved := c.k.s.watchStream()
	c.stream.Store(stream)
	wctx, cancel := context.WithCancel(watchContext(ctx, stream))
	defer cancel()
	// No WithPrevKV: the object before each change is in c.items already,
	// and asking for it would make etcd read every previous revision back
	// from its database and send it along.
	wch := c.k.s.client.Watch(wctx, c.k.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	select {
	case <-c.watching:
	default:
		close(c.watching)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-bookmarks:
			c.sendBookmarks()
		case <-moved:
			return errWatchMoved
		case resp, ok := <-wch:
			if !ok {
				return errors.New("etcd watch channel closed")
			}
			if resp.CompactRevision != 0 {
				return errCompactedWatch
			}
			if err := resp.Err(); err != nil {
				return err
			}
			if resp.Created {
				created()
				continue
			}
			if resp.IsProgressNotify() {
				c.mu.Lock()
				if rv := revisionRV(resp.Header.Revision); rv > c.rv {
					c.setRVLocked(rv)
				}
				c.mu.Unlock()
				continue
			}
			c.apply(resp.Events)
		}
	}
}

func (c *cache) apply(evs []*clientv3.Event) {
	if len(evs) == 0 {
		return
	}
	if c.applyGate != nil {
		<-c.applyGate
	}
	c.events.Add(float64(len(evs)))
	// Decode outside the lock. This goroutine alone changes items, so it
	// may read them without the lock; the versions replaced lend their
	// names to the new ones.
	decoded := make([]runtime.Object, len(evs))
	keys := make([]string, len(evs))
	rvs := make([]int64, len(evs))
	for i, ev := range evs {
		keys[i] = string(ev.Kv.Key)
		c.lastRev, c.lastPlace = nextPlace(ev, c.lastRev, c.lastPlace)
		rvs[i] = changeRV(c.lastRev, c.lastPlace)
		if ev.Type == clientv3.EventTypePut {
			obj, err := c.k.decodeAt(ev.Kv, rvs[i])
			if err != nil {
				c.log.Error("watch cache: skipping undecodable object", "key", keys[i], "err", err)
				continue
			}
			c.share.share(obj, keys[i], c.items[keys[i]])
			decoded[i] = obj
		}
	}
	now := c.clock.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ev := range evs {
		key := keys[i]
		rv := rvs[i]
		prev := c.items[key]
		var e *Event
		switch ev.Type {
		case clientv3.EventTypePut:
			if decoded[i] == nil {
				continue
			}
			e = &Event{Type: watch.Modified, Object: decoded[i], RV: rv, at: now, prev: prev}
			switch {
			case prev == nil:
				e.Type = watch.Added
			case c.sameView != nil && c.sameView(prev, decoded[i]):
				e.prev, e.sameView = nil, true
			}
			// The map keeps the key it is given, even for a key it has
			// (Go's maps replace string keys): give it the order's copy,
			// which every version's name points into (sharer.share), so
			// that the key is held once.
			c.items[c.order.put(key, decoded[i], prev == nil)] = decoded[i]
		case clientv3.EventTypeDelete:
			if prev == nil {
				continue
			}
			gone := prev.DeepCopyObject()
			setResourceVersion(gone, rv)
			e = &Event{Type: watch.Deleted, Object: gone, RV: rv, at: now, prev: prev}
			delete(c.items, key)
			c.order.remove(key)
		}
		c.pushLocked(e)
		for w := range c.watchers {
			w.offerLocked(c, key, e, prev)
		}
	}
	if c.order.due() {
		c.order.merge(c.items)
	}
	c.countLocked()
	if last := revisionRV(c.lastRev); last > c.rv {
		c.setRVLocked(last)
	}
}

// countLocked sets the kind's apiserver_storage_objects to the objects held.
func (c *cache) countLocked() {
	if c.objects[0] != nil {
		c.objects.Set(float64(len(c.items)))
	}
}

func (c *cache) pushLocked(e *Event) {
	size := len(c.ring)
	if c.n == size {
		// Full: grow while it holds less than eventFresh, shrink once its
		// newest quarter holds more (kube-apiserver's rule, which leaves
		// room between the two so that the size does not flap).
		switch {
		case size < c.maxRing && time.Duration(e.at-c.ring[c.head].at) < eventFresh:
			c.resizeLocked(min(2*size, c.maxRing))
		case size > c.minRing && time.Duration(e.at-c.ring[(c.head+size-size/4)%size].at) > eventFresh:
			c.resizeLocked(max(size/2, c.minRing))
		}
		size = len(c.ring)
	}
	if c.n == size {
		old := c.ring[c.head]
		c.ring[c.head] = nil
		c.head = (c.head + 1) % size
		c.n--
		c.windowStart = old.RV
	}
	c.ring[(c.head+c.n)%size] = e
	c.n++
}

// resizeLocked gives the ring room for size events, keeping the newest
// that fit.
func (c *cache) resizeLocked(size int) {
	ring := make([]*Event, size)
	drop := max(c.n-size, 0)
	if drop > 0 {
		c.windowStart = c.eventLocked(drop - 1).RV
	}
	for i := range c.n - drop {
		ring[i] = c.eventLocked(drop + i)
	}
	c.ring, c.head, c.n = ring, 0, c.n-drop
	c.capacity.Set(float64(size))
}

// eventLocked returns the ring's i-th event, oldest first.
func (c *cache) eventLocked(i int) *Event {
	return c.ring[(c.head+i)%len(c.ring)]
}

func (c *cache) setRVLocked(rv int64) {
	c.rv = rv
	close(c.rvChanged)
	c.rvChanged = make(chan struct{})
}

// waitFor blocks until the cache has caught up with rev, for at most
// waitTimeout.
func (c *cache) waitFor(ctx context.Context, rev int64) error {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	var timeout <-chan time.Time
	for {
		c.mu.RLock()
		cur, changed := c.rv, c.rvChanged
		c.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		if timeout == nil {
			t := c.clock.NewTimer(waitTimeout)
			defer t.Stop()
			timeout = t.C()
		}
		// A kind nobody writes to learns the current revision only from a
		// progress notification; ask etcd for one now rather than wait for
		// the periodic one (once the cache watches: right after the fill
		// the answer could come before its watch and be lost), and again if
		// none comes.
		watching, retry := c.watching, (<-chan time.Time)(nil)
		select {
		case <-c.watching:
			c.k.s.requestProgress()
			watching, retry = nil, c.clock.After(progressRetry)
		default:
		}
		select {
		case <-changed:
		case <-watching:
		case <-retry:
		case <-timeout:
			c.mu.RLock()
			cur := c.rv
			c.mu.RUnlock()
			return tooLargeResourceVersion(rev, cur)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// isFilled tells whether the cache holds the kind's state: its first fill
// is done.
func (c *cache) isFilled() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

func (c *cache) get(key string) (runtime.Object, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if obj, ok := c.items[key]; ok {
		return obj, nil
	}
	return nil, ErrNotFound
}

// list answers from memory once the cache has reached minRV.
func (c *cache) list(ctx context.Context, opts ListOptions, minRV int64) (*ListResult, error) {
	if err := c.waitFor(ctx, minRV); err != nil {
		return nil, err
	}
	res := &ListResult{}
	c.readRange(c.k.Prefix(opts.Namespace), func(r []entry, rv int64) {
		res.ResourceVersion = rv
		if len(r) > 0 {
			res.Items = make([]runtime.Object, len(r))
			for i := range r {
				res.Items[i] = r[i].obj
			}
		}
	})
	// The objects are never modified: filter them without the lock.
	if opts.Filter != nil {
		res.Items = slices.DeleteFunc(res.Items, func(obj runtime.Object) bool { return !opts.Filter(obj) })
		if len(res.Items) == 0 {
			res.Items = nil
		}
	}
	return res, nil
}

// readRange calls f with the objects whose keys start with prefix, in key
// order, and the revision they are at. f runs under the cache's lock, which
// the changes from etcd and every read of the kind wait for: it must only
// copy what it needs (100 000 pointers take well under a millisecond; the
// map lookups they replaced, and the filters now run after, took 10 to 25),
// and must not keep r. The lock is a read lock unless keys were added or
// removed since the last merge.
func (c *cache) readRange(prefix string, f func(r []entry, rv int64)) {
	c.mu.RLock()
	if c.order.current() {
		f(keyRange(c.order.entries, prefix), c.rv)
		c.mu.RUnlock()
		return
	}
	c.mu.RUnlock()
	c.mu.Lock()
	f(keyRange(c.orderedLocked(), prefix), c.rv)
	c.mu.Unlock()
}

// orderedLocked returns the state in key order. c.mu must be held for
// writing.
func (c *cache) orderedLocked() []entry {
	c.order.merge(c.items)
	return c.order.entries
}

// A paginated list whose first page the cache served goes on from a
// snapshot: the objects of its key range as the cache held them at the
// first page's revision. etcd would serve each later page at that revision
// too, but it counts every key left in the range to answer each page
// (remainingItemCount), so that a list of N objects in pages of P walked
// N²/2P keys: 100 000 leases in pages of 500, 10 million. A snapshot is a
// copy of the range's entries, keys and object pointers; the objects are
// the cache's own, shared and never modified.
//
// A snapshot lives while its pages are read: it goes with the last page,
// or listSnapshotIdle after the latest one read, and a cache keeps at most
// maxListSnapshots. A page whose snapshot is gone (expired, or the list
// began on another replica) is read from etcd at the token's revision, as
// before, and is the same page.
const (
	listSnapshotIdle = 10 * time.Second
	maxListSnapshots = 8
)

type snapshotKey struct {
	rv     int64
	prefix string // the list's key range: the kind's prefix, or a namespace's
}

type listSnapshot struct {
	entries []entry // in key order, at the revision; never modified
}

// listPaged serves the first page of a paginated list once the cache has
// reached minRV, and keeps a snapshot of the range for the other pages.
func (c *cache) listPaged(ctx context.Context, opts ListOptions, minRV int64) (*ListResult, error) {
	if err := c.waitFor(ctx, minRV); err != nil {
		return nil, err
	}
	key := snapshotKey{prefix: c.k.Prefix(opts.Namespace)}
	snap := &listSnapshot{}
	c.readRange(key.prefix, func(r []entry, rv int64) {
		snap.entries, key.rv = slices.Clone(r), rv
	})
	res := c.page(snap, 0, opts, key.rv)
	if res.Continue != "" {
		c.snapshots.keep(key, snap)
	}
	return res, nil
}

// continueList serves a later page of a paginated list from its snapshot;
// false when there is none.
func (c *cache) continueList(opts ListOptions, rv int64, start string) (*ListResult, bool) {
	key := snapshotKey{rv: rv, prefix: c.k.Prefix(opts.Namespace)}
	snap, ok := c.snapshots.read(key)
	if !ok {
		return nil, false
	}
	from, _ := slices.BinarySearchFunc(snap.entries, entry{key: start}, compareEntries)
	res := c.page(snap, from, opts, rv)
	if res.Continue == "" {
		// The last page: the list is done with it.
		c.snapshots.drop(key, snap)
	}
	return res, true
}

// page returns the objects of snap from index from on that opts.Filter
// keeps, at most opts.Limit, with the token of the next page as listEtcd
// writes it.
func (c *cache) page(snap *listSnapshot, from int, opts ListOptions, rv int64) *ListResult {
	res := &ListResult{ResourceVersion: rv}
	all := snap.entries
	for n := from; n < len(all); n++ {
		obj := all[n].obj
		if opts.Filter != nil && !opts.Filter(obj) {
			continue
		}
		res.Items = append(res.Items, obj)
		if int64(len(res.Items)) == opts.Limit && n < len(all)-1 {
			res.Continue = encodeContinue(rv, strings.TrimPrefix(all[n].key+"\x00", c.k.prefix))
			if opts.Filter == nil {
				remaining := int64(len(all) - n - 1)
				res.RemainingItemCount = &remaining
			}
			break
		}
	}
	return res
}

// watchContext is the context of the caches' etcd watches on stream.
// etcd's client sends the watches of equal metadata on one gRPC stream,
// which RequestProgress finds by the same metadata; a stream of another
// number is another gRPC stream, which the client opens on the member its
// balancer picks then.
func watchContext(ctx context.Context, stream int64) context.Context {
	ctx = clientv3.WithRequireLeader(ctx)
	if stream > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, "leasehold-watch-stream", strconv.FormatInt(stream, 10))
	}
	return ctx
}
