package store_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
	"github.com/leasehold/leasehold/internal/store/embedded"
)

func newStore(t testing.TB) (*store.Store, *store.Kind) {
	t.Helper()
	s, k, _ := newStoreWith(t, store.Config{}, nil)
	return s, k
}

// newStoreOverGRPC is newStore with etcd reached over gRPC, as an external
// cluster is: the store's writes go through the client's connection.
func newStoreOverGRPC(t testing.TB) (*store.Store, *store.Kind) {
	t.Helper()
	e := startEtcd(t)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, k, stop := runStore(t, store.Config{Client: c}, nil)
	t.Cleanup(stop)
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, k
}

// forEachClient runs test on a store whose etcd is in process, and on one
// whose etcd is reached over gRPC.
func forEachClient(t *testing.T, test func(t *testing.T, k *store.Kind)) {
	for _, c := range []struct {
		name     string
		newStore func(testing.TB) (*store.Store, *store.Kind)
	}{{"in-process", newStore}, {"grpc", newStoreOverGRPC}} {
		t.Run(c.name, func(t *testing.T) {
			_, k := c.newStore(t)
			test(t, k)
		})
	}
}

func startEtcd(t testing.TB) *embedded.Etcd {
	t.Helper()
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// newStoreWith starts a store of leases on a fresh embedded etcd with cfg
// (its Client, KV, Scheme and CompactionInterval set here), calling setup
// on the kind before the store runs; it returns the etcd member too.
func newStoreWith(t testing.TB, cfg store.Config, setup func(*store.Kind)) (*store.Store, *store.Kind, *embedded.Etcd) {
	t.Helper()
	e := startEtcd(t)
	cfg.Client, cfg.KV = e.Client(), e.KV()
	s, k, stop := runStore(t, cfg, setup)
	t.Cleanup(stop)
	if err := s.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, k, e
}

// runStore runs a store of leases on cfg.Client (its Scheme and
// CompactionInterval set here), calling setup on the kind before the store
// runs, without waiting for its cache; stop ends it.
func runStore(t testing.TB, cfg store.Config, setup func(*store.Kind)) (s *store.Store, k *store.Kind, stop func()) {
	t.Helper()
	cfg.Scheme, cfg.CompactionInterval = registry.Scheme, -1
	s, err := store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k = s.Kind(coordinationv1.Resource("leases"), "leases", coordinationv1.SchemeGroupVersion.WithKind("Lease"), true,
		func() runtime.Object { return &coordinationv1.Lease{} }, func() runtime.Object { return &coordinationv1.LeaseList{} })
	if setup != nil {
		setup(k)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	return s, k, func() { cancel(); <-done }
}

func lease(ns, name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
}

func TestCreateUpdateDeleteWatch(t *testing.T) { forEachClient(t, testCreateUpdateDeleteWatch) }

func testCreateUpdateDeleteWatch(t *testing.T, k *store.Kind) {
	ctx := context.Background()
	w, err := k.Watch(ctx, store.WatchOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	key := k.Key("default", "a")
	created, err := k.Create(ctx, key, lease("default", "a", "x"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Create(ctx, key, lease("default", "a", "x"), false); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: got %v, want ErrExists", err)
	}
	rv := created.(*coordinationv1.Lease).ResourceVersion
	update := func(want string) store.UpdateFunc {
		return func(cur runtime.Object) (runtime.Object, error) {
			l := cur.(*coordinationv1.Lease).DeepCopy()
			if want != "" && l.ResourceVersion != want {
				return nil, store.ErrConflict
			}
			l.Spec.HolderIdentity = ptr.To("y")
			return l, nil
		}
	}
	updated, err := k.Update(ctx, key, store.UpdateOptions{}, update(rv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Update(ctx, key, store.UpdateOptions{}, update(rv)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: got %v, want ErrConflict", err)
	}
	// A stale guess is detected and retried against etcd.
	if _, err := k.Update(ctx, key, store.UpdateOptions{Guess: created}, update("")); err != nil {
		t.Fatalf("update from stale guess: %v", err)
	}
	if _, err := k.Delete(ctx, key, false, nil); err != nil {
		t.Fatal(err)
	}
	var got []watch.EventType
	for len(got) < 3 {
		select {
		case e := <-w.Events:
			got = append(got, e.Type)
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %v", got)
		}
	}
	// The update from the stale guess changed nothing once retried, so it
	// wrote nothing.
	if got[0] != watch.Added || got[1] != watch.Modified || got[2] != watch.Deleted {
		t.Fatalf("events %v", got)
	}
	_ = updated
}

func TestListPaginationAndResume(t *testing.T) {
	s, k := newStore(t)
	ctx := context.Background()
	var firstRV string
	for i, n := range []string{"a", "b", "c", "d", "e"} {
		obj, err := k.Create(ctx, k.Key("ns", n), lease("ns", n, "h"), false)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			firstRV = obj.(*coordinationv1.Lease).ResourceVersion
		}
	}
	page, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || page.Continue == "" || page.RemainingItemCount == nil || *page.RemainingItemCount != 3 {
		t.Fatalf("first page: %d items, continue %q, remaining %v", len(page.Items), page.Continue, page.RemainingItemCount)
	}
	var names []string
	for {
		for _, it := range page.Items {
			names = append(names, it.(*coordinationv1.Lease).Name)
		}
		if page.Continue == "" {
			break
		}
		if page, err = k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: page.Continue}); err != nil {
			t.Fatal(err)
		}
	}
	if len(names) != 5 || names[0] != "a" || names[4] != "e" {
		t.Fatalf("names %v", names)
	}
	all, err := k.List(ctx, store.ListOptions{})
	if err != nil || len(all.Items) != 5 {
		t.Fatalf("consistent list: %v, %v", all, err)
	}
	// Resume a watch from the first write: the four later creates replay.
	w, err := k.Watch(ctx, store.WatchOptions{ResourceVersion: firstRV})
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Initial) != 4 {
		t.Fatalf("replayed %d events, want 4", len(w.Initial))
	}
	w.Stop()
	// After compaction, resuming from before it is ErrCompacted.
	if err := s.Compact(ctx, all.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: page.Continue + ""}); err != nil && !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("continue after compaction: %v", err)
	}
}

