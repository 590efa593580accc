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
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/utils/clock"
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
	// WatchCacheSize is the number of recent events each kind keeps for
	// watches that resume from a revision; default 16384.
	WatchCacheSize int
	// MaxBatch is the most writes group commit puts in one etcd
	// transaction; default DefaultMaxBatch (100), which suits etcd's default
	// --max-txn-ops of 128. A larger value needs etcd's limit raised above
	// it (the embedded etcd's is, to 1024).
	MaxBatch int
	// CommitDelay is how long group commit holds a batch open for more
	// writes to share its etcd commit, counted from when its oldest write
	// was queued, once recent commits have carried more than one write
	// (until then a batch goes at once: see batcher); 0 (the default) sends
	// every batch as soon as the one before it is done. Every write is
	// still answered only once it is committed.
	CommitDelay time.Duration
	// BookmarkInterval is how often watchers that asked for bookmarks get
	// one; default 10 s.
	BookmarkInterval time.Duration
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
	if cfg.WatchCacheSize <= 0 {
		cfg.WatchCacheSize = 16384
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Store{cfg: cfg, client: cfg.Client, proto: protobuf.NewSerializer(cfg.Scheme, cfg.Scheme)}
	kv := cfg.KV
	if kv == nil {
		if cfg.Client.ActiveConnection() == nil {
			return nil, errors.New("store: an in-process etcd client needs Config.KV")
		}
		kv = clientv3.RetryKVClient(cfg.Client)
	}
	s.batch = newBatcher(kv, cfg.MaxBatch, cfg.CommitDelay, cfg.Clock)
	return s, nil
}

// Kind returns the storage of one resource, whose keys live under
// <Prefix>/<resource>/. gvk is the kind stored; newObj and newList make empty
// objects of it. Call before Run.
func (s *Store) Kind(resource string, gvk schema.GroupVersionKind, namespaced bool, newObj, newList func() runtime.Object) *Kind {
	k := &Kind{
		s:          s,
		resource:   resource,
		prefix:     s.cfg.Prefix + "/" + resource + "/",
		gvk:        gvk,
		apiVersion: gvk.GroupVersion().String(),
		namespaced: namespaced,
		newObj:     newObj,
		newList:    newList,
	}
	k.cache = newCache(k, s.cfg.WatchCacheSize, s.cfg.Clock, s.cfg.Logger.With("resource", resource))
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
		cacheInitializations.WithLabelValues(k.resource) // 0 until filled
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
	<-ctx.Done()
	if s.cfg.CompactionInterval > 0 {
		n++
	}
	for range n {
		<-done
	}
	return nil
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
		ctx, cancel := context.WithTimeout(watchContext(context.Background()), 5*time.Second)
		defer cancel()
		if err := s.client.RequestProgress(ctx); err != nil {
			s.cfg.Logger.Debug("requesting watch progress", "err", err)
		}
	}()
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

// compactLoop compacts, every interval, to the revision seen one interval
// earlier, so watches can always resume from anything in the last interval.
// Several servers sharing an etcd agree through a compare on a shared key,
// so each interval compacts once.
func (s *Store) compactLoop(ctx context.Context) {
	key := s.compactKey()
	t := s.cfg.Clock.NewTicker(s.cfg.CompactionInterval)
	defer t.Stop()
	var version, prevRev int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", version)).
			Then(clientv3.OpPut(key, strconv.FormatInt(prevRev, 10))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			s.cfg.Logger.Warn("compaction: recording revision failed", "err", err)
			continue
		}
		curRev := resp.Header.Revision
		if !resp.Succeeded {
			// Another server compacts this interval; follow its version.
			version = resp.Responses[0].GetResponseRange().Kvs[0].Version
			prevRev = curRev
			continue
		}
		version++
		if prevRev > 0 {
			if _, err := s.client.Compact(ctx, prevRev); err != nil {
				s.cfg.Logger.Warn("compaction failed", "revision", prevRev, "err", err)
			} else {
				s.cfg.Logger.Debug("compacted", "revision", prevRev)
			}
		}
		prevRev = curRev
	}
}

// compactKey is where the servers sharing an etcd record the revision the
// next compaction goes to.
func (s *Store) compactKey() string { return s.cfg.Prefix + "/compact_rev_key" }

// Compact compacts etcd up to rev now; tests use it to provoke 410 Gone.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	_, err := s.client.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return err
}

// resourceVersion parses a resourceVersion string; "" is 0.
func resourceVersion(obj runtime.Object) int64 {
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
