package apiserver_test

import (
	"context"
	"strconv"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/store"
)

// TestListerWatcher runs a client-go informer on the in-process
// ListerWatcher: it sees what the API writes, in its namespace only, and
// holds the watch cache's own objects rather than copies.
func TestListerWatcher(t *testing.T) {
	ctx := testContext(t)
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := s.Client(t, protobuf)
	createNamespace(t, cs, "lw")
	createNamespace(t, cs, "lw-other")
	leases := cs.CoordinationV1().Leases("lw")
	if _, err := leases.Create(ctx, newLease("a", "h1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	elsewhere, err := cs.CoordinationV1().Leases("lw-other").Create(ctx, newLease("elsewhere", "h1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	lw, err := s.API.ListerWatcher(leasesGVR, "lw")
	if err != nil {
		t.Fatal(err)
	}
	// listItems reads the cache as it is (resourceVersion 0): first let it
	// catch up with the creates.
	if _, err := lw.List(metav1.ListOptions{ResourceVersion: elsewhere.ResourceVersion}); err != nil {
		t.Fatal(err)
	}
	first, second := listItems(t, lw), listItems(t, lw)
	if len(first) != 1 || first[0] != second[0] {
		t.Fatalf("two lists should hand out the same cached lease: %v, %v", first, second)
	}

	events := make(chan string, 100)
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(leaseEvents(events)); err != nil {
		t.Fatal(err)
	}
	infCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { inf.RunWithContext(infCtx); close(done) }()
	defer func() { stop(); <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer never synced")
	}
	expectEvent(t, events, "add a")

	l, err := leases.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = ptr.To("h2")
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, "update a h2")
	held, ok, err := inf.GetStore().GetByKey("lw/a")
	if err != nil || !ok {
		t.Fatalf("informer store lacks lw/a: %v %v", ok, err)
	}
	if cached := listItems(t, lw)[0]; held != any(cached) {
		t.Error("the informer holds a copy of the lease, not the cached object")
	}

	if _, err := leases.Create(ctx, newLease("b", "h1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, "add b")
	if err := leases.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvent(t, events, "delete a")
	if keys := inf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != "lw/b" {
		t.Errorf("informer holds %v, want [lw/b]", keys)
	}
}

// TestListerWatcherErrors: what the in-process reader cannot do fails the
// way client-go expects of the API.
func TestListerWatcherErrors(t *testing.T) {
	ctx := testContext(t)
	// A ring of two events: the lease's first revisions fall out of it.
	s := apiservertest.Start(t, apiservertest.Options{Store: store.Config{WatchCacheSize: 2}})
	cs := s.Client(t, protobuf)
	leases := cs.CoordinationV1().Leases("default")
	l, err := leases.Create(ctx, newLease("old", "h1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	for i := range 3 {
		l.Spec.HolderIdentity = ptr.To("h" + strconv.Itoa(i+2))
		if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	latest, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err := s.Store.Compact(ctx, latest); err != nil {
		t.Fatal(err)
	}

	if _, err := s.API.ListerWatcher(eventsv1.SchemeGroupVersion.WithResource("events"), "default"); err == nil {
		t.Error("events.k8s.io/v1 events are a view of core events; a ListerWatcher of them should be refused")
	}
	if _, err := s.API.ListerWatcher(coordinationv1.SchemeGroupVersion.WithResource("nothings"), ""); err == nil {
		t.Error("an unknown resource should be refused")
	}
	plain, err := s.API.ListerWatcher(leasesGVR, "default")
	if err != nil {
		t.Fatal(err)
	}
	lw := cache.ToListerWatcherWithContext(plain)
	if _, err := lw.ListWithContext(ctx, metav1.ListOptions{LabelSelector: "a in (b"}); !apierrors.IsBadRequest(err) {
		t.Errorf("list with a malformed label selector: %v, want 400", err)
	}
	if _, err := lw.WatchWithContext(ctx, metav1.ListOptions{FieldSelector: "spec.holderIdentity=h1"}); !apierrors.IsBadRequest(err) {
		t.Errorf("watch on a field leases cannot be selected by: %v, want 400", err)
	}
	// A reflector that resumes from a compacted revision must relist.
	if w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(created, 10)}); !apierrors.IsResourceExpired(err) {
		if w != nil {
			w.Stop()
		}
		t.Errorf("watch from compacted revision %d: %v, want 410 Expired", created, err)
	}
	// From the latest revision the watch opens and ends when stopped.
	w, err := lw.WatchWithContext(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	for range w.ResultChan() {
		t.Error("no event expected after the latest revision")
	}
}

// TestListerWatcherSelectors: label and field selectors filter the
// in-process list and watch as they do the API's, and a watch sees an
// object enter and leave its view as ADDED and DELETED.
func TestListerWatcherSelectors(t *testing.T) {
	ctx := testContext(t)
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := s.Client(t, protobuf)
	createNamespace(t, cs, "sel-in")
	createNamespace(t, cs, "sel-out")
	labelled := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		l.Labels = map[string]string{"app": "x"}
		return l
	}
	in, out := cs.CoordinationV1().Leases("sel-in"), cs.CoordinationV1().Leases("sel-out")
	a, err := in.Create(ctx, labelled(newLease("a", "h1")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := out.Create(ctx, labelled(newLease("b", "h1")), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.Create(ctx, newLease("c", "h1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	plain, err := s.API.ListerWatcher(leasesGVR, "")
	if err != nil {
		t.Fatal(err)
	}
	lw := cache.ToListerWatcherWithContext(plain)
	opts := metav1.ListOptions{LabelSelector: "app=x", FieldSelector: "metadata.namespace!=sel-out"}
	list, err := lw.ListWithContext(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].(*coordinationv1.Lease).Name != "a" {
		t.Fatalf("selected list: %v, want only sel-in/a", items)
	}

	opts.ResourceVersion = list.(metav1.ListInterface).GetResourceVersion()
	w, err := lw.WatchWithContext(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	b.Spec.HolderIdentity = ptr.To("h2") // outside by namespace: not seen
	if _, err := out.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Update(ctx, labelled(c), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Labels = nil
	if _, err := in.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectEvents(t, "selected watch", w, []string{"ADDED c", "DELETED a"})
}

func listItems(t *testing.T, lw cache.Lister) []runtime.Object {
	t.Helper()
	list, err := lw.List(metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	return items
}
