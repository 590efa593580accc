package store

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store/embedded"
)

// TestServedWhileFilling: a kind whose cache has not had its first fill is
// read from etcd (gets and lists of every kind of resourceVersion), its
// watches wait for the fill, and once filled the cache serves it.
func TestServedWhileFilling(t *testing.T) {
	// The counter is the process's: count from what earlier runs left.
	before := initializations(t, "fillingleases")
	gate := make(chan struct{})
	s, k, ctx := runLeaseStore(t, "fillingleases", Config{}, func(k *Kind) { k.cache.fillGate = gate })

	l := sampleLease()
	l.ManagedFields = nil
	key := k.Key(l.Namespace, l.Name)
	if _, err := k.Create(ctx, key, l, false); err != nil {
		t.Fatal(err)
	}

	got, err := k.Cached(ctx, key)
	if err != nil || got.(*coordinationv1.Lease).Name != l.Name {
		t.Fatalf("Cached while filling: %v, %v", got, err)
	}
	for _, rv := range []string{"", "0", "1"} {
		res, err := k.List(ctx, ListOptions{ResourceVersion: rv})
		if err != nil || len(res.Items) != 1 {
			t.Fatalf("list at resourceVersion %q while filling: %v, %v", rv, res, err)
		}
	}
	// A canceled context shows what waits: an answer other than its error
	// would have been given without waiting for the fill.
	canceled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if err := k.WaitFilled(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitFilled before the fill: %v", err)
	}
	if w, err := k.Watch(canceled, WatchOptions{ResourceVersion: "0"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("watch before the fill: %v, %v", w, err)
	}

	if n := initializations(t, "fillingleases") - before; n != 0 {
		t.Fatalf("%v initializations before the fill", n)
	}

	close(gate)
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n := initializations(t, "fillingleases") - before; n != 1 {
		t.Fatalf("%v initializations after the fill, want 1", n)
	}
	w, err := k.Watch(ctx, WatchOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("watch after the fill: %v", err)
	}
	if len(w.Initial) != 1 || w.Initial[0].Object.(*coordinationv1.Lease).Name != l.Name {
		t.Fatalf("initial events of the watch after the fill: %v", w.Initial)
	}
	w.Stop()
	if c := k.filledCache(); c == nil {
		t.Fatal("no cache after the fill")
	}
	got2, err := k.Cached(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := k.Cached(ctx, key); again != got2 {
		t.Fatal("Cached after the fill does not hand out the cache's object")
	}
}

func initializations(t *testing.T, resource string) float64 {
	t.Helper()
	return counterValue(t, cacheInitializations.WithLabelValues("coordination.k8s.io", resource))
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestConsistentListWhileCacheLags: a list that must be consistent
// (resourceVersion "") waits for the cache to catch up with etcd, and once
// it has waited waitTimeout in vain it reads etcd instead, paginated or
// not. (Before pages came from the cache, they always came from etcd.)
func TestConsistentListWhileCacheLags(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	gate := make(chan struct{})
	s, k, ctx := runLeaseStore(t, "lagging", Config{Clock: clk}, func(k *Kind) { k.cache.applyGate = gate })
	t.Cleanup(func() { close(gate) })
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// Written after the fill: the cache does not apply them.
	for _, name := range []string{"a", "b", "c"} {
		createLease(t, ctx, k, name)
	}
	ns := sampleLease().Namespace
	for _, limit := range []int64{0, 2} {
		var res *ListResult
		var err error
		stepUntilDone(t, clk, waitTimeout, func() { res, err = k.List(ctx, ListOptions{Namespace: ns, Limit: limit}) })
		if err != nil {
			t.Fatalf("limit %d: %v; want the list from etcd", limit, err)
		}
		want := 3
		if limit > 0 {
			want = int(limit)
		}
		if len(res.Items) != want {
			t.Fatalf("limit %d: %d items, want %d from etcd", limit, len(res.Items), want)
		}
		if limit > 0 && (res.RemainingItemCount == nil || *res.RemainingItemCount != 1) {
			t.Fatalf("limit %d: remaining %v, want 1", limit, res.RemainingItemCount)
		}
	}
}

// stepUntilDone runs f, stepping clk by step until f returns: f waits on
// the fake clock from a goroutine of the store's, which the test cannot
// see reach its timer, so the clock is stepped again every 20 ms.
func stepUntilDone(t *testing.T, clk *clocktesting.FakeClock, step time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	deadline := time.After(30 * time.Second)
	for {
		clk.Step(step)
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("gave up stepping the clock: the call did not return")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runLeaseStore runs a store of one kind of leases, named resource, on a
// fresh embedded etcd with cfg (its Client, KV, Scheme, Logger and
// CompactionInterval set here), calling setup on the kind before the store
// runs; the context is the store's, ended when the test is.
func runLeaseStore(t testing.TB, resource string, cfg Config, setup func(*Kind)) (*Store, *Kind, context.Context) {
	t.Helper()
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cfg.Client, cfg.KV, cfg.Scheme, cfg.CompactionInterval = e.Client(), e.KV(), registry.Scheme, -1
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k := s.Kind(coordinationv1.Resource(resource), resource, coordinationv1.SchemeGroupVersion.WithKind("Lease"), true,
		func() runtime.Object { return &coordinationv1.Lease{} }, func() runtime.Object { return &coordinationv1.LeaseList{} })
	setup(k)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, k, ctx
}

// TestGetNotOlderThanWhileCacheLags: a get that names a revision the cache
// has not reached waits for it, answers ErrTooLargeResourceVersion once it
// has waited waitTimeout in vain, and the object once the cache has it.
func TestGetNotOlderThanWhileCacheLags(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	gate := make(chan struct{})
	s, k, ctx := runLeaseStore(t, "laggingget", Config{Clock: clk}, func(k *Kind) { k.cache.applyGate = gate })
	t.Cleanup(func() { close(gate) })
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	l := sampleLease()
	l.Name, l.ManagedFields = "a", nil
	key := k.Key(l.Namespace, l.Name)
	created, err := k.Create(ctx, key, l, false) // after the fill: the cache does not apply it
	if err != nil {
		t.Fatal(err)
	}
	rv, err := ParseResourceVersion(created.(*coordinationv1.Lease).ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}

	stepUntilDone(t, clk, waitTimeout, func() { _, err = k.GetNotOlderThan(ctx, key, rv) })
	if !errors.Is(err, ErrTooLargeResourceVersion) {
		t.Fatalf("get at revision %d the cache has not reached: %v, want ErrTooLargeResourceVersion", rv, err)
	}
	var tl *TooLargeResourceVersionError
	if !errors.As(err, &tl) || tl.Requested != rv || tl.Current >= rv {
		t.Errorf("the error %v does not name revision %d and the one the cache had reached", err, rv)
	}

	gate <- struct{}{} // let the create through
	obj, err := k.GetNotOlderThan(ctx, key, rv)
	if err != nil {
		t.Fatalf("get at revision %d once the cache has it: %v", rv, err)
	}
	if got := obj.(*coordinationv1.Lease).ResourceVersion; got != created.(*coordinationv1.Lease).ResourceVersion {
		t.Errorf("got resourceVersion %s, want %s", got, created.(*coordinationv1.Lease).ResourceVersion)
	}
}
