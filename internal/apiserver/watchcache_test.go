package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store"
)

// TestWatchCacheSizes: nodes#0 serves Nodes from etcd alone, through the
// API and to the server's own controllers, which then get copies of their
// own; events#N gives Events the cache they lack by default.
func TestWatchCacheSizes(t *testing.T) {
	ctx := testContext(t)
	s := apiservertest.Start(t, apiservertest.Options{WatchCacheSizes: map[schema.GroupResource]int{
		{Resource: "nodes"}: 0, {Resource: "events"}: 100,
	}})
	shares := func(gvr schema.GroupVersionResource) bool {
		t.Helper()
		lw, err := s.API.ListerWatcher(gvr, "")
		if err != nil {
			t.Fatal(err)
		}
		return lw.(interface{ SharesObjects() bool }).SharesObjects()
	}
	for gvr, want := range map[schema.GroupVersionResource]bool{
		corev1.SchemeGroupVersion.WithResource("nodes"):          false,
		corev1.SchemeGroupVersion.WithResource("events"):         true,
		coordinationv1.SchemeGroupVersion.WithResource("leases"): true,
	} {
		if got := shares(gvr); got != want {
			t.Errorf("%s shares the cache's objects: %v, want %v", gvr, got, want)
		}
	}

	// Nodes from etcd: create, watch, read, list, update, delete.
	nodes := s.Client(t, protobuf).CoreV1().Nodes()
	w, err := nodes.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "uncached-1", Labels: map[string]string{"rack": "r1"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if n, ok := ev.Object.(*corev1.Node); ev.Type != watch.Added || !ok || n.Name != "uncached-1" || n.ResourceVersion != created.ResourceVersion {
			t.Errorf("watch sent %s %#v, want the node added at %s", ev.Type, ev.Object, created.ResourceVersion)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event for the new node")
	}
	got, err := nodes.Get(ctx, "uncached-1", metav1.GetOptions{})
	if err != nil || got.UID != created.UID {
		t.Fatalf("get: %v, %v", got, err)
	}
	got.Labels["zone"] = "a"
	updated, err := nodes.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A write based on the old version conflicts, as with a cache.
	got.Labels["zone"] = "b"
	if _, err := nodes.Update(ctx, got, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "modified") {
		t.Errorf("a stale update gave %v, want a conflict", err)
	}
	list, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: "zone=a"})
	if err != nil || len(list.Items) != 1 || list.Items[0].ResourceVersion != updated.ResourceVersion {
		t.Fatalf("list: %v, %v", list, err)
	}
	// The server's controllers list it from etcd too, each list a copy of
	// its own.
	lw, err := s.API.ListerWatcher(corev1.SchemeGroupVersion.WithResource("nodes"), "")
	if err != nil {
		t.Fatal(err)
	}
	items, again := listItems(t, lw), listItems(t, lw)
	if len(items) != 1 || items[0].(*corev1.Node).UID != created.UID || len(again) != 1 || again[0] == items[0] {
		t.Errorf("in-process lists %#v and %#v, want two copies of the node", items, again)
	}
	if err := nodes.Delete(ctx, "uncached-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestUncachedListPages: the in-process lists of a resource served from
// etcd come in the pages asked for, every page at the first one's
// revision; those of a cached resource come whole, one snapshot.
func TestUncachedListPages(t *testing.T) {
	ctx := testContext(t)
	s := apiservertest.Start(t, apiservertest.Options{WatchCacheSizes: map[schema.GroupResource]int{{Resource: "nodes"}: 0}})
	client := s.Client(t, protobuf)
	var first string
	for i := range 5 {
		n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("paged-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = n.ResourceVersion
		}
	}
	lister := func(gvr schema.GroupVersionResource) cache.ListerWithContext {
		t.Helper()
		lw, err := s.API.ListerWatcher(gvr, "")
		if err != nil {
			t.Fatal(err)
		}
		return lw.(cache.ListerWithContext)
	}
	nodes := lister(corev1.SchemeGroupVersion.WithResource("nodes"))
	// A bare resourceVersion with a limit reads the newest state, as the
	// controllers' feeds want, not exactly the state at that revision.
	for _, rv := range []string{"0", first} {
		var names []string
		var listRV string
		opts := metav1.ListOptions{ResourceVersion: rv, Limit: 2}
		for pages := 1; ; pages++ {
			list, err := nodes.ListWithContext(ctx, opts)
			if err != nil {
				t.Fatalf("from %s, page %d: %v", rv, pages, err)
			}
			lm, _ := meta.ListAccessor(list)
			items, _ := meta.ExtractList(list)
			if len(items) > 2 {
				t.Fatalf("from %s, page %d has %d items", rv, pages, len(items))
			}
			for _, obj := range items {
				names = append(names, obj.(*corev1.Node).Name)
			}
			if listRV == "" {
				listRV = lm.GetResourceVersion()
			} else if lm.GetResourceVersion() != listRV {
				t.Errorf("from %s, page %d at %s, the first at %s", rv, pages, lm.GetResourceVersion(), listRV)
			}
			if lm.GetContinue() == "" {
				if pages != 3 {
					t.Errorf("from %s, %d pages, want 3", rv, pages)
				}
				break
			}
			opts = metav1.ListOptions{Limit: 2, Continue: lm.GetContinue()}
		}
		if strings.Join(names, ",") != "paged-0,paged-1,paged-2,paged-3,paged-4" {
			t.Errorf("from %s, listed %v", rv, names)
		}
	}
	// Leases come from the cache, whole.
	var last string
	for i := range 3 {
		l, err := client.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("whole-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = l.ResourceVersion
	}
	leases := lister(coordinationv1.SchemeGroupVersion.WithResource("leases"))
	// resourceVersion 0 takes the cache as it is, which may not have seen
	// the last create yet: a list not older than it waits until it has.
	if _, err := leases.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: last}); err != nil {
		t.Fatal(err)
	}
	list, err := leases.ListWithContext(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if lm, _ := meta.ListAccessor(list); meta.LenList(list) < 3 || lm.GetContinue() != "" {
		t.Errorf("a cached list with a limit of 1: %d items, continue %q; want them all", meta.LenList(list), lm.GetContinue())
	}
}

// TestWatchCacheSizesRejected: a resource without storage of its own, or
// none at all, is an error rather than a setting silently ignored.
func TestWatchCacheSizesRejected(t *testing.T) {
	client := clientv3.NewCtxClient(context.Background())
	defer client.Close()
	for _, tt := range []struct {
		gr   schema.GroupResource
		want string
	}{
		{schema.GroupResource{Resource: "nodez"}, "no stored resource nodez"},
		{schema.GroupResource{Group: "events.k8s.io", Resource: "events"}, "events.events.k8s.io is stored as events: name that one"},
		{schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "no stored resource subjectaccessreviews.authorization.k8s.io"},
	} {
		st, err := store.New(store.Config{Client: client, KV: pb.NewKVClient(nil), Scheme: registry.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		_, err = apiserver.New(apiserver.Config{Store: st, Authenticator: auth.NewTokens(), WatchCacheSizes: map[schema.GroupResource]int{tt.gr: 0}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.gr, err, tt.want)
		}
	}
}