// BenchmarkUpdateParallel renews leases from many goroutines at once, each
// its own lease from its cached copy, as a fleet's heartbeats reach the
// store: the writes go to etcd in group commits.
func BenchmarkUpdateParallel(b *testing.B) {
	const parallelism = 16 // goroutines per core
	_, k := newStore(b)
	ctx := context.Background()
	// One lease per goroutine, created before the clock starts.
	leases := make(chan runtime.Object, parallelism*goruntime.GOMAXPROCS(0))
	for i := range cap(leases) {
		name := fmt.Sprintf("bench-%d", i)
		l, err := k.Create(ctx, k.Key("default", name), lease("default", name, "h"), false)
		if err != nil {
			b.Fatal(err)
		}
		leases <- l
	}
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		cur := <-leases
		defer func() { leases <- cur }()
		m := cur.(*coordinationv1.Lease)
		key := k.Key(m.Namespace, m.Name)
		for i := int32(0); pb.Next(); i++ {
			next, err := k.Update(ctx, key, store.UpdateOptions{Guess: cur}, func(current runtime.Object) (runtime.Object, error) {
				l := current.(*coordinationv1.Lease).DeepCopy()
				l.Spec.LeaseTransitions = ptr.To(i)
				return l, nil
			})
			if err != nil {
				b.Error(err)
				return
			}
			cur = next
		}
	})
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "updates/s")
	}
}

