package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/store"
)

// TestPagesFromSnapshot: the later pages of a list whose first page the
// cache served are the range as it was at the first page's revision,
// whatever was written since, and they are read from the cache's snapshot
// even once etcd has compacted that revision away. Once the last page has
// been read, or none for ten seconds, the snapshot is gone and pages come
// from etcd again, which no longer has the revision.
func TestPagesFromSnapshot(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s, k, _ := newStoreWith(t, store.Config{Clock: clk}, nil)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		if _, err := k.Create(ctx, k.Key("ns", n), lease("ns", n, "h"), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Create(ctx, k.Key("other", "x"), lease("other", "x", "h"), false); err != nil {
		t.Fatal(err)
	}
	first, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseNames(first.Items); !slices.Equal(got, []string{"a", "b"}) || first.Continue == "" ||
		first.RemainingItemCount == nil || *first.RemainingItemCount != 3 {
		t.Fatalf("first page: %v, continue %q, remaining %v; want [a b], a token and 3", got, first.Continue, first.RemainingItemCount)
	}

	// Written after the first page, then compacted away in etcd.
	if _, err := k.Update(ctx, k.Key("ns", "c"), store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.DeepCopyObject().(*coordinationv1.Lease)
		l.Spec.HolderIdentity = ptr.To("changed")
		return l, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Delete(ctx, k.Key("ns", "d"), false, nil); err != nil {
		t.Fatal(err)
	}
	latest, err := k.Create(ctx, k.Key("ns", "f"), lease("ns", "f", "h"), false)
	if err != nil {
		t.Fatal(err)
	}
	rv, err := strconv.ParseInt(latest.(*coordinationv1.Lease).ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, rv); err != nil {
		t.Fatal(err)
	}

	var got []string
	var holders []string
	token := first.Continue
	for pages := 2; token != ""; pages++ {
		page, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if page.ResourceVersion != first.ResourceVersion {
			t.Errorf("page %d at revision %d, the first at %d", pages, page.ResourceVersion, first.ResourceVersion)
		}
		for _, obj := range page.Items {
			holders = append(holders, *obj.(*coordinationv1.Lease).Spec.HolderIdentity)
		}
		got = append(got, leaseNames(page.Items)...)
		token = page.Continue
		if pages > 5 {
			t.Fatal("the pages do not end")
		}
	}
	if !slices.Equal(got, []string{"c", "d", "e"}) || !slices.Equal(holders, []string{"h", "h", "h"}) {
		t.Errorf("later pages: %v held by %v; want [c d e], each held by h", got, holders)
	}

	// The last page was read: the snapshot went with it.
	if _, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: first.Continue}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("the second page once the list ended: %v; want ErrCompacted from etcd", err)
	}

	// A list left unfinished: its pages can be read again while the
	// snapshot lives, which is ten seconds after the latest page read.
	first, err = k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := k.Update(ctx, k.Key("ns", "b"), store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.DeepCopyObject().(*coordinationv1.Lease)
		l.Spec.HolderIdentity = ptr.To("changed")
		return l, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rv, err = strconv.ParseInt(renewed.(*coordinationv1.Lease).ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, rv); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		clk.Step(9 * time.Second)
		page, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 1, Continue: first.Continue})
		if err != nil || !slices.Equal(leaseNames(page.Items), []string{"b"}) || *page.Items[0].(*coordinationv1.Lease).Spec.HolderIdentity != "h" {
			t.Fatalf("the second page: %v, %v; want [b] held by h", page, err)
		}
	}
	clk.Step(11 * time.Second)
	if _, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 1, Continue: first.Continue}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("the second page once the snapshot expired: %v; want ErrCompacted from etcd", err)
	}
}

// TestPagesFromSnapshotFiltered: with a filter a page holds up to the limit
// of the objects it keeps, and no remaining count, as from etcd.
func TestPagesFromSnapshotFiltered(t *testing.T) {
	_, k := newStore(t)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		holder := "h"
		if n == "b" || n == "d" {
			holder = "other"
		}
		if _, err := k.Create(ctx, k.Key("ns", n), lease("ns", n, holder), false); err != nil {
			t.Fatal(err)
		}
	}
	opts := store.ListOptions{Namespace: "ns", Limit: 2, Filter: func(obj runtime.Object) bool {
		return *obj.(*coordinationv1.Lease).Spec.HolderIdentity == "h"
	}}
	var pages [][]string
	for {
		page, err := k.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if page.RemainingItemCount != nil {
			t.Errorf("page %d: remaining %d; want none with a filter", len(pages)+1, *page.RemainingItemCount)
		}
		pages = append(pages, leaseNames(page.Items))
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if len(pages) != 2 || !slices.Equal(pages[0], []string{"a", "c"}) || !slices.Equal(pages[1], []string{"e"}) {
		t.Errorf("pages %v; want [[a c] [e]]", pages)
	}
}

func leaseNames(objs []runtime.Object) []string {
	var names []string
	for _, obj := range objs {
		names = append(names, obj.(*coordinationv1.Lease).Name)
	}
	return names
}

