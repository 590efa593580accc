package store

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is the storage of one resource.
type Kind struct {
	s          *Store
	resource   schema.GroupResource
	prefix     string // <root>/<prefix>/
	gvk        schema.GroupVersionKind
	apiVersion string // gvk's
	namespaced bool
	newObj     func() runtime.Object
	newList    func() runtime.Object
	cache      *cache     // nil: served from etcd alone (DisableWatchCache)
	ttl        *ttlLeases // nil: objects live until deleted
	metrics    kindMetrics

	rests *listState[restKey, *etcdRest] // keys read from etcd ahead of the pages of lists
}

// Key is the etcd key of an object.
func (k *Kind) Key(namespace, name string) string {
	if k.namespaced {
		return k.prefix + namespace + "/" + name
	}
	return k.prefix + name
}

// Prefix is the key prefix of all objects of the kind in namespace, or of
// all objects when namespace is "".
func (k *Kind) Prefix(namespace string) string {
	if k.namespaced && namespace != "" {
		return k.prefix + namespace + "/"
	}
	return k.prefix
}

func (k *Kind) encode(obj runtime.Object) (*encodedValue, error) {
	// The stored copy carries no resourceVersion: etcd's revision is the
	// truth, set again on every read.
	rv := ResourceVersion(obj)
	clearResourceVersion(obj)
	// Stored objects carry the kind's own apiVersion and kind, as
	// decodeInPlace expects: set as the kind's own strings where the
	// object has a TypeMeta, not built anew by SetGroupVersionKind.
	v := new(encodedValue)
	var err error
	if tm, ok := obj.GetObjectKind().(*metav1.TypeMeta); ok {
		was := *tm
		tm.APIVersion, tm.Kind = k.apiVersion, k.gvk.Kind
		err = k.s.proto.EncodeWithAllocator(obj, v, v)
		*tm = was
	} else {
		kind := obj.GetObjectKind()
		gvk := kind.GroupVersionKind()
		kind.SetGroupVersionKind(k.gvk)
		err = k.s.proto.EncodeWithAllocator(obj, v, v)
		kind.SetGroupVersionKind(gvk)
	}
	if rv != 0 {
		setResourceVersion(obj, rv)
	}
	if err != nil {
		v.release()
		return nil, err
	}
	return v, nil
}

// encodedValue is both the allocator the protobuf serializer marshals an
// object into and the writer it then writes the result to. The serializer
// sizes the object, marshals it into one buffer from its allocator, and
// writes that buffer once: the value is then that buffer, where a
// bytes.Buffer would have allocated a second one and copied it.
//
// The buffer comes from valueBuffers when the object is small enough, and
// goes back with release once etcd has the value: a renewal's value was 2 %
// of the bytes a renewal allocated.
type encodedValue struct {
	buf    []byte  // the last buffer handed out by Allocate
	pooled *[]byte // the buffer from valueBuffers, when one was taken
	n      int     // how much of buf was written, when it was written whole
	copied []byte  // what was written, when it was anything else
}

// valueBuffers recycles the buffers of encoded objects of up to
// maxPooledValue bytes. A value is free again once the write carrying it
// has its answer from the batcher: etcd (in process or over gRPC) has
// marshalled its request by then, and nothing else keeps the value.
var valueBuffers sync.Pool // of *[]byte

const (
	maxPooledValue = 16 << 10
	// minPooledValue is the capacity a pooled buffer gets at least, so that
	// one buffer serves most objects: a node Lease is about 450 bytes, a
	// Node about 1.3 KB.
	minPooledValue = 2 << 10
)

// Allocate implements runtime.MemoryAllocator. A buffer kept by Write is
// copied before the next one is handed out, should a serializer allocate
// again.
func (v *encodedValue) Allocate(size uint64) []byte {
	if v.n > 0 && v.copied == nil {
		v.copied = append([]byte(nil), v.buf[:v.n]...)
	}
	if size <= maxPooledValue && v.pooled == nil {
		p, _ := valueBuffers.Get().(*[]byte)
		if p == nil || uint64(cap(*p)) < size {
			b := make([]byte, max(size, minPooledValue))
			p = &b
		}
		v.pooled = p
		v.buf = (*p)[:size]
		return v.buf
	}
	v.buf = make([]byte, size)
	return v.buf
}

