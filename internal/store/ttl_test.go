package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/store"
)

// leaseOf returns the etcd lease attached to key (0: none).
func leaseOf(t *testing.T, c *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := c.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%s: %d keys", key, len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// TestTTLExpires: an object of a kind with a TTL is deleted by etcd once
// its lease runs out, and watchers see it go.
func TestTTLExpires(t *testing.T) {
	_, k, e := newStoreWith(t, store.Config{}, func(k *store.Kind) { k.SetTTL(time.Second) })
	c := e.Client()
	ctx := context.Background()
	w, err := k.Watch(ctx, store.WatchOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	key := k.Key("default", "short-lived")
	if _, err := k.Create(ctx, key, lease("default", "short-lived", "x"), false); err != nil {
		t.Fatal(err)
	}
	if leaseOf(t, c, key) == 0 {
		t.Fatal("no lease attached to the object")
	}
	// etcd's lessor runs on real time: its shortest lease is a few
	// seconds, so the deletion comes within them.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-w.Events:
			if !ok {
				t.Fatal("watch closed")
			}
			if e.Type == watch.Deleted {
				if _, err := k.Cached(ctx, key); err != store.ErrNotFound {
					t.Fatalf("after the DELETE the cache still has it: %v", err)
				}
				return
			}
		case <-deadline:
			t.Fatal("the object was not deleted within 30 s of a 1 s TTL")
		}
	}
}

// TestTTLLeaseSharing: writes close in time share one lease; once it would
// outlive a new write's TTL by more than the reuse window, or has been
// revoked, a new one is granted. An object without a TTL has no lease.
func TestTTLLeaseSharing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	_, k, e := newStoreWith(t, store.Config{Clock: clk}, func(k *store.Kind) { k.SetTTL(time.Hour) })
	c := e.Client()
	ctx := context.Background()
	create := func(name string) clientv3.LeaseID {
		t.Helper()
		key := k.Key("default", name)
		if _, err := k.Create(ctx, key, lease("default", name, "x"), false); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return leaseOf(t, c, key)
	}
	first := create("a")
	if first == 0 {
		t.Fatal("no lease")
	}
	clk.Step(30 * time.Second)
	if got := create("b"); got != first {
		t.Fatalf("a write 30 s later got lease %x, want the shared %x", got, first)
	}
	// The lease was granted for 1 h + 3 min; 3 min on, it no longer
	// outlives a new write's hour.
	clk.Step(3 * time.Minute)
	second := create("c")
	if second == first || second == 0 {
		t.Fatalf("a write 3.5 min later got lease %x (the first was %x)", second, first)
	}
	// An update takes the current lease too.
	key := k.Key("default", "a")
	if _, err := k.Update(ctx, key, store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.(*coordinationv1.Lease).DeepCopy()
		l.Labels = map[string]string{"updated": "true"}
		return l, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := leaseOf(t, c, key); got != second {
		t.Fatalf("updated object has lease %x, want %x", got, second)
	}

	// A lease revoked behind the store's back fails one write; the next
	// gets a new lease.
	if _, err := c.Revoke(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Create(ctx, k.Key("default", "d"), lease("default", "d", "x"), false); err == nil {
		t.Fatal("write with a revoked lease succeeded")
	}
	if got := create("e"); got == second || got == 0 {
		t.Fatalf("after the revocation: lease %x", got)
	}

	k.SetTTL(0)
	if got := create("forever"); got != 0 {
		t.Fatalf("without a TTL the object has lease %x", got)
	}
}

// TestTTLLeaseLimit: one lease carries at most 1 000 objects.
func TestTTLLeaseLimit(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	_, k, e := newStoreWith(t, store.Config{Clock: clk}, func(k *store.Kind) { k.SetTTL(time.Hour) })
	c := e.Client()
	ctx := context.Background()
	leases := map[clientv3.LeaseID]int{}
	for i := range 1001 {
		name := fmt.Sprint("obj-", i)
		key := k.Key("default", name)
		if _, err := k.Create(ctx, key, lease("default", name, "x"), false); err != nil {
			t.Fatal(err)
		}
		leases[leaseOf(t, c, key)]++
	}
	if len(leases) != 2 {
		t.Fatalf("1 001 objects on %d leases, want 2: %v", len(leases), leases)
	}
}
