package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestWatchResumedAnywhere: while writers create, update and delete leases
// side by side (group commit puts their writes in shared etcd revisions),
// a watcher cuts its own watch at random moments, as a client's deadline
// or a broken connection would, and each time resumes from the last
// resourceVersion it saw. It sees every acknowledged write, and none twice.
func TestWatchResumedAnywhere(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	// JSON, client-go's default: events take longer to decode than in
	// protobuf, so cuts land inside a revision's events more often.
	cfg, err := s.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leases := cs.CoordinationV1().Leases("default")
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rvNumber := func(rv string) int64 {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			t.Errorf("resourceVersion %q: %v", rv, err)
		}
		return n
	}

	var mu sync.Mutex
	acked := map[string]bool{} // name@resourceVersion of every acknowledged put
	revisions := map[int64]int{}
	var last int64 // the highest resourceVersion acknowledged
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			var l *coordinationv1.Lease
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				var err error
				if l == nil || k%20 == 0 {
					if l != nil {
						if err := leases.Delete(ctx, l.Name, metav1.DeleteOptions{}); err != nil {
							t.Errorf("delete %s: %v", l.Name, err)
							return
						}
					}
					l, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w%d-%d", i, k)},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("0")}}, metav1.CreateOptions{})
				} else {
					l.Spec.HolderIdentity = ptr.To(strconv.Itoa(k))
					l, err = leases.Update(ctx, l, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
					return
				}
				rv := rvNumber(l.ResourceVersion)
				mu.Lock()
				acked[l.Name+"@"+l.ResourceVersion] = true
				revisions[rv/1000]++
				last = max(last, rv)
				mu.Unlock()
			}
		})
	}

	seen := map[string]int{}
	from, cuts := list.ResourceVersion, 0
	deadline := time.Now().Add(6 * time.Second)
	writing := true
	for {
		if writing && time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			writing = false
		}
		mu.Lock()
		done := !writing && rvNumber(from) >= last
		mu.Unlock()
		if done || t.Failed() {
			break
		}
		wctx, cut := context.WithTimeout(ctx, time.Duration(20+rand.IntN(200))*time.Millisecond)
		w, err := leases.Watch(wctx, metav1.ListOptions{ResourceVersion: from})
		if err != nil {
			cut()
			if ctx.Err() != nil {
				t.Fatalf("watching from %s: %v", from, err)
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				t.Fatalf("watch from %s: %v", from, ev.Object)
			}
			l := ev.Object.(*coordinationv1.Lease)
			if ev.Type != watch.Deleted {
				seen[l.Name+"@"+l.ResourceVersion]++
			}
			from = l.ResourceVersion
		}
		cut()
		cuts++
	}

	shared := 0
	for _, n := range revisions {
		if n > 1 {
			shared += n
		}
	}
	lost, twice := 0, 0
	for k := range acked {
		if seen[k] == 0 {
			lost++
		}
	}
	for _, n := range seen {
		twice += n - 1
	}
	t.Logf("%d acknowledged puts, %d of them in shared revisions; the watch cut %d times; %d never seen, %d seen twice", len(acked), shared, cuts, lost, twice)
	if shared == 0 {
		t.Error("no two writes shared a revision: nothing was tested")
	}
	if lost > 0 || twice > 0 {
		t.Errorf("%d acknowledged puts never seen, %d seen twice: want none", lost, twice)
	}
}