// Write keeps p without copying it when p is the start of buf, written
// first; anything else is copied.
func (v *encodedValue) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if v.n == 0 && v.copied == nil && len(p) <= len(v.buf) && &p[0] == &v.buf[0] {
		v.n = len(p)
		return len(p), nil
	}
	if v.copied == nil {
		v.copied = append([]byte(nil), v.buf[:v.n]...)
	}
	v.copied = append(v.copied, p...)
	return len(p), nil
}

// bytes returns the encoded object, valid until release.
func (v *encodedValue) bytes() []byte {
	if v.copied != nil {
		return v.copied
	}
	return v.buf[:v.n:v.n]
}

// release returns the buffer to valueBuffers, zeroed: whatever still read
// the value after it would read zeros, not another object's bytes, and fail
// at once rather than now and then. A nil value releases nothing.
func (v *encodedValue) release() {
	if v == nil || v.pooled == nil {
		return
	}
	clear((*v.pooled)[:cap(*v.pooled)])
	valueBuffers.Put(v.pooled)
	v.pooled, v.buf = nil, nil
}

// decode decodes a stored object read from etcd, at the resourceVersion of
// its revision and the place stored with it (rv.go).
func (k *Kind) decode(kv *mvccpb.KeyValue) (runtime.Object, error) {
	return k.decodeAt(kv, changeRV(kv.ModRevision, storedPlace(kv.Value)))
}

// decodeAt decodes a stored object whose resourceVersion is rv.
func (k *Kind) decodeAt(kv *mvccpb.KeyValue, rv int64) (runtime.Object, error) {
	out, ok, err := k.decodeInPlace(kv.Value)
	if !ok {
		out, _, err = k.s.proto.Decode(kv.Value, nil, k.newObj())
	}
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", kv.Key, err)
	}
	setResourceVersion(out, rv)
	return out, nil
}

// Get reads the object at key with a quorum read.
func (k *Kind) Get(ctx context.Context, key string) (runtime.Object, error) {
	return k.getEtcd(ctx, key, 0)
}

// getEtcd reads the object at key with a quorum read, refusing it when
// etcd has not reached minRV.
func (k *Kind) getEtcd(ctx context.Context, key string, minRV int64) (runtime.Object, error) {
	start := k.s.cfg.Clock.Now()
	resp, err := k.s.client.Get(ctx, key)
	k.observe(opGet, start)
	if err != nil {
		return nil, err
	}
	if cur := revisionRV(resp.Header.Revision); cur < minRV {
		return nil, tooLargeResourceVersion(minRV, cur)
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrNotFound
	}
	return k.decode(resp.Kvs[0])
}

// Cached returns the object as the watch cache has it (possibly a little
// behind etcd), or ErrNotFound. Callers must not modify it. A kind without
// a watch cache, or whose cache is still filling, reads etcd.
func (k *Kind) Cached(ctx context.Context, key string) (runtime.Object, error) {
	if c := k.filledCache(); c != nil {
		return c.get(key)
	}
	return k.Get(ctx, key)
}

// GetNotOlderThan reads the object at key as of a revision no older than
// minRV, as kube-apiserver answers a get that names a resourceVersion: from
// the watch cache once it has reached minRV, after waiting up to
// waitTimeout for it, or else ErrTooLargeResourceVersion; a kind without a
// watch cache, or whose cache is still filling, reads etcd, and a revision
// etcd has not reached is refused at once, as kube-apiserver's storage
// layer does.
func (k *Kind) GetNotOlderThan(ctx context.Context, key string, minRV int64) (runtime.Object, error) {
	if c := k.filledCache(); c != nil {
		if err := c.waitFor(ctx, minRV); err != nil {
			return nil, err
		}
		return c.get(key)
	}
	return k.getEtcd(ctx, key, minRV)
}

