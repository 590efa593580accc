// Package store keeps API objects in etcd with Kubernetes' layout and
// semantics: one key per object under /registry/<resource>/[<namespace>/]<name>,
// the object's resourceVersion is the etcd mod revision of its key, every
// write is a compare-and-swap on that revision inside an etcd transaction, and
// watches resume from a revision until it is compacted.
//
// A Kind is the storage of one resource. Writes go to etcd; the watch cache
// (cache.go) follows each kind's key range with one etcd watch and serves
// watches, and lists that do not need a fresh quorum read, from memory, so
// many watchers cost one etcd watch. Until a cache has its first fill, the
// kind's reads go to etcd and its watches wait. Objects handed out by the
// cache are shared and must not be modified; callers deep-copy before
// changing them.
//
// Objects are stored as Kubernetes protobuf (the "k8s\x00" envelope), the
// encoding kube-apiserver uses, so the data is readable with the same tools.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/utils/clock"

	"github.com/leasehold/leasehold/internal/tick"
)

// Errors the store returns, checked with errors.Is. The API server maps them
// to metav1.Status.
var (
	// ErrNotFound: no object at the key (or at the requested revision).
	ErrNotFound = errors.New("not found")
	// ErrExists: create of a key that exists.
	ErrExists = errors.New("already exists")
	// ErrConflict: the object changed since the resourceVersion the caller
	// based its write on, or a precondition (uid) does not hold.
	ErrConflict = errors.New("conflict")
	// ErrCompacted: the requested revision has been compacted (410 Gone).
	ErrCompacted = errors.New("resource version compacted")
	// ErrTooLargeResourceVersion: the requested revision is newer than the
	// store has seen within the wait bound.
	ErrTooLargeResourceVersion = errors.New("too large resource version")
)

// TooLargeResourceVersionError is an ErrTooLargeResourceVersion that knows
// the revisions: the one asked for and the one the store had reached.
type TooLargeResourceVersionError struct{ Requested, Current int64 }

func (e *TooLargeResourceVersionError) Error() string {
	return fmt.Sprintf("too large resource version: %d, current: %d", e.Requested, e.Current)
}

// Is makes errors.Is(err, ErrTooLargeResourceVersion) hold.
func (e *TooLargeResourceVersionError) Is(target error) bool {
	return target == ErrTooLargeResourceVersion
}

func tooLargeResourceVersion(requested, current int64) error {
	return &TooLargeResourceVersionError{Requested: requested, Current: current}
}

// InvalidResourceVersionError is a list's or a watch's resourceVersion that
// is no revision at all.
type InvalidResourceVersionError struct {
	RV  string
	Err error // why, in strconv.ParseUint's words, as kube-apiserver gives them
}

func (e *InvalidResourceVersionError) Error() string {
	return fmt.Sprintf("invalid resourceVersion %q: %v", e.RV, e.Err)
}

// ParseResourceVersion reads a resourceVersion that is not "" or "0"; one
// that is no revision is an *InvalidResourceVersionError.
func ParseResourceVersion(rv string) (int64, error) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err == nil && n > math.MaxInt64 {
		err = fmt.Errorf("%d is beyond the largest revision, %d", n, int64(math.MaxInt64))
	}
	if err != nil {
		return 0, &InvalidResourceVersionError{RV: rv, Err: err}
	}
	return int64(n), nil
}