// TestPagesReadAheadFromEtcd: a list of a kind served from etcd alone, read
// in pages of 2, reads 8 keys from etcd at once and returns the next three
// pages from what it read, even once etcd has compacted the list's
// revision away; the page after them reads etcd, which no longer has it.
// What was read ahead goes ten seconds after it was kept.
func TestPagesReadAheadFromEtcd(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s, k, _ := newStoreWith(t, store.Config{Clock: clk}, func(k *store.Kind) { k.DisableWatchCache() })
	ctx := context.Background()
	var want []string
	for i := range 25 {
		n := fmt.Sprintf("n%02d", i)
		want = append(want, n)
		if _, err := k.Create(ctx, k.Key("ns", n), lease("ns", n, "h"), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.Create(ctx, k.Key("other", "x"), lease("other", "x", "h"), false); err != nil {
		t.Fatal(err)
	}
	compactions := 0
	compactNow := func() {
		t.Helper()
		compactions++
		name := fmt.Sprintf("y%d", compactions)
		obj, err := k.Create(ctx, k.Key("other", name), lease("other", name, "h"), false)
		if err != nil {
			t.Fatal(err)
		}
		rv, _ := strconv.ParseInt(obj.(*coordinationv1.Lease).ResourceVersion, 10, 64)
		if err := s.Compact(ctx, rv); err != nil {
			t.Fatal(err)
		}
	}

	page, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	compactNow()
	got := leaseNames(page.Items)
	for n := 2; page.Continue != ""; n++ {
		if page.RemainingItemCount == nil || *page.RemainingItemCount != int64(25-len(got)) {
			t.Fatalf("page %d: remaining %v, want %d", n-1, page.RemainingItemCount, 25-len(got))
		}
		next, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: page.Continue})
		if n <= 4 && err != nil {
			t.Fatalf("page %d: %v", n, err)
		}
		if n == 5 {
			if !errors.Is(err, store.ErrCompacted) {
				t.Fatalf("page 5, beyond the keys read ahead: %v; want ErrCompacted from etcd", err)
			}
			break
		}
		got = append(got, leaseNames(next.Items)...)
		page = next
	}
	if !slices.Equal(got, want[:8]) {
		t.Errorf("four pages: %v; want %v", got, want[:8])
	}

	// Kept ten seconds.
	page, err = k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	compactNow()
	clk.Step(9 * time.Second)
	if page, err = k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: page.Continue}); err != nil {
		t.Fatalf("the second page 9 s later: %v", err)
	}
	clk.Step(11 * time.Second)
	if _, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 2, Continue: page.Continue}); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("the third page 11 s after the second: %v; want ErrCompacted from etcd", err)
	}

	// All of it, without compactions: the same as one list.
	var all []string
	opts := store.ListOptions{Namespace: "ns", Limit: 3}
	for {
		page, err := k.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, leaseNames(page.Items)...)
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if !slices.Equal(all, want) {
		t.Errorf("in pages of 3: %v; want %v", all, want)
	}
}

// TestListsSeeChanges: every way a list reads the cache's state (a whole
// list, a first page and a watch's initial events) has each object at its
// latest version, in key order: after the fill from etcd, after changes
// to objects the cache held, and after keys were added and removed.
func TestListsSeeChanges(t *testing.T) {
	_, _, e := newStoreWith(t, store.Config{}, nil)
	ctx := context.Background()
	_, k, stop := runStore(t, store.Config{Client: e.Client(), KV: e.KV()}, nil)
	for _, n := range []string{"c", "a", "b"} {
		if _, err := k.Create(ctx, k.Key("ns", n), lease("ns", n, "first"), false); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	// A new store's cache fills with a, b and c from etcd.
	s, k, stop := runStore(t, store.Config{Client: e.Client(), KV: e.KV()}, nil)
	t.Cleanup(stop)
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	holders := func(objs []runtime.Object) []string {
		var out []string
		for _, obj := range objs {
			l := obj.(*coordinationv1.Lease)
			out = append(out, l.Name+"="+*l.Spec.HolderIdentity)
		}
		return out
	}
	check := func(step string, want ...string) {
		t.Helper()
		all, err := k.List(ctx, store.ListOptions{Namespace: "ns"})
		if err != nil {
			t.Fatal(err)
		}
		page, err := k.List(ctx, store.ListOptions{Namespace: "ns", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		w, err := k.Watch(ctx, store.WatchOptions{Namespace: "ns"})
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
		var initial []runtime.Object
		for _, e := range w.Initial {
			initial = append(initial, e.Object)
		}
		for what, got := range map[string][]string{"list": holders(all.Items), "page": holders(page.Items), "watch": holders(initial)} {
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s %v, want %v", step, what, got, want)
			}
		}
	}
	update := func(name, holder string) {
		t.Helper()
		if _, err := k.Update(ctx, k.Key("ns", name), store.UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
			l := cur.DeepCopyObject().(*coordinationv1.Lease)
			l.Spec.HolderIdentity = ptr.To(holder)
			return l, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	check("filled", "a=first", "b=first", "c=first")
	update("b", "second")
	check("b changed", "a=first", "b=second", "c=first")
	if _, err := k.Create(ctx, k.Key("ns", "ab"), lease("ns", "ab", "first"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Delete(ctx, k.Key("ns", "c"), false, nil); err != nil {
		t.Fatal(err)
	}
	check("ab added, c deleted", "a=first", "ab=first", "b=second")
	update("ab", "second")
	update("a", "third")
	check("a and ab changed", "a=third", "ab=second", "b=second")
}
