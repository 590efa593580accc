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

// boundedSink is an events.EventSink that writes at most cap(slots) events
// at once and drops the rest, counting them and warning at most once a
// minute.
type boundedSink struct {
	events.EventSink
	slots   chan struct{}
	dropped *atomic.Uint64
	log     *slog.Logger
	clock   clock.PassiveClock
	warned  atomic.Int64 // unix nanoseconds of the last warning
}

func newBoundedSink(inner events.EventSink, size int, dropped *atomic.Uint64, log *slog.Logger, clk clock.PassiveClock) *boundedSink {
	return &boundedSink{EventSink: inner, slots: make(chan struct{}, size), dropped: dropped, log: log, clock: clk}
}

// Create writes ev if a slot is free. A dropped event is reported as
// written: the broadcaster would otherwise retry it, or log it as an error.
func (s *boundedSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	if !s.acquire(ev) {
		return ev, nil
	}
	defer s.release()
	return s.EventSink.Create(ctx, ev)
}

// Update and Patch record repeats of an event (a series); bounded alike.
func (s *boundedSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	if !s.acquire(ev) {
		return ev, nil
	}
	defer s.release()
	return s.EventSink.Update(ctx, ev)
}

func (s *boundedSink) Patch(ctx context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	if !s.acquire(ev) {
		return ev, nil
	}
	defer s.release()
	return s.EventSink.Patch(ctx, ev, data)
}

func (s *boundedSink) acquire(ev *eventsv1.Event) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
	}
	n := s.dropped.Add(1)
	now := s.clock.Now().UnixNano()
	if last := s.warned.Load(); now-last >= int64(time.Minute) && s.warned.CompareAndSwap(last, now) {
		s.log.Warn("too many events waiting to be written; dropping events",
			"pending", cap(s.slots), "droppedTotal", n, "reason", ev.Reason, "regarding", ev.Regarding.Name)
	}
	return false
}

func (s *boundedSink) release() { <-s.slots }
