package store

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestDeferAfterOwnWrites: UpdateOptions.Defer's answer about a guess
// from the watch cache stands only once the cache has seen every write
// this server made of the kind. Before, a guess may be a version the
// server replaced, and Update asks again of what etcd holds; either way
// nothing is written.
func TestDeferAfterOwnWrites(t *testing.T) {
	gate := make(chan struct{})
	s, k, ctx := runLeaseStore(t, "deferring", Config{}, func(k *Kind) { k.cache.applyGate = gate })
	t.Cleanup(func() { close(gate) })
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	l := sampleLease()
	key := k.Key(l.Namespace, l.Name)
	v1, err := k.Create(ctx, key, l, false)
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{} // the cache applies the create
	cached, err := k.GetNotOlderThan(ctx, key, ResourceVersion(v1))
	if err != nil {
		t.Fatal(err)
	}
	// This server replaces v1; the cache does not apply it yet.
	v2, err := k.Update(ctx, key, UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		next := cur.(*coordinationv1.Lease).DeepCopy()
		next.Labels = map[string]string{"v": "2"}
		return next, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// deferred updates with the guess and records what Defer was asked
	// about; it answers with that.
	deferred := func(guess runtime.Object) (asked []int64) {
		t.Helper()
		got, err := k.Update(ctx, key, UpdateOptions{
			Guess: guess,
			Defer: func(updated, cur runtime.Object) runtime.Object {
				asked = append(asked, ResourceVersion(cur))
				return cur
			},
		}, func(cur runtime.Object) (runtime.Object, error) {
			next := cur.(*coordinationv1.Lease).DeepCopy()
			next.Spec.HolderIdentity = nil
			return next, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(asked) == 0 || ResourceVersion(got) != asked[len(asked)-1] {
			t.Fatalf("Update answered %d; Defer was asked about %v and answers with the last", ResourceVersion(got), asked)
		}
		return asked
	}
	if asked := deferred(cached); len(asked) != 2 || asked[1] != ResourceVersion(v2) {
		t.Errorf("with a guess the server had replaced, Defer was asked about versions %v; want the guess's answer set aside for etcd's version, %d", asked, ResourceVersion(v2))
	}

	gate <- struct{}{} // the cache applies v2
	cached, err = k.GetNotOlderThan(ctx, key, ResourceVersion(v2))
	if err != nil {
		t.Fatal(err)
	}
	if asked := deferred(cached); len(asked) != 1 || asked[0] != ResourceVersion(v2) {
		t.Errorf("with the current guess, Defer was asked about versions %v; want the guess, %d", asked, ResourceVersion(v2))
	}
	stored, err := k.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ResourceVersion(stored) != ResourceVersion(v2) || stored.(*coordinationv1.Lease).Spec.HolderIdentity == nil {
		t.Errorf("etcd holds resourceVersion %d, holder %v; want v2 (%d) untouched", ResourceVersion(stored), stored.(*coordinationv1.Lease).Spec.HolderIdentity, ResourceVersion(v2))
	}
}
