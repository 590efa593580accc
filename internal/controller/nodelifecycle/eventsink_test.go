package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	testingclock "k8s.io/utils/clock/testing"
)

// blockingSink holds every write until release is closed, telling entered
// about each.
type blockingSink struct {
	writes  atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (s *blockingSink) wait(ev *eventsv1.Event) (*eventsv1.Event, error) {
	s.writes.Add(1)
	s.entered <- struct{}{}
	<-s.release
	return ev, nil
}

func (s *blockingSink) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.wait(ev)
}

func (s *blockingSink) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.wait(ev)
}

func (s *blockingSink) Patch(_ context.Context, ev *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	return s.wait(ev)
}

func TestBoundedSinkDropsBeyondItsSize(t *testing.T) {
	inner := &blockingSink{entered: make(chan struct{}, 8), release: make(chan struct{})}
	var dropped atomic.Uint64
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := newBoundedSink(inner, 2, &eventDrops{n: &dropped, log: slog.New(slog.DiscardHandler), clock: clk})
	ctx := context.Background()

	done := make(chan struct{})
	for range 2 {
		go func() {
			s.Create(ctx, &eventsv1.Event{Reason: "RegisteredNode"})
			done <- struct{}{}
		}()
	}
	<-inner.entered
	<-inner.entered
	// Both slots are taken: the next writes are dropped at once, reported
	// as written, and never reach the inner sink.
	ev := &eventsv1.Event{Reason: "NodeNotReady"}
	if got, err := s.Create(ctx, ev); got != ev || err != nil {
		t.Fatalf("Create when full = %v, %v; want the event, nil", got, err)
	}
	if _, err := s.Patch(ctx, ev, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got := dropped.Load(); got != 3 {
		t.Errorf("dropped = %d, want 3", got)
	}
	if got := inner.writes.Load(); got != 2 {
		t.Errorf("inner writes = %d, want 2", got)
	}

	// Once the writes finish, the slots are free again.
	close(inner.release)
	<-done
	<-done
	if _, err := s.Create(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if got := inner.writes.Load(); got != 3 {
		t.Errorf("inner writes after release = %d, want 3", got)
	}
}

// TestEventLimit: beyond a burst, events are dropped and counted before
// they reach the recorder (and client-go's cache of recent events behind
// it), until time refills the bucket.
func TestEventLimit(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	rec := &recorder{}
	c := &Controller{recorder: rec, clock: clk, log: testLogger(t)}
	c.drops = &eventDrops{n: &c.droppedEvents, log: c.log, clock: clk}
	c.eventLimit = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(eventQPS, eventBurst, clk)
	record := func(n int) {
		for i := range n {
			c.event(fmt.Sprint("node-", i), types.UID(fmt.Sprint("uid-", i)), EventRegisteredNode, "Register", "Node %s is monitored", "x")
		}
	}
	check := func(when string, recorded int, dropped uint64) {
		t.Helper()
		if got := len(rec.all()); got != recorded {
			t.Errorf("%s: %d events recorded, want %d", when, got, recorded)
		}
		if got := c.droppedEvents.Load(); got != dropped {
			t.Errorf("%s: %d events dropped, want %d", when, got, dropped)
		}
	}
	record(eventBurst + 500)
	check("after a burst", eventBurst, 500)
	clk.Step(time.Second)
	record(2 * eventQPS)
	check("a second later", eventBurst+eventQPS, 500+eventQPS)
}

// failingSink fails every write with err, or with its ctx's error once
// that has ended.
type failingSink struct{ err error }

func (s failingSink) fail(ctx context.Context) (*eventsv1.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, s.err
}

func (s failingSink) Create(ctx context.Context, _ *eventsv1.Event) (*eventsv1.Event, error) {
	return s.fail(ctx)
}

func (s failingSink) Update(ctx context.Context, _ *eventsv1.Event) (*eventsv1.Event, error) {
	return s.fail(ctx)
}

func (s failingSink) Patch(ctx context.Context, _ *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	return s.fail(ctx)
}

// TestBoundedSinkDropsWhatTheTermEnds: a write that fails while the term
// (the broadcaster's ctx) goes on is an error, for the broadcaster to retry;
// once the term has ended, it is dropped, counted and reported as written,
// so that the broadcaster logs no error about a retry that will not come.
func TestBoundedSinkDropsWhatTheTermEnds(t *testing.T) {
	var dropped atomic.Uint64
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	unavailable := errors.New("etcd does not answer")
	s := newBoundedSink(failingSink{unavailable}, 2, &eventDrops{n: &dropped, log: slog.New(slog.DiscardHandler), clock: clk})
	ev := &eventsv1.Event{Reason: "RegisteredNode"}

	term, end := context.WithCancel(context.Background())
	if _, err := s.Create(term, ev); !errors.Is(err, unavailable) {
		t.Errorf("Create in the term = %v, want %v", err, unavailable)
	}
	if got := dropped.Load(); got != 0 {
		t.Errorf("dropped in the term = %d, want 0", got)
	}
	end()
	if got, err := s.Create(term, ev); got != ev || err != nil {
		t.Errorf("Create after the term = %v, %v; want the event, nil", got, err)
	}
	if _, err := s.Update(term, ev); err != nil {
		t.Errorf("Update after the term = %v, want nil", err)
	}
	if _, err := s.Patch(term, ev, nil); err != nil {
		t.Errorf("Patch after the term = %v, want nil", err)
	}
	if got := dropped.Load(); got != 3 {
		t.Errorf("dropped after the term = %d, want 3", got)
	}
}
