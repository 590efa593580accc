package nodelifecycle

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
)

// maxPendingEvents bounds the events being written at once. client-go's
// broadcaster starts one goroutine per event and waits in it for the
// client's rate limit, so a fleet registering 100 000 nodes would otherwise
// hold 100 000 RegisteredNode events, with their goroutines, in memory.
// Events are best effort in Kubernetes too: beyond the bound they are
// dropped and counted.
const maxPendingEvents = 256

// Events are admitted at most eventQPS a second on average, in bursts of up
// to eventBurst, before they reach client-go's broadcaster: it keeps every
// event it is handed for six minutes (to fold repeats into a series), even
// one the bounded sink then drops. At a term's start, RegisteredNode for
// each of 100 000 nodes would hold about 90 MiB there. The rate is about
// what the sink gets written through the controller's client.
const (
	eventQPS   = 100
	eventBurst = 1000
)

// eventDrops counts dropped events and warns of them at most once a minute.
type eventDrops struct {
	n      *atomic.Uint64
	log    *slog.Logger
	clock  clock.PassiveClock
	warned atomic.Int64 // unix nanoseconds of the last warning
}

func (d *eventDrops) drop(why, reason, regarding string) {
	n := d.n.Add(1)
	now := d.clock.Now().UnixNano()
	if last := d.warned.Load(); now-last >= int64(time.Minute) && d.warned.CompareAndSwap(last, now) {
		d.log.Warn(why+"; dropping events", "droppedTotal", n, "reason", reason, "regarding", regarding)
	}
}

// boundedSink is an events.EventSink that writes at most cap(slots) events
// at once and drops the rest.
type boundedSink struct {
	events.EventSink
	slots chan struct{}
	drops *eventDrops
}

func newBoundedSink(inner events.EventSink, size int, drops *eventDrops) *boundedSink {
	return &boundedSink{EventSink: inner, slots: make(chan struct{}, size), drops: drops}
}

// Create writes ev if a slot is free. A dropped event is reported as
// written: the broadcaster would otherwise retry it, or log it as an error.
func (s *boundedSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, ev, func() (*eventsv1.Event, error) { return s.EventSink.Create(ctx, ev) })
}

// Update and Patch record repeats of an event (a series); bounded alike.
func (s *boundedSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, ev, func() (*eventsv1.Event, error) { return s.EventSink.Update(ctx, ev) })
}

func (s *boundedSink) Patch(ctx context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.write(ctx, ev, func() (*eventsv1.Event, error) { return s.EventSink.Patch(ctx, ev, data) })
}

// write runs f, the write of ev, in a slot, or drops ev when none is free.
// A write that fails once ctx, the broadcaster's (the controllers' term),
// has ended is dropped too: nothing retries it then, though the broadcaster
// would log it as an error it "may retry".
func (s *boundedSink) write(ctx context.Context, ev *eventsv1.Event, f func() (*eventsv1.Event, error)) (*eventsv1.Event, error) {
	if !s.acquire(ev) {
		return ev, nil
	}
	defer s.release()
	got, err := f()
	if err != nil && ctx.Err() != nil {
		s.drops.drop("the controllers' term ended before they were written", ev.Reason, ev.Regarding.Name)
		return ev, nil
	}
	return got, err
}

func (s *boundedSink) acquire(ev *eventsv1.Event) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	s.drops.drop("too many events waiting to be written", ev.Reason, ev.Regarding.Name)
	return false
}

func (s *boundedSink) release() { <-s.slots }
