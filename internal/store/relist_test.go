package store

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// TestCacheRelistsAfterCompactedWatch cuts the watch cache off from etcd's
// watches (as a lost connection, or a replica stopped for a while, does),
// changes and compacts etcd meanwhile, then lets it watch again: etcd
// answers that the revision it resumes from is compacted, and the cache
// must list again rather than keep what it had, and close its watchers,
// which missed the changes, so that their clients list again too.
func TestCacheRelistsAfterCompactedWatch(t *testing.T) {
	cut := &cuttableWatcher{}
	s, k, ctx := runLeaseStore(t, "relistleases", Config{}, func(k *Kind) {
		cut.Watcher = k.s.client.Watcher
		k.s.client.Watcher = cut
	})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	lease := func(name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	for _, name := range []string{"kept", "changed", "deleted"} {
		if _, err := k.Create(ctx, k.Key("default", name), lease(name, "a"), false); err != nil {
			t.Fatal(err)
		}
	}
	before, err := k.List(ctx, ListOptions{})
	if err != nil || len(before.Items) != 3 {
		t.Fatalf("list before the cut: %v, %v", before, err)
	}
	w, err := k.Watch(ctx, WatchOptions{ResourceVersion: strconv.FormatInt(before.ResourceVersion, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	cut.cut()
	if _, err := k.Update(ctx, k.Key("default", "changed"), UpdateOptions{}, func(cur runtime.Object) (runtime.Object, error) {
		l := cur.(*coordinationv1.Lease).DeepCopy()
		l.Spec.HolderIdentity = ptr.To("b")
		return l, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Delete(ctx, k.Key("default", "deleted"), false, nil); err != nil {
		t.Fatal(err)
	}
	created, err := k.Create(ctx, k.Key("default", "created"), lease("created", "c"), false)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := meta.Accessor(created)
	rev, err := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	fills := initializations(t, "relistleases")
	cut.mend()

	// A consistent list waits for the cache to reach etcd's revision.
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	after, err := k.List(lctx, ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holders := map[string]string{}
	for _, o := range after.Items {
		l := o.(*coordinationv1.Lease)
		holders[l.Name] = *l.Spec.HolderIdentity
	}
	if want := map[string]string{"kept": "a", "changed": "b", "created": "c"}; !maps.Equal(holders, want) {
		t.Errorf("the cache holds %v after watching again, want %v", holders, want)
	}
	if n := initializations(t, "relistleases") - fills; n != 1 {
		t.Errorf("%v fills after the compacted watch, want 1", n)
	}
	// The watcher from before the cut saw none of the changes: its events
	// end, with none of them.
	timeout := time.After(time.Minute)
	for open := true; open; {
		select {
		case ev, ok := <-w.Events:
			if ok && ev.RV > before.ResourceVersion {
				t.Errorf("the watcher from before the cut got an event of revision %d", ev.RV)
			}
			open = ok
		case <-timeout:
			t.Fatal("the watcher from before the cut is still open")
		}
	}
	// Its client, resuming from what it saw, is told to list again.
	if _, err := k.Watch(ctx, WatchOptions{ResourceVersion: strconv.FormatInt(before.ResourceVersion, 10)}); !errors.Is(err, ErrCompacted) {
		t.Errorf("a watch from revision %d after the relist: %v, want ErrCompacted", before.ResourceVersion, err)
	}
}

// cuttableWatcher is an etcd Watcher whose watches a test can cut: cut
// ends every open watch (its channel closes) and holds new ones until
// mend.
type cuttableWatcher struct {
	clientv3.Watcher

	mu      sync.Mutex
	cancels []context.CancelFunc
	held    chan struct{} // closed by mend; nil while not cut
}

func (w *cuttableWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.mu.Lock()
	held := w.held
	w.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	w.mu.Lock()
	w.cancels = append(w.cancels, cancel)
	w.mu.Unlock()
	return w.Watcher.Watch(ctx, key, opts...)
}

func (w *cuttableWatcher) cut() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = make(chan struct{})
	for _, cancel := range w.cancels {
		cancel()
	}
	w.cancels = nil
}

func (w *cuttableWatcher) mend() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.held)
	w.held = nil
}