// Config configures a Store. Zero values mean defaults.
type Config struct {
	// Client reaches etcd (embedded or external). Required.
	Client *clientv3.Client
	// KV is etcd's KV API, which writes go to directly (group commit
	// builds etcd's request messages itself). Default: Client's connection,
	// with clientv3's retry policy. Required with an in-process client,
	// which has no connection (embedded.Etcd.KV).
	KV pb.KVClient
	// Prefix is the root of all keys; default "/registry".
	Prefix string
	// Scheme knows the stored types. Required.
	Scheme *runtime.Scheme
	// CompactionInterval is how often old revisions are compacted, keeping
	// one interval of history for watches to resume from; default 5 min,
	// negative disables compaction.
	CompactionInterval time.Duration
	// CompactionWrites bounds that history by the writes this server makes
	// as well: once it has made this many since the last compaction's mark,
	// the next compaction comes at once instead of at the end of the
	// interval. At a high write rate an interval holds millions of object
	// versions, each in etcd's index and database until the compaction an
	// interval later; so history holds at least one interval or this many
	// writes, whichever is less, and at most about twice that (times the
	// servers sharing the etcd). Default DefaultCompactionWrites; negative
	// bounds by time alone.
	CompactionWrites int64
	// CompactionCheck is how often the writes made are counted against
	// CompactionWrites; default 1 s.
	CompactionCheck time.Duration
	// WatchCacheSize is the most recent events each kind keeps for
	// watches that resume from a revision; default 16384. A kind keeps
	// fewer (down to 100) while that many would reach back further than
	// 75 s.
	WatchCacheSize int
	// MaxBatch is the most writes group commit puts in one etcd
	// transaction; default DefaultMaxBatch (100), which suits etcd's default
	// --max-txn-ops of 128. A larger value needs etcd's limit raised above
	// it (the embedded etcd's is, to 1024). At most MaxChangesPerRevision.
	MaxBatch int
	// CommitDelay is how long group commit holds a batch open for more
	// writes to share its etcd commit, counted from when its oldest write
	// was queued, once recent commits have carried more than one write
	// (until then a batch goes at once: see batcher); 0 (the default) sends
	// every batch as soon as the one before it is done. Every write is
	// still answered only once it is committed.
	CommitDelay time.Duration
	// CommitTimeout bounds a group commit: its writes are answered with a
	// timeout if etcd has not answered within it (the writes may still be
	// committed). A commit in flight for a tenth of it stops holding back
	// the batches after it. 0 (the default) waits as long as etcd takes,
	// which suits the embedded member, whose calls are in process.
	CommitTimeout time.Duration
	// BookmarkInterval is how often watchers that asked for bookmarks get
	// one; default 10 s.
	BookmarkInterval time.Duration
	// CountPollPeriod is how often apiserver_storage_objects counts the
	// objects of each kind without a watch cache in etcd, as
	// kube-apiserver's --etcd-count-metric-poll-period: default 1 minute,
	// negative never. A watch cache keeps its kind's count current.
	CountPollPeriod time.Duration
	// Clock measures and waits; default the real clock.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Store is the etcd-backed storage of all kinds.
type Store struct {
	cfg    Config
	client *clientv3.Client
	proto  *protobuf.Serializer
	kinds  []*Kind
	batch  *batcher

	progressInFlight atomic.Bool
	// stream is the caches' etcd watch stream (watchContext); moved is
	// closed when they move to another (moveWatches).
	streamMu sync.Mutex
	stream   int64
	moved    chan struct{}
	// compactStepped, when set (by tests), is called once compactLoop is
	// waiting for its timers, and after each wake with what made it turn
	// ("" when it did not).
	compactStepped func(trigger string)
	// countStepped, when set (by tests), is called after each count of
	// the objects, the ticker of the next already made.
	countStepped func()
}

// New validates cfg and returns a Store. Call Kind for each resource, then
// Run.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("store: Client is required")
	}
	if cfg.Scheme == nil {
		return nil, errors.New("store: Scheme is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/registry"
	}
	if cfg.CompactionInterval == 0 {
		cfg.CompactionInterval = 5 * time.Minute
	}
	if cfg.CompactionWrites == 0 {
		cfg.CompactionWrites = DefaultCompactionWrites
	}
	if cfg.CompactionCheck <= 0 {
		cfg.CompactionCheck = time.Second
	}
	if cfg.WatchCacheSize <= 0 {
		cfg.WatchCacheSize = 16384
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	cfg.MaxBatch = min(cfg.MaxBatch, MaxChangesPerRevision)
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = 10 * time.Second
	}
	if cfg.CountPollPeriod == 0 {
		cfg.CountPollPeriod = time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg, client: cfg.Client, proto: protobuf.NewSerializer(cfg.Scheme, cfg.Scheme), moved: make(chan struct{})}
	kv := cfg.KV
	if kv == nil {
		if cfg.Client.ActiveConnection() == nil {
			return nil, errors.New("store: an in-process etcd client needs Config.KV")
		}
		kv = clientv3.RetryKVClient(cfg.Client)
	}
	s.batch = newBatcher(kv, cfg.MaxBatch, cfg.CommitDelay, cfg.CommitTimeout, cfg.Clock)
	return s, nil
}

// Kind returns the storage of one resource, whose keys live under
// <Prefix>/<prefix>/ (Kubernetes' layout: "leases" for leases, "minions"
// for nodes). gvk is the kind stored; newObj and newList make empty objects
// of it. The metrics and logs name the resource as kube-apiserver's do, by
// group and resource. Call before Run.
func (s *Store) Kind(resource schema.GroupResource, prefix string, gvk schema.GroupVersionKind, namespaced bool, newObj, newList func() runtime.Object) *Kind {
	k := &Kind{
		s:          s,
		resource:   resource,
		prefix:     s.cfg.Prefix + "/" + prefix + "/",
		gvk:        gvk,
		apiVersion: gvk.GroupVersion().String(),
		rests:      newListState[restKey, *etcdRest](s.cfg.Clock),
		namespaced: namespaced,
		newObj:     newObj,
		newList:    newList,
	}
	k.cache = newCache(k, s.cfg.WatchCacheSize, s.cfg.Clock, s.cfg.Logger.With("resource", resource.String()))
	s.kinds = append(s.kinds, k)
	return k
}

