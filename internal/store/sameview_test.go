package store

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// TestFilteredWatchesWithSameView: with SetSameView, the ring keeps no
// version before a change that leaves the labels alone, and filtered
// watches, live or replayed from the ring, still see the object leave and
// enter their view as its labels change.
func TestFilteredWatchesWithSameView(t *testing.T) {
	sameLabels := func(old, new runtime.Object) bool {
		return maps.Equal(old.(*coordinationv1.Lease).Labels, new.(*coordinationv1.Lease).Labels)
	}
	s, k, ctx := runLeaseStore(t, "sameviewleases", Config{}, func(k *Kind) { k.SetSameView(sameLabels) })
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	gold := func(obj runtime.Object) bool { return obj.(*coordinationv1.Lease).Labels["tier"] == "gold" }

	l := sampleLease()
	l.ManagedFields, l.Labels = nil, map[string]string{"tier": "gold"}
	key := k.Key(l.Namespace, l.Name)
	created, err := k.Create(ctx, key, l, false)
	if err != nil {
		t.Fatal(err)
	}
	from := strconv.FormatInt(ResourceVersion(created), 10)
	live, err := k.Watch(ctx, WatchOptions{ResourceVersion: from, Filter: gold})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()

	change := func(holder, tier string) {
		t.Helper()
		_, err := k.Update(ctx, key, UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
			l := cur.(*coordinationv1.Lease).DeepCopy()
			l.Spec.HolderIdentity = ptr.To(holder)
			l.Labels = map[string]string{"tier": tier}
			return l, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	change("b", "gold")   // renewed in view
	change("b", "silver") // leaves
	change("c", "silver") // renewed out of view
	change("c", "gold")   // enters
	change("d", "gold")   // renewed in view
	want := []string{"MODIFIED b", "DELETED b", "ADDED c", "MODIFIED d"}
	expectHolders(t, "live filtered watch", live, want)

	replayed, err := k.Watch(ctx, WatchOptions{ResourceVersion: from, Filter: gold})
	if err != nil {
		t.Fatal(err)
	}
	defer replayed.Stop()
	expectHolders(t, "filtered watch replayed from the ring", replayed, want)
	all, err := k.Watch(ctx, WatchOptions{ResourceVersion: from})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	expectHolders(t, "unfiltered watch", all, []string{"MODIFIED b", "MODIFIED b", "MODIFIED c", "MODIFIED c", "MODIFIED d"})

	// The ring holds the version before only where the labels changed.
	c := k.cache
	c.mu.RLock()
	var kept []bool
	for i := range c.n {
		e := c.eventLocked(i)
		if e.Type == watch.Modified {
			kept = append(kept, e.prev != nil)
			if e.sameView == (e.prev != nil) {
				t.Errorf("event at %d: sameView %v with prev %v", e.RV, e.sameView, e.prev != nil)
			}
		}
	}
	c.mu.RUnlock()
	if want := []bool{false, true, false, true, false}; !slices.Equal(kept, want) {
		t.Errorf("versions before kept in the ring: %v, want %v", kept, want)
	}
}

// expectHolders reads len(want) events from w, its initial ones (those
// replayed from the ring) first, each named by its type and the lease's
// holder.
func expectHolders(t *testing.T, what string, w *Watch, want []string) {
	t.Helper()
	var got []string
	for _, e := range w.Initial {
		got = append(got, string(e.Type)+" "+*e.Object.(*coordinationv1.Lease).Spec.HolderIdentity)
	}
	for len(got) < len(want) {
		select {
		case e, ok := <-w.Events:
			if !ok {
				t.Fatalf("%s: closed after %v", what, got)
			}
			if e.Type != watch.Bookmark {
				got = append(got, string(e.Type)+" "+*e.Object.(*coordinationv1.Lease).Spec.HolderIdentity)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: only %v, want %v", what, got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}