// TestLargeConcurrentWrites writes objects whose sum is far above etcd's
// request limit, all at once: group commit must split them into batches
// that etcd accepts, so that every write succeeds.
func TestLargeConcurrentWrites(t *testing.T) {
	_, k := newStore(t)
	ctx := context.Background()
	big := strings.Repeat("x", 200<<10) // 40 × 200 KiB = 8 MiB, twice etcd's limit
	errs := make(chan error, 40)
	for i := range cap(errs) {
		go func() {
			l := lease("default", fmt.Sprintf("large-%d", i), "h")
			l.Annotations = map[string]string{"payload": big}
			_, err := k.Create(ctx, k.Key("default", l.Name), l, false)
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestCurrentRevision: the current revision is the store's latest, whatever
// kind the last write was to.
func TestCurrentRevision(t *testing.T) {
	s, k := newStore(t)
	ctx := context.Background()
	var last string
	for i := range 3 {
		obj, err := k.Create(ctx, k.Key("default", fmt.Sprint(i)), lease("default", fmt.Sprint(i), "x"), false)
		if err != nil {
			t.Fatal(err)
		}
		last = obj.(*coordinationv1.Lease).ResourceVersion
	}
	rev, err := s.CurrentRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One create to a revision: each is its revision's first change.
	if fmt.Sprint(rev*1000) != last {
		t.Fatalf("current revision %d, want the last write's, of resourceVersion %s", rev, last)
	}
}

// nodeLeaseEtcd returns an etcd holding n node leases as the agents write
// them: each owned by its node, which its managed fields name. It also
// returns a logger that discards, for the stores the benchmark runs on it.
func nodeLeaseEtcd(b *testing.B, n int) (*slog.Logger, *embedded.Etcd) {
	b.Helper()
	quiet := slog.New(slog.DiscardHandler)
	_, k, e := newStoreWith(b, store.Config{Logger: quiet}, nil)
	ctx := context.Background()
	names := make(chan int)
	errs := make(chan error, 64)
	for range cap(errs) {
		go func() {
			for i := range names {
				name := fmt.Sprintf("leasehold-bench-node-%d", i) // as the bench fleet names them
				l := lease("kube-node-lease", name, name)
				l.Spec.LeaseDurationSeconds = ptr.To[int32](40)
				l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
				owner := fmt.Sprintf("bbcdcf80-bd8b-4db1-8f08-%012d", i)
				l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID(owner)}}
				l.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "leasehold-agent", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
					Time: &metav1.Time{Time: time.Now()}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: fmt.Appendf(nil, `{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"%s\"}":{}}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`, owner)}}}
				if _, err := k.Create(ctx, k.Key(l.Namespace, name), l, false); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range n {
		names <- i
	}
	close(names)
	for range cap(errs) {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return quiet, e
}

// BenchmarkRenewedCache is BenchmarkFill's cache once every lease has been
// renewed after the fill, as a running fleet's is: what it holds per lease
// after a collection, the ring of recent events included (renewals fill
// it), with the registry's sharing, and with and without its SameView.
func BenchmarkRenewedCache(b *testing.B) {
	const n = 20000
	quiet, e := nodeLeaseEtcd(b, n)
	ctx := context.Background()
	for _, sameView := range []bool{false, true} {
		b.Run(fmt.Sprintf("sameView=%v", sameView), func(b *testing.B) {
			setup := func(k *store.Kind) {
				k.ShareStrings(registry.Leases.SharedStrings)
				if sameView {
					k.SetSameView(registry.Leases.SameView)
				}
			}
			var held, objects uint64
			var before, after goruntime.MemStats
			for range b.N {
				goruntime.GC()
				goruntime.ReadMemStats(&before)
				s, k, stop := runStore(b, store.Config{Client: e.Client(), KV: e.KV(), Logger: quiet}, setup)
				if err := s.WaitReady(ctx); err != nil {
					b.Fatal(err)
				}
				for i := range n {
					key := k.Key("kube-node-lease", fmt.Sprintf("leasehold-bench-node-%d", i))
					cur, err := k.Cached(ctx, key)
					if err != nil {
						b.Fatal(err)
					}
					_, err = k.Update(ctx, key, store.UpdateOptions{Guess: cur}, func(cur runtime.Object) (runtime.Object, error) {
						l := cur.(*coordinationv1.Lease).DeepCopy()
						l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
						return l, nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				// A consistent list waits for the cache to reach etcd's
				// revision: every renewal applied.
				if _, err := k.List(ctx, store.ListOptions{Namespace: "kube-node-lease", Limit: 1}); err != nil {
					b.Fatal(err)
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				held += after.HeapAlloc - before.HeapAlloc
				objects += after.HeapObjects - before.HeapObjects
				stop()
			}
			b.ReportMetric(float64(held)/float64(b.N*n), "B-held/object")
			b.ReportMetric(float64(objects)/float64(b.N*n), "heap-objects-held/object")
		})
	}
}

// BenchmarkFill measures a restart's fill of the watch cache: a new store on
// an etcd holding 20 000 leases, as the agents write them (each owned by its
// node, which its managed fields name), lists them all and decodes them
// before it is ready, sharing what the server's cache shares. It also
// reports what the filled cache holds per lease, after a collection: bytes
// and heap objects (the collector's marking grows with both).
func BenchmarkFill(b *testing.B) {
	const n = 20000
	quiet, e := nodeLeaseEtcd(b, n)
	ctx := context.Background()
	share := func(k *store.Kind) { k.ShareStrings(registry.Leases.SharedStrings) }
	var held, objects uint64
	var before, after goruntime.MemStats
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		b.StartTimer()
		s, _, stop := runStore(b, store.Config{Client: e.Client(), KV: e.KV(), Logger: quiet}, share)
		if err := s.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		held += after.HeapAlloc - before.HeapAlloc
		objects += after.HeapObjects - before.HeapObjects
		stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
	b.ReportMetric(float64(held)/float64(b.N*n), "B-held/object")
	b.ReportMetric(float64(objects)/float64(b.N*n), "heap-objects-held/object")
}

// TestConsistentListRightAfterFill: a consistent list of a kind nobody
// writes to, made the moment its cache is filled while etcd's revision has
// moved on, is answered: the cache asks etcd for a progress notification
// only once its watch is there to receive it, and asks again if none comes.
// (Before, the answer could reach the shared watch stream first and be
// lost, and the list failed after 3 s unless etcd's periodic notification
// came sooner.)
func TestConsistentListRightAfterFill(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	_, _, e := newStoreWith(t, store.Config{Logger: quiet}, nil)
	client := e.Client()
	ctx := context.Background()
	for i := range 50 {
		_, k, stop := runStore(t, store.Config{Client: client, KV: e.KV(), Logger: quiet, Prefix: fmt.Sprintf("/quiet-%d", i)}, nil)
		// The revision moves on under another prefix while the cache fills
		// (before or after its list from etcd), and the list waits for the
		// fill, as bootstrap's does at a start.
		if _, err := client.Put(ctx, fmt.Sprintf("/elsewhere/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
		_, err := k.List(ctx, store.ListOptions{})
		stop()
		if err != nil {
			t.Fatalf("store %d: consistent list right after the fill: %v", i, err)
		}
	}
}

// TestUpdateLeavesGuessAlone: Update writes nothing to the object it is
// given as a guess, which in the server is the watch cache's, read by
// others at the same time. Under -race (as make test runs) a write while
// the reader runs fails the test.
func TestUpdateLeavesGuessAlone(t *testing.T) {
	_, k := newStore(t)
	ctx := context.Background()
	key := k.Key("default", "a")
	created, err := k.Create(ctx, key, lease("default", "a", "x"), false)
	if err != nil {
		t.Fatal(err)
	}
	guess := created.(*coordinationv1.Lease)
	before := guess.DeepCopy()
	stop, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		for {
			select {
			case <-stop:
				return
			default:
				_ = guess.ResourceVersion + guess.APIVersion + guess.Kind
			}
		}
	}()
	_, err = k.Update(ctx, key, store.UpdateOptions{Guess: guess}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.(*coordinationv1.Lease).DeepCopy()
		l.Spec.HolderIdentity = ptr.To("y")
		return l, nil
	})
	close(stop)
	<-read
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(guess, before) {
		t.Errorf("the guess changed:\n%+v\nwas\n%+v", guess, before)
	}
}

// TestContendedUpdatesAndDelete: writers of one key from a guess that is
// stale after the first write each lose compares and retry against what
// is there now; none of their increments is lost. A delete racing with
// updates retries the same way and returns the object as it was.
func TestContendedUpdatesAndDelete(t *testing.T) { forEachClient(t, testContendedUpdatesAndDelete) }

func testContendedUpdatesAndDelete(t *testing.T, k *store.Kind) {
	ctx := context.Background()
	key := k.Key("default", "contended")
	created, err := k.Create(ctx, key, lease("default", "contended", "h"), false)
	if err != nil {
		t.Fatal(err)
	}
	increment := func(cur runtime.Object) (runtime.Object, error) {
		l := cur.(*coordinationv1.Lease).DeepCopy()
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		return l, nil
	}
	const writers, each = 8, 10
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range each {
				if _, err := k.Update(ctx, key, store.UpdateOptions{Guess: created}, increment); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := k.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if n := ptr.Deref(got.(*coordinationv1.Lease).Spec.LeaseTransitions, 0); n != writers*each {
		t.Fatalf("leaseTransitions %d after %d increments", n, writers*each)
	}

	// Updates go on until the key is gone; the delete's compare fails
	// while they land between its read and its write.
	stop := make(chan error, 1)
	go func() {
		for {
			if _, err := k.Update(ctx, key, store.UpdateOptions{}, increment); err != nil {
				stop <- err
				return
			}
		}
	}()
	checks := 0
	gone, err := k.Delete(ctx, key, false, func(cur runtime.Object) error {
		checks++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-stop; !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update after the delete: got %v, want ErrNotFound", err)
	}
	if n := ptr.Deref(gone.(*coordinationv1.Lease).Spec.LeaseTransitions, 0); n < writers*each {
		t.Fatalf("the deleted object has leaseTransitions %d, fewer than the %d written before", n, writers*each)
	}
	if _, err := k.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: got %v, want ErrNotFound", err)
	}
	t.Logf("the delete checked %d states", checks)
}

// An update that changes nothing writes nothing, unless its caller says
// it changed something (Changed), which Update then takes at its word.
func TestUpdateNoChange(t *testing.T) {
	_, k := newStore(t)
	ctx := context.Background()
	key := k.Key("default", "same")
	created, err := k.Create(ctx, key, lease("default", "same", "h"), false)
	if err != nil {
		t.Fatal(err)
	}
	same := func(cur runtime.Object) (runtime.Object, error) { return cur.DeepCopyObject(), nil }
	rv := func(obj runtime.Object) string { return obj.(*coordinationv1.Lease).ResourceVersion }

	out, err := k.Update(ctx, key, store.UpdateOptions{}, same)
	if err != nil {
		t.Fatal(err)
	}
	if rv(out) != rv(created) {
		t.Fatalf("an update that changes nothing wrote: resourceVersion %s → %s", rv(created), rv(out))
	}
	out, err = k.Update(ctx, key, store.UpdateOptions{Changed: func() bool { return false }}, same)
	if err != nil {
		t.Fatal(err)
	}
	if rv(out) != rv(created) {
		t.Fatalf("Changed false: resourceVersion %s → %s", rv(created), rv(out))
	}
	out, err = k.Update(ctx, key, store.UpdateOptions{Changed: func() bool { return true }}, same)
	if err != nil {
		t.Fatal(err)
	}
	if rv(out) == rv(created) {
		t.Fatalf("Changed true: no write, resourceVersion still %s", rv(out))
	}
}

// TestUpdateDeletes: an update whose Delete says so deletes the object on
// the compare an update would have made: from a stale guess it loses, and
// the UpdateFunc and Delete are asked again about the object there now,
// which a delete then takes.
func TestUpdateDeletes(t *testing.T) {
	_, k := newStore(t)
	ctx := context.Background()
	key := k.Key("default", "gone")
	stale, err := k.Create(ctx, key, lease("default", "gone", "a"), false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Update(ctx, key, store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.(*coordinationv1.Lease).DeepCopy()
		l.Spec.HolderIdentity = ptr.To("b")
		return l, nil
	}); err != nil {
		t.Fatal(err)
	}
	var asked []string
	out, err := k.Update(ctx, key, store.UpdateOptions{
		Guess: stale,
		Delete: func(updated, cur runtime.Object) bool {
			asked = append(asked, *cur.(*coordinationv1.Lease).Spec.HolderIdentity)
			return true
		},
	}, func(cur runtime.Object) (runtime.Object, error) { return cur.DeepCopyObject(), nil })
	if err != nil {
		t.Fatal(err)
	}
	if got := *out.(*coordinationv1.Lease).Spec.HolderIdentity; got != "b" || !reflect.DeepEqual(asked, []string{"a", "b"}) {
		t.Errorf("returned holder %s, Delete asked about %q; want b, and a then b", got, asked)
	}
	if _, err := k.Get(ctx, key); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after the update: %v, want it gone", err)
	}
}

// TestUpdateNoChangeOfStaleGuess: an update that changes nothing of a
// stale guess is asked again of the object there now before Update
// answers that nothing changed: it answers the object as it is, not the
// guess.
func TestUpdateNoChangeOfStaleGuess(t *testing.T) {
	_, k := newStore(t)
	ctx := context.Background()
	key := k.Key("default", "moved")
	stale, err := k.Create(ctx, key, lease("default", "moved", "a"), false)
	if err != nil {
		t.Fatal(err)
	}
	now, err := k.Update(ctx, key, store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.(*coordinationv1.Lease).DeepCopy()
		l.Spec.HolderIdentity = ptr.To("b")
		return l, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	out, err := k.Update(ctx, key, store.UpdateOptions{Guess: stale}, func(cur runtime.Object) (runtime.Object, error) {
		calls++
		return cur.DeepCopyObject(), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*coordinationv1.Lease)
	if *got.Spec.HolderIdentity != "b" || got.ResourceVersion != now.(*coordinationv1.Lease).ResourceVersion || calls != 2 {
		t.Errorf("answered holder %s at %s after %d calls; want b at %s, after a second call on a fresh read",
			*got.Spec.HolderIdentity, got.ResourceVersion, calls, now.(*coordinationv1.Lease).ResourceVersion)
	}
}