// Run starts the watch caches and the compactor and blocks until ctx ends.
func (s *Store) Run(ctx context.Context) error {
	done := make(chan struct{})
	n := 1 // the batcher
	for _, k := range s.kinds {
		if k.cache == nil {
			continue
		}
		n++
		cacheInitializations.WithLabelValues(k.resource.Group, k.resource.Resource) // 0 until filled
		// Here, so that a kind whose cache was disabled has no series.
		k.cache.capacity = cacheCapacity.WithLabelValues(k.resource.Group, k.resource.Resource)
		k.cache.capacity.Set(float64(len(k.cache.ring)))
		k.cache.objects = objectCountsOf(k.resource)
		go func() {
			k.cache.run(ctx, s.cfg.BookmarkInterval)
			done <- struct{}{}
		}()
	}
	if s.cfg.CompactionInterval > 0 {
		go func() {
			s.compactLoop(ctx)
			done <- struct{}{}
		}()
	}
	go func() {
		s.batch.run(ctx)
		done <- struct{}{}
	}()
	n++
	go func() {
		s.expireListState(ctx)
		done <- struct{}{}
	}()
	if s.cfg.CountPollPeriod > 0 && slices.ContainsFunc(s.kinds, func(k *Kind) bool { return k.cache == nil }) {
		n++
		go func() {
			s.countLoop(ctx)
			done <- struct{}{}
		}()
	}
	<-ctx.Done()
	if s.cfg.CompactionInterval > 0 {
		n++
	}
	for range n {
		<-done
	}
	return nil
}

// expireListState drops, every listSnapshotIdle, what paginated lists
// left behind when their clients stopped reading them: the watch caches'
// snapshots and the keys read from etcd ahead of a page.
func (s *Store) expireListState(ctx context.Context) {
	tick.Every(ctx, s.cfg.Clock, listSnapshotIdle, func() {
		for _, k := range s.kinds {
			k.rests.expire()
			if k.cache != nil {
				k.cache.snapshots.expire()
			}
		}
	})
}

