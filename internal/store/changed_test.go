package store

import (
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestWatchChanged: a watch given Changed receives the changes it reports
// and its additions and deletions, not the other changes; a bookmark then
// carries its revision past those held back; a watch resumed from before
// them has them all replayed, as does a watch without Changed.
func TestWatchChanged(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	s, k, ctx := runLeaseStore(t, "changedleases", Config{Clock: clk}, func(*Kind) {})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	holderChanged := func(prev, obj runtime.Object) bool {
		return *prev.(*coordinationv1.Lease).Spec.HolderIdentity != *obj.(*coordinationv1.Lease).Spec.HolderIdentity
	}
	l := sampleLease()
	l.ManagedFields, l.Spec.HolderIdentity = nil, ptr.To("a")
	key := k.Key(l.Namespace, l.Name)
	created, err := k.Create(ctx, key, l, false)
	if err != nil {
		t.Fatal(err)
	}
	from := strconv.FormatInt(ResourceVersion(created), 10)
	changes, err := k.Watch(ctx, WatchOptions{ResourceVersion: from, Changed: holderChanged, Bookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer changes.Stop()
	all, err := k.Watch(ctx, WatchOptions{ResourceVersion: from})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()

	renew := func(holder string) int64 {
		t.Helper()
		out, err := k.Update(ctx, key, UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
			l := cur.(*coordinationv1.Lease).DeepCopy()
			l.Spec.HolderIdentity = ptr.To(holder)
			l.Spec.RenewTime = &metav1.MicroTime{Time: l.Spec.RenewTime.Add(time.Second)}
			return l, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ResourceVersion(out)
	}
	renew("a") // held back
	renew("b") // delivered
	last := renew("b")
	// Once the unfiltered watch has all three, the cache has offered them
	// to both watches.
	expectHolders(t, "watch without Changed", all, []string{"MODIFIED a", "MODIFIED b", "MODIFIED b"})
	expectHolders(t, "watch of changes", changes, []string{"MODIFIED b"})
	clk.Step(10 * time.Second) // the store's default bookmark interval
	select {
	case e := <-changes.Events:
		if e.Type != watch.Bookmark || e.RV != revisionRV(revisionOf(last)) {
			t.Fatalf("after the held-back renewal: %s at %d, want a BOOKMARK at the end of %d's revision", e.Type, e.RV, last)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no bookmark")
	}

	resumed, err := k.Watch(ctx, WatchOptions{ResourceVersion: from, Changed: holderChanged})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	expectHolders(t, "watch of changes replayed from the ring", resumed, []string{"MODIFIED a", "MODIFIED b", "MODIFIED b"})

	if _, err := k.Delete(ctx, key, false, nil); err != nil {
		t.Fatal(err)
	}
	expectHolders(t, "watch of changes, the deletion", changes, []string{"DELETED b"})
	if _, err := k.Create(ctx, key, l, false); err != nil {
		t.Fatal(err)
	}
	expectHolders(t, "watch of changes, the creation", changes, []string{"ADDED a"})
}
