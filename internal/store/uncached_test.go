package store_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/store"
)

// TestWithoutWatchCache: a kind served from etcd alone lists and watches
// with the semantics of a cached one, and holds nothing in memory.
func TestWithoutWatchCache(t *testing.T) {
	s, k, _ := newStoreWith(t, store.Config{}, func(k *store.Kind) { k.DisableWatchCache() })
	ctx := context.Background()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	var last int64
	for _, ns := range []string{"a", "b"} {
		for _, name := range []string{"x", "y"} {
			obj, err := k.Create(ctx, k.Key(ns, name), lease(ns, name, "h"), false)
			if err != nil {
				t.Fatal(err)
			}
			last, _ = strconv.ParseInt(obj.(*coordinationv1.Lease).ResourceVersion, 10, 64)
		}
	}
	names := func(objs []runtime.Object) []string {
		var out []string
		for _, o := range objs {
			l := o.(*coordinationv1.Lease)
			out = append(out, l.Namespace+"/"+l.Name)
		}
		return out
	}

	// Lists: every form reads etcd and sees the latest writes.
	for _, rv := range []string{"", "0", strconv.FormatInt(last, 10)} {
		res, err := k.List(ctx, store.ListOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatalf("list at %q: %v", rv, err)
		}
		if got := names(res.Items); !slices.Equal(got, []string{"a/x", "a/y", "b/x", "b/y"}) || res.ResourceVersion < last {
			t.Errorf("list at %q: %v at %d, want all four at %d or later", rv, got, res.ResourceVersion, last)
		}
	}
	res, err := k.List(ctx, store.ListOptions{Namespace: "b", ResourceVersion: strconv.FormatInt(last-1, 10), Match: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(res.Items); !slices.Equal(got, []string{"b/x"}) || res.ResourceVersion != last-1 {
		t.Errorf("exact list of b at %d: %v at %d, want [b/x]", last-1, got, res.ResourceVersion)
	}
	if _, err := k.List(ctx, store.ListOptions{ResourceVersion: strconv.FormatInt(last+100*1000, 10)}); !errors.Is(err, store.ErrTooLargeResourceVersion) {
		t.Errorf("list not older than a future revision: %v, want ErrTooLargeResourceVersion", err)
	}
	if obj, err := k.Cached(ctx, k.Key("a", "y")); err != nil || obj.(*coordinationv1.Lease).Name != "y" {
		t.Errorf("Cached reads etcd: %v, %v", obj, err)
	}
	if _, err := k.Cached(ctx, k.Key("a", "none")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Cached of a missing object: %v, want ErrNotFound", err)
	}

	// Watches: with initial events (filtered), from a revision, and from
	// now without initial events.
	onlyX := func(obj runtime.Object) bool { return obj.(*coordinationv1.Lease).Name == "x" }
	initial, err := k.Watch(ctx, store.WatchOptions{Filter: onlyX})
	if err != nil {
		t.Fatal(err)
	}
	defer initial.Stop()
	if got := eventNames(initial.Initial); !slices.Equal(got, []string{"ADDED a/x", "ADDED b/x"}) || initial.InitialRV < last {
		t.Errorf("initial events %v at %d", got, initial.InitialRV)
	}
	fromRV, err := k.Watch(ctx, store.WatchOptions{Namespace: "a", ResourceVersion: strconv.FormatInt(last-2, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer fromRV.Stop()
	fromNow, err := k.Watch(ctx, store.WatchOptions{Namespace: "b", SendInitialEvents: ptr.To(false)})
	if err != nil {
		t.Fatal(err)
	}
	defer fromNow.Stop()

	rename := func(ns, name, holder string) {
		t.Helper()
		_, err := k.Update(ctx, k.Key(ns, name), store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
			l := cur.(*coordinationv1.Lease).DeepCopy()
			l.Spec.HolderIdentity = ptr.To(holder)
			return l, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rename("a", "y", "h2")
	rename("b", "x", "h2")
	if _, err := k.Delete(ctx, k.Key("a", "x"), false, nil); err != nil {
		t.Fatal(err)
	}
	// last-2 is a/y's creation: the watch of a from there sees what came
	// after it in a only.
	expectStoreEvents(t, "watch of a from a revision", fromRV, []string{"MODIFIED a/y", "DELETED a/x"})
	expectStoreEvents(t, "watch of b from now", fromNow, []string{"MODIFIED b/x"})
	expectStoreEvents(t, "filtered watch", initial, []string{"MODIFIED b/x", "DELETED a/x"})
}

func eventNames(evs []*store.Event) []string {
	var out []string
	for _, e := range evs {
		l := e.Object.(*coordinationv1.Lease)
		out = append(out, string(e.Type)+" "+l.Namespace+"/"+l.Name)
	}
	return out
}

func expectStoreEvents(t *testing.T, what string, w *store.Watch, want []string) {
	t.Helper()
	var got []*store.Event
	for len(got) < len(want) {
		select {
		case e, ok := <-w.Events:
			if !ok {
				t.Fatalf("%s: closed after %v", what, eventNames(got))
			}
			if e.Type != watch.Bookmark {
				got = append(got, e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: only %v, want %v", what, eventNames(got), want)
		}
	}
	if names := eventNames(got); !slices.Equal(names, want) {
		t.Errorf("%s: %v, want %v", what, names, want)
	}
}