// countLoop sets apiserver_storage_objects for the kinds served from etcd
// alone at once and then every CountPollPeriod, as kube-apiserver counts
// every kind; a watch cache keeps its kind's current.
func (s *Store) countLoop(ctx context.Context) {
	t := s.cfg.Clock.NewTicker(s.cfg.CountPollPeriod)
	defer t.Stop()
	for {
		for _, k := range s.kinds {
			if k.cache == nil {
				k.countObjects(ctx)
			}
		}
		if s.countStepped != nil {
			s.countStepped()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// countObjects sets apiserver_storage_objects of a kind without a watch
// cache to a count of its keys in etcd.
func (k *Kind) countObjects(ctx context.Context) {
	resp, err := k.s.client.Get(ctx, k.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		if ctx.Err() == nil {
			k.s.cfg.Logger.Warn("counting stored objects", "resource", k.resource.String(), "err", err)
		}
		return
	}
	objectCountsOf(k.resource).Set(float64(resp.Count))
}

// WaitReady blocks until every kind's watch cache has its initial state.
func (s *Store) WaitReady(ctx context.Context) error {
	for _, k := range s.kinds {
		if err := k.WaitFilled(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Check reports whether etcd answers. The caches need not be filled: a
// kind whose cache is still filling is read from etcd.
func (s *Store) Check(ctx context.Context) error {
	_, err := s.CurrentRevision(ctx)
	return err
}

// requestProgress asks etcd to tell every cache's watch the current
// revision. Requests made while one is in flight are merged into it.
func (s *Store) requestProgress() {
	if !s.progressInFlight.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.progressInFlight.Store(false)
		stream, _ := s.watchStream()
		ctx, cancel := context.WithTimeout(watchContext(context.Background(), stream), 5*time.Second)
		defer cancel()
		if err := s.client.RequestProgress(ctx); err != nil {
			s.cfg.Logger.Debug("requesting watch progress", "err", err)
		}
	}()
}

// watchStream returns the caches' etcd watch stream, and a channel closed
// when they move to another.
func (s *Store) watchStream() (stream int64, moved <-chan struct{}) {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	return s.stream, s.moved
}

// moveWatches moves every cache's etcd watch to a new stream, unless they
// have moved from stream already, and reports whether it moved them.
func (s *Store) moveWatches(stream int64) bool {
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.stream != stream {
		return false
	}
	s.stream++
	close(s.moved)
	s.moved = make(chan struct{})
	return true
}

// CurrentRevision reads etcd's current revision with a linearizable read.
// Any read's header carries the revision of the whole store, so it reads one
// key: a count over a range would visit every key in it (etcd counts a range
// in full even with a limit), which at 100 000 nodes cost a tenth of a second
// of CPU on every consistent list and watch.
func (s *Store) CurrentRevision(ctx context.Context) (int64, error) {
	resp, err := s.client.Get(ctx, s.compactKey(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// DefaultCompactionWrites is Config.CompactionWrites' default: what
// 100 000 nodes renewing every 10 s write in 20 s. Below 667 writes a second
// it is more than five minutes' worth, and compactions come every
// CompactionInterval, as kube-apiserver's do.
const DefaultCompactionWrites = 200_000

// compactLoop compacts to the revision it marked at its previous turn, so
// watches can always resume from anything since that mark. A turn comes
// every CompactionInterval, or as soon as this server has made
// CompactionWrites writes since the mark, after which the interval starts
// again. Several servers sharing an etcd agree through a compare on a
// shared key, so each turn compacts once.
func (s *Store) compactLoop(ctx context.Context) {
	interval := s.cfg.Clock.NewTimer(s.cfg.CompactionInterval)
	defer interval.Stop()
	var check <-chan time.Time
	if s.cfg.CompactionWrites > 0 {
		t := s.cfg.Clock.NewTicker(s.cfg.CompactionCheck)
		defer t.Stop()
		check = t.C()
	}
	c := compactor{s: s}
	if s.compactStepped != nil {
		s.compactStepped("")
	}
	for {
		trigger := ""
		select {
		case <-ctx.Done():
			return
		case <-interval.C():
			trigger = "interval"
		case <-check:
			if s.batch.written.Load()-c.markWrites >= s.cfg.CompactionWrites {
				trigger = "writes"
			}
		}
		if trigger != "" {
			// The interval starts again from this turn, with no tick of the
			// old one left in the channel.
			if !interval.Stop() {
				select {
				case <-interval.C():
				default:
				}
			}
			interval.Reset(s.cfg.CompactionInterval)
			c.turn(ctx, trigger)
		}
		if s.compactStepped != nil {
			s.compactStepped(trigger)
		}
	}
}

// compactor is compactLoop's state.
type compactor struct {
	s *Store
	// version is the shared key's as this server last saw it; prevRev the
	// mark, where the next compaction goes; markWrites the server's count
	// of writes when the mark was made or followed.
	version, prevRev, markWrites int64
}

// turn compacts to the mark and marks the current revision, unless another
// server sharing the etcd has turned since this one last did: then it
// follows that turn.
func (c *compactor) turn(ctx context.Context, trigger string) {
	s, key := c.s, c.s.compactKey()
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", c.version)).
		Then(clientv3.OpPut(key, strconv.FormatInt(c.prevRev, 10))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		s.cfg.Logger.Warn("compaction: recording revision failed", "err", err)
		return
	}
	curRev := resp.Header.Revision
	c.markWrites = s.batch.written.Load()
	if !resp.Succeeded {
		// Another server compacted at this turn; follow its version.
		c.version = resp.Responses[0].GetResponseRange().Kvs[0].Version
		c.prevRev = curRev
		return
	}
	c.version++
	if c.prevRev > 0 {
		if _, err := s.client.Compact(ctx, c.prevRev); err != nil {
			s.cfg.Logger.Warn("compaction failed", "revision", c.prevRev, "err", err)
		} else {
			compactions.WithLabelValues(trigger).Inc()
			s.cfg.Logger.Debug("compacted", "revision", c.prevRev, "trigger", trigger)
		}
	}
	c.prevRev = curRev
}

// compactKey is where the servers sharing an etcd record the revision the
// next compaction goes to.
func (s *Store) compactKey() string { return s.cfg.Prefix + "/compact_rev_key" }

// Compact compacts etcd now up to the revision of resourceVersion rv; tests
// use it to provoke 410 Gone.
func (s *Store) Compact(ctx context.Context, rv int64) error {
	_, err := s.client.Compact(ctx, revisionOf(rv), clientv3.WithCompactPhysical())
	return err
}

// ResourceVersion is obj's resourceVersion as a number (see rv.go); 0 for
// none.
func ResourceVersion(obj runtime.Object) int64 {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return rv
}

func setResourceVersion(obj runtime.Object, rv int64) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatInt(rv, 10))
	}
}
