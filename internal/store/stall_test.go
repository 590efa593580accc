package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/syncbuf"
)

// TestStalledWatchCountsAsCutOff: a watch cache that does not see a write
// etcd acknowledged to this server counts as cut off from etcd once
// watchStall has passed without it (never sooner), as when the member
// holding its watch is frozen; CutOff then tells since when, as for a
// failed watch, and turns zero again once the cache has caught up. A quiet
// cache that has seen every write is never stalled, however long nothing
// changes.
func TestStalledWatchCountsAsCutOff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	gate := make(chan struct{})
	var logs syncbuf.Buffer
	s, k, ctx := runLeaseStore(t, "stalledleases", Config{Clock: clk}, func(k *Kind) {
		k.cache.applyGate = gate
		k.cache.log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	stalls := cacheStalls.WithLabelValues("coordination.k8s.io", "stalledleases")
	stallsBefore := counterValue(t, stalls)
	createLease(t, ctx, k, "held")

	// Step the clock a check at a time, giving the watchdog a moment to
	// take each tick, until the cache counts as stalled.
	start := clk.Now()
	var cut time.Time
	for cut.IsZero() {
		if elapsed := clk.Since(start); elapsed > 4*watchStall {
			t.Fatalf("not stalled after %v of a write the cache did not see", elapsed)
		}
		clk.Step(stallCheck)
		cut = pollCutOff(ctx, k, func(cut time.Time) bool { return !cut.IsZero() })
	}
	if elapsed := clk.Since(start); elapsed < watchStall {
		t.Errorf("stalled %v after the write, before watchStall (%v)", elapsed, watchStall)
	}
	if cut.Before(start) || clk.Since(cut) < watchStall {
		t.Errorf("CutOff() = %v: want when the write was first found unseen, at least watchStall (%v) before now %v", cut, watchStall, clk.Now())
	}
	if !strings.Contains(logs.String(), `level=WARN msg="watch cache: etcd's watch has not delivered a write etcd acknowledged`) {
		t.Errorf("no warning of the stall in the log:\n%s", logs.String())
	}
	if got := counterValue(t, stalls); got != stallsBefore+1 {
		t.Errorf("leasehold_watch_cache_stalls_total = %v, want one more than %v", got, stallsBefore)
	}

	close(gate) // the cache applies what it held
	for deadline := time.Now().Add(time.Minute); ; {
		clk.Step(stallCheck)
		if pollCutOff(ctx, k, time.Time.IsZero).IsZero() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CutOff() = %v a minute after the cache could catch up, want zero", k.CutOff())
		}
	}
	if !strings.Contains(logs.String(), `msg="watch cache: etcd's watch delivers again"`) {
		t.Errorf("no line of the recovery in the log:\n%s", logs.String())
	}

	// A write the cache sees, then nothing for many times watchStall.
	createLease(t, ctx, k, "seen")
	waitCaughtUp(t, ctx, k)
	for range 3 * watchStall / stallCheck {
		clk.Step(stallCheck)
		if cut := pollCutOff(ctx, k, func(cut time.Time) bool { return !cut.IsZero() }); !cut.IsZero() {
			t.Fatalf("CutOff() = %v with every write seen, want zero", cut)
		}
	}
}

// TestStalledWatchMoves: a cache whose etcd watch hangs, as one on a
// frozen member does, moves the caches' watches to a new stream once it
// counts as stalled, and follows etcd again through it: it sees the write
// it was missing, and CutOff turns zero.
func TestStalledWatchMoves(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	hang := &hangingWatcher{}
	var logs syncbuf.Buffer
	s, k, ctx := runLeaseStore(t, "movedleases", Config{Clock: clk}, func(k *Kind) {
		hang.Watcher = k.s.client.Watcher
		k.s.client.Watcher = hang
		k.cache.log = slog.New(slog.NewTextHandler(&logs, nil))
	})
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	createLease(t, ctx, k, "missed")
	start := clk.Now()
	for {
		if elapsed := clk.Since(start); elapsed > 10*watchStall {
			t.Fatalf("the cache did not catch up %v after the write:\n%s", elapsed, logs.String())
		}
		clk.Step(stallCheck)
		if poll(ctx, func() bool { return hang.moved() && k.CutOff().IsZero() }) {
			break
		}
	}
	waitCaughtUp(t, ctx, k)
	got, err := k.Get(ctx, k.Key(sampleLease().Namespace, "missed"))
	if err != nil || got == nil {
		t.Fatalf("the moved cache does not hold the write it missed: %v", err)
	}
	for _, line := range []string{
		`level=WARN msg="watch cache: etcd's watch has not delivered a write etcd acknowledged`,
		`msg="watch cache: moving the caches' etcd watches to a new stream" stream=1`,
		`msg="watch cache: etcd's watch delivers again"`,
	} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no %q in the log:\n%s", line, logs.String())
		}
	}
}

// hangingWatcher is an etcd Watcher whose watches on the caches' first
// stream deliver nothing until they end, as on a frozen member; on a later
// stream (watchContext) they are etcd's.
type hangingWatcher struct {
	clientv3.Watcher
	later atomic.Int64 // watches made on a later stream
}

func (w *hangingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get("leasehold-watch-stream")) > 0 {
		w.later.Add(1)
		return w.Watcher.Watch(ctx, key, opts...)
	}
	ch := make(chan clientv3.WatchResponse)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}

func (w *hangingWatcher) moved() bool { return w.later.Load() > 0 }

// createLease stores a lease named name through k.
func createLease(t *testing.T, ctx context.Context, k *Kind, name string) {
	t.Helper()
	l := sampleLease()
	l.Name, l.ManagedFields = name, nil
	if _, err := k.Create(ctx, k.Key(l.Namespace, l.Name), l, false); err != nil {
		t.Fatal(err)
	}
}

// waitCaughtUp waits until k's cache has reached every write acknowledged.
func waitCaughtUp(t *testing.T, ctx context.Context, k *Kind) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		k.cache.mu.RLock()
		rv := k.cache.rv
		k.cache.mu.RUnlock()
		if rv >= k.cache.acked.Load() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache stands at %d, short of %d, after a minute", rv, k.cache.acked.Load())
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// pollCutOff reads k.CutOff() until done says so (poll), and returns the
// last value read.
func pollCutOff(ctx context.Context, k *Kind, done func(time.Time) bool) time.Time {
	var cut time.Time
	poll(ctx, func() bool {
		cut = k.CutOff()
		return done(cut)
	})
	return cut
}

// poll calls cond for up to 50 ms of real time, while the cache's
// goroutines take a tick of the fake clock, until it is true, and
// returns its last result.
func poll(ctx context.Context, cond func() bool) bool {
	deadline := time.After(50 * time.Millisecond)
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			panic(fmt.Sprint("context ended: ", ctx.Err()))
		case <-deadline:
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
}