// filledCache returns the kind's watch cache once it holds the kind's
// state, or nil: reads of a kind whose cache is still filling go to etcd,
// as kube-apiserver delegates reads while a watch cache initializes, so the
// server answers them from the moment etcd does.
func (k *Kind) filledCache() *cache {
	if c := k.cache; c != nil && c.isFilled() {
		return c
	}
	return nil
}

// WaitFilled blocks until the kind's watch cache holds its state (at once
// for a kind without one). Readers that keep what the cache hands out, as
// the server's own informers do, wait for it rather than read etcd.
func (k *Kind) WaitFilled(ctx context.Context) error {
	if k.cache == nil {
		return nil
	}
	select {
	case <-k.cache.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ShareStrings has the watch cache point the strings f names at copies
// shared by all the objects it holds (see sharer). Call it before Run.
func (k *Kind) ShareStrings(f StringSharing) {
	if k.cache != nil {
		k.cache.share.kind = f
	}
}

// SetSameView gives the watch cache a way to tell that a change leaves an
// object as every watch's Filter sees it: same(old, new) must be true only
// when no Filter can match one and not the other (equal labels and
// selectable fields, say). The cache's ring of recent events then keeps
// only the new version of such a change. Call it before Run.
func (k *Kind) SetSameView(same func(old, new runtime.Object) bool) {
	if k.cache != nil {
		k.cache.sameView = same
	}
}

// WatchCacheEnabled reports whether the kind is served from a watch cache,
// whose objects its readers share.
func (k *Kind) WatchCacheEnabled() bool { return k.cache != nil }

// CutOff tells since when the kind's watch cache has not followed etcd:
// a list or watch of etcd failed then, and none has been made since, as
// while etcd has no leader; or its watch has not delivered, for
// watchStall, a write of the kind that etcd acknowledged to this server,
// as while the member holding the watch is frozen. The earlier of the two
// when both hold. Zero while the cache follows etcd, and for a kind
// without one. A watch whose members cannot be reached at all does not
// fail, and no write is acknowledged meanwhile: CutOff stays zero.
func (k *Kind) CutOff() time.Time {
	if k.cache == nil {
		return time.Time{}
	}
	var since int64
	for _, ns := range []int64{k.cache.cutOff.Load(), k.cache.stalled.Load()} {
		if ns != 0 && (since == 0 || ns < since) {
			since = ns
		}
	}
	if since == 0 {
		return time.Time{}
	}
	return time.Unix(0, since)
}

// cacheHasOwnWrites reports whether the kind's watch cache has seen every
// write of the kind that etcd acknowledged to this server: a guess taken
// from it then misses only writes made elsewhere (another server, or
// etcd's own clients) within the watch's delay.
func (k *Kind) cacheHasOwnWrites() bool {
	c := k.filledCache()
	if c == nil {
		return false
	}
	c.mu.RLock()
	rv := c.rv
	c.mu.RUnlock()
	return rv >= c.acked.Load()
}

// wrote notes that etcd acknowledged a write of the kind at resourceVersion
// rev, which the kind's watch cache must then see (watchStalls).
func (k *Kind) wrote(rev int64) {
	if k.cache == nil {
		return
	}
	for {
		acked := k.cache.acked.Load()
		if rev <= acked || k.cache.acked.CompareAndSwap(acked, rev) {
			return
		}
	}
}

// DisableWatchCache serves the kind from etcd alone, as kube-apiserver
// serves Events by default: lists read etcd, watches are etcd watches of
// their own, and nothing of the kind is held in memory or read at start.
// Call it before Run.
func (k *Kind) DisableWatchCache() {
	k.cache = nil
}

// Create stores obj at key if the key does not exist and returns it with its
// resourceVersion set. With dryRun nothing is written.
func (k *Kind) Create(ctx context.Context, key string, obj runtime.Object, dryRun bool) (runtime.Object, error) {
	value, err := k.encode(obj)
	if err != nil {
		return nil, err
	}
	if dryRun {
		value.release()
		if _, err := k.Get(ctx, key); err == nil {
			return nil, ErrExists
		} else if err != ErrNotFound {
			return nil, err
		}
		return obj, nil
	}
	lease, err := k.leaseFor(ctx)
	if err != nil {
		value.release()
		return nil, err
	}
	start := k.s.cfg.Clock.Now()
	res := k.s.batch.do(ctx, write{key: key, kind: k.prefix, created: true, value: value.bytes(), lease: lease})
	k.observe(opCreate, start)
	res.release(value)
	if res.err != nil {
		k.failed(res.err)
		return nil, mapEtcdError(res.err)
	}
	if !res.succeeded {
		return nil, ErrExists
	}
	rv := changeRV(res.rev, res.place)
	k.wrote(rv)
	setResourceVersion(obj, rv)
	return obj, nil
}

// UpdateFunc computes the new object from the current one (nil when the key
// does not exist and creation is allowed). It must not modify current. It
// returns ErrConflict when the caller's precondition does not hold.
type UpdateFunc func(current runtime.Object) (runtime.Object, error)

// UpdateOptions tune Update.
type UpdateOptions struct {
	// Guess is a recent copy of the current object (for example from the
	// watch cache) that spares a read; if it turns out stale, Update reads
	// etcd and tries again, as it does before it answers that an update
	// changes nothing.
	Guess runtime.Object
	// AllowCreate passes nil to the UpdateFunc when the key does not exist
	// and creates the object.
	AllowCreate bool
	// DryRun computes and returns the result without writing.
	DryRun bool
	// Changed, when set, is asked after each call of the UpdateFunc. True
	// promises that the object it returned differs from the current one,
	// so Update writes it without encoding the current object to compare
	// the two (the check that makes an update that changes nothing write
	// nothing). A renewal knows what it changed.
	Changed func() bool
	// Delete, when set, is asked about each object the UpdateFunc returns
	// for one that exists: true deletes the object instead, on the same
	// compare of its revision, and Update returns the object the
	// UpdateFunc returned. An update that removes the last finalizer of an
	// object being deleted deletes it so, as kube-apiserver does, and the
	// object is never stored being deleted with no finalizer left.
	Delete func(updated, current runtime.Object) bool
	// Defer, when set, is asked about each object the UpdateFunc returns
	// for one that exists: a non-nil answer is what Update returns
	// instead of writing, and nothing is stored. The caller vouches that
	// the answer may stand for a write that did not happen (a lease
	// renewal between checkpoints, say). Its current is etcd's object or
	// a guess from a watch cache that has seen every write of the kind
	// this server made: with any other guess, Update reads etcd and starts
	// over, asking again.
	Defer func(updated, current runtime.Object) runtime.Object
}

// Update applies fn to the current object and writes the result with a
// compare on the current revision, retrying with fresh state when another
// writer got there first. fn is called again on each retry, so a
// precondition it checks is always checked against the state written over.
// An update that changes nothing writes nothing and returns current.
func (k *Kind) Update(ctx context.Context, key string, opts UpdateOptions, fn UpdateFunc) (runtime.Object, error) {
	current, fresh := opts.Guess, false
	if current == nil {
		var err error
		current, err = k.Get(ctx, key)
		if err == ErrNotFound {
			current = nil
		} else if err != nil {
			return nil, err
		}
		fresh = true
	}
	// origData is current as stored, encoded to tell whether an update
	// changes anything; released when current is replaced or Update
	// returns.
	var origData *encodedValue
	defer func() { origData.release() }()
	// again reads the object there now to start over from.
	again := func() (err error) {
		current, err = k.refresh(ctx, key)
		origData.release()
		origData, fresh = nil, true
		return err
	}
	for {
		if current == nil && !opts.AllowCreate {
			return nil, ErrNotFound
		}
		updated, err := fn(current)
		if err != nil {
			if !fresh {
				if err := again(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if current != nil && opts.Delete != nil && opts.Delete(updated, current) {
			if opts.DryRun {
				return updated, nil
			}
			deleted, err := k.deleteAt(ctx, key, revisionOf(ResourceVersion(current)))
			if err != nil {
				return nil, err
			}
			if deleted {
				return updated, nil
			}
			if err := again(); err != nil {
				return nil, err
			}
			continue
		}
		if current != nil && opts.Defer != nil {
			if answer := opts.Defer(updated, current); answer != nil {
				if fresh || k.cacheHasOwnWrites() {
					return answer, nil
				}
				// The guess may be a version this server has replaced:
				// ask again of what etcd holds.
				if err := again(); err != nil {
					return nil, err
				}
				continue
			}
		}
		value, err := k.encode(updated)
		if err != nil {
			return nil, err
		}
		w := write{key: key, kind: k.prefix, value: value.bytes()}
		if current == nil {
			w.created = true
		} else {
			if origData == nil && (opts.Changed == nil || !opts.Changed()) {
				// encode sets the copy's resourceVersion and kind, not
				// current's, which the watch cache shares.
				if origData, err = k.encode(ShallowCopy(current)); err != nil {
					value.release()
					return nil, err
				}
			}
			if origData != nil && bytes.Equal(origData.bytes(), w.value) {
				value.release()
				if !fresh {
					// What changes nothing of a guess, which may be
					// stale, may change what is there now: ask again
					// of that, as kube-apiserver's storage does.
					if err := again(); err != nil {
						return nil, err
					}
					continue
				}
				return current, nil
			}
			w.rev = revisionOf(ResourceVersion(current))
		}
		if opts.DryRun {
			value.release()
			return updated, nil
		}
		if w.lease, err = k.leaseFor(ctx); err != nil {
			value.release()
			return nil, err
		}
		start := k.s.cfg.Clock.Now()
		res := k.s.batch.do(ctx, w)
		k.observe(opUpdate, start)
		res.release(value)
		if res.err != nil {
			k.failed(res.err)
			return nil, mapEtcdError(res.err)
		}
		if res.succeeded {
			rv := changeRV(res.rev, res.place)
			k.wrote(rv)
			setResourceVersion(updated, rv)
			return updated, nil
		}
		// Someone else wrote first: start again from what is there now.
		if err := again(); err != nil {
			return nil, err
		}
	}
}

func (k *Kind) refresh(ctx context.Context, key string) (runtime.Object, error) {
	cur, err := k.Get(ctx, key)
	if err == ErrNotFound {
		return nil, nil
	}
	return cur, err
}

// DeleteFunc checks preconditions on the current object before delete.
type DeleteFunc func(current runtime.Object) error

// Delete removes the object at key if check passes on its current state,
// retrying when it changes in between. It returns the object as it was.
func (k *Kind) Delete(ctx context.Context, key string, dryRun bool, check DeleteFunc) (runtime.Object, error) {
	current, err := k.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	for {
		if check != nil {
			if err := check(current); err != nil {
				return nil, err
			}
		}
		if dryRun {
			return current, nil
		}
		deleted, err := k.deleteAt(ctx, key, revisionOf(ResourceVersion(current)))
		if err != nil {
			return nil, err
		}
		if deleted {
			return current, nil
		}
		// Changed or deleted since: check again what is there now.
		if current, err = k.Get(ctx, key); err != nil {
			return nil, err
		}
	}
}

// deleteAt deletes key if its revision is still rev, and tells whether it
// was.
func (k *Kind) deleteAt(ctx context.Context, key string, rev int64) (bool, error) {
	start := k.s.cfg.Clock.Now()
	res := k.s.batch.do(ctx, write{key: key, kind: k.prefix, rev: rev, del: true})
	k.observe(opDelete, start)
	if res.err != nil {
		return false, mapEtcdError(res.err)
	}
	if res.succeeded {
		k.wrote(changeRV(res.rev, res.place))
	}
	return res.succeeded, nil
}

func mapEtcdError(err error) error {
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "required revision has been compacted") {
		return fmt.Errorf("%w: %v", ErrCompacted, err)
	}
	if strings.Contains(err.Error(), "required revision is a future revision") {
		return fmt.Errorf("%w: %v", ErrTooLargeResourceVersion, err)
	}
	return err
}
