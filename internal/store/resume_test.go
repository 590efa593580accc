package store

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestCacheBacksOffWhileEtcdRefusesWatches: while etcd refuses watches
// (as it does at once, to a watch that requires a leader, while it has
// none), the watch cache waits longer before each new one, from 100 ms up
// to 2 s, and logs one warning for the outage, not one per attempt; CutOff
// tells since when. Once
// etcd makes a watch again it logs the recovery, and the next failure
// starts from 100 ms again.
func TestCacheBacksOffWhileEtcdRefusesWatches(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rec := &afterRecorder{WithTicker: clk, afters: make(chan time.Duration, 100)}
	refuse := &refusingWatcher{}
	var logs syncbuf.Buffer
	s, k, ctx := runLeaseStore(t, "backoffleases", Config{Clock: clk}, func(k *Kind) {
		refuse.Watcher = k.s.client.Watcher
		k.s.client.Watcher = refuse
		k.cache.clock = rec
		k.cache.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	// until polls cond, with a minute's deadline, while the cache runs on
	// its own goroutine.
	until := func(cond func() bool, what func() string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); {
			if time.Now().After(deadline) {
				t.Fatal(what())
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	waitLog := func(what string) {
		t.Helper()
		until(func() bool { return strings.Contains(logs.String(), what) },
			func() string { return fmt.Sprintf("no %q in the log:\n%s", what, logs.String()) })
	}
	// outage ends the open watch and has etcd refuse the next ones: each
	// of want is a wait after a failure, the first after the watch's end.
	outage := func(want ...time.Duration) {
		t.Helper()
		failures := len(want)
		cut := clk.Now()
		// A watch must be open for its end to be the first failure.
		until(refuse.open, func() string { return "no watch open before the outage" })
		refuse.refuse(failures - 1)
		var total time.Duration
		for i, base := range want {
			var d time.Duration
			select {
			case d = <-rec.afters:
			case <-time.After(time.Minute):
				t.Fatalf("no wait after failure %d", i+1)
			}
			if d < base || d > base+base/10 {
				t.Errorf("wait %d after a failed watch: %v, want %v and at most a tenth more", i+1, d, base)
			}
			if got := k.CutOff(); !got.Equal(cut) {
				t.Errorf("CutOff() = %v after failure %d, want %v, the first's time", got, i+1, cut)
			}
			total += d
			clk.Step(d)
		}
		waitLog("etcd answers again")
		if got := k.CutOff(); !got.IsZero() {
			t.Errorf("CutOff() = %v once etcd answers again, want zero", got)
		}
		got := logs.Take()
		if n := strings.Count(got, "level=WARN msg=\"watch cache: etcd watch ended; resuming\""); n != 1 {
			t.Errorf("%d warnings for an outage, want 1:\n%s", n, got)
		}
		if n := strings.Count(got, "level=DEBUG msg=\"watch cache: etcd watch ended; resuming\""); n != failures-1 {
			t.Errorf("%d debug lines, want %d:\n%s", n, failures-1, got)
		}
		if want := "failures=" + strconv.Itoa(failures) + " after=" + total.Round(time.Millisecond).String(); !strings.Contains(got, want) {
			t.Errorf("the recovery's line does not say %q:\n%s", want, got)
		}
	}
	ms := time.Millisecond
	outage(100*ms, 200*ms, 400*ms, 800*ms, 1600*ms, 2000*ms, 2000*ms)
	outage(100*ms, 200*ms)
	if refuse.made() != 2 {
		t.Errorf("%d watches made after the first, want 2 (one after each outage)", refuse.made())
	}
}

// afterRecorder is a clock that sends every duration asked of After to
// afters.
type afterRecorder struct {
	clock.WithTicker
	afters chan time.Duration
}

// After sets the timer before it tells the test, which may step the clock
// as soon as it knows the duration.
func (r *afterRecorder) After(d time.Duration) <-chan time.Time {
	ch := r.WithTicker.After(d)
	r.afters <- d
	return ch
}

// refusingWatcher is an etcd Watcher that a test can make refuse the next
// n watches, each of which then ends at once, as one made while etcd has
// no leader does; refuse also ends the open watches.
type refusingWatcher struct {
	clientv3.Watcher

	mu      sync.Mutex
	cancels []context.CancelFunc
	left    int
	ok      int // watches made since the first refusal
}

func (w *refusingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.left > 0 {
		w.left--
		ch := make(chan clientv3.WatchResponse)
		close(ch)
		return ch
	}
	if w.cancels != nil {
		w.ok++
	}
	ctx, cancel := context.WithCancel(ctx)
	w.cancels = append(w.cancels, cancel)
	return w.Watcher.Watch(ctx, key, opts...)
}

func (w *refusingWatcher) refuse(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.left = n
	for _, cancel := range w.cancels {
		cancel()
	}
	w.cancels = []context.CancelFunc{}
}

// open tells whether a watch made through w is open (not ended by refuse).
func (w *refusingWatcher) open() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cancels) > 0
}

func (w *refusingWatcher) made() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ok
}
