package store

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"
)

func createLeases(t *testing.T, ctx context.Context, k *Kind, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, err := k.Create(ctx, k.Key("ns", name), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}, false); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStorageObjectsCached: a watch cache keeps its kind's
// apiserver_storage_objects current, from its fill on, through creates and
// deletes.
func TestStorageObjectsCached(t *testing.T) {
	_, k, ctx := runLeaseStore(t, "countcached", Config{}, func(*Kind) {})
	objects := func() float64 {
		t.Helper()
		n := testutil.ToFloat64(storageObjects.WithLabelValues("countcached.coordination.k8s.io"))
		if m := testutil.ToFloat64(resourceObjects.WithLabelValues("coordination.k8s.io", "countcached")); m != n {
			t.Errorf("apiserver_resource_objects %v, apiserver_storage_objects %v: want the same", m, n)
		}
		return n
	}
	caughtUp := func() {
		t.Helper()
		rev, err := k.s.CurrentRevision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := k.cache.waitFor(ctx, revisionRV(rev)); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.WaitFilled(ctx); err != nil {
		t.Fatal(err)
	}
	if got := objects(); got != 0 {
		t.Fatalf("%v objects counted in an empty store", got)
	}
	createLeases(t, ctx, k, "a", "b", "c")
	caughtUp()
	if got := objects(); got != 3 {
		t.Errorf("%v objects after three creates, want 3", got)
	}
	if _, err := k.Delete(ctx, k.Key("ns", "b"), false, nil); err != nil {
		t.Fatal(err)
	}
	caughtUp()
	if got := objects(); got != 2 {
		t.Errorf("%v objects after a delete, want 2", got)
	}
}

// TestStorageObjectsUncached: a kind served from etcd alone is counted in
// etcd at once and then every CountPollPeriod, as kube-apiserver counts.
func TestStorageObjectsUncached(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1e9, 0))
	counted := make(chan struct{})
	_, k, _ := runLeaseStore(t, "countuncached", Config{Clock: clk, CountPollPeriod: time.Minute}, func(k *Kind) {
		k.DisableWatchCache()
		k.s.countStepped = func() { counted <- struct{}{} }
	})
	objects := func() float64 {
		t.Helper()
		n := testutil.ToFloat64(storageObjects.WithLabelValues("countuncached.coordination.k8s.io"))
		if m := testutil.ToFloat64(resourceObjects.WithLabelValues("coordination.k8s.io", "countuncached")); m != n {
			t.Errorf("apiserver_resource_objects %v, apiserver_storage_objects %v: want the same", m, n)
		}
		return n
	}
	<-counted
	if got := objects(); got != 0 {
		t.Fatalf("%v objects counted in an empty store", got)
	}
	createLeases(t, context.Background(), k, "a", "b", "c")
	if got := objects(); got != 0 {
		t.Errorf("%v objects before the next count, want the last count's 0", got)
	}
	clk.Step(time.Minute)
	<-counted
	if got := objects(); got != 3 {
		t.Errorf("%v objects counted after three creates, want 3", got)
	}
}
