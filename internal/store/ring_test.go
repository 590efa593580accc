package store

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
	testingclock "k8s.io/utils/clock/testing"
)

// ringState is what the test reads of a cache's ring: its capacity, the
// revisions it holds, oldest first, and its window's start.
func ringState(c *cache) (capacity int, revs []int64, windowStart int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for i := range c.n {
		revs = append(revs, c.eventLocked(i).RV)
	}
	return len(c.ring), revs, c.windowStart
}

// TestRingFollowsRate: a ring starts at 100 events, doubles up to the
// configured size while it is full of events younger than eventFresh,
// and halves back (not below 100) once even its newest quarter is older;
// what a shrink drops moves the window's start, so that a watch from
// before it goes to etcd.
func TestRingFollowsRate(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := newCache(&Kind{resource: schema.GroupResource{Resource: "ringtest"}}, 800, clk, slog.New(slog.DiscardHandler))
	c.capacity = cacheCapacity.WithLabelValues("", "ringtest") // as Store.Run
	var rv int64
	push := func(n int, every time.Duration) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for range n {
			rv++
			clk.Step(every)
			c.pushLocked(&Event{RV: rv, at: clk.Now().UnixNano()})
		}
	}
	check := func(what string, wantCap int, wantFirst int64) {
		t.Helper()
		capacity, revs, start := ringState(c)
		if capacity != wantCap || revs[0] != wantFirst || revs[len(revs)-1] != rv || start != wantFirst-1 {
			t.Errorf("%s: capacity %d, revisions %d..%d, window from %d; want capacity %d, revisions %d..%d, window from %d",
				what, capacity, revs[0], revs[len(revs)-1], start, wantCap, wantFirst, rv, wantFirst-1)
		}
		for i := 1; i < len(revs); i++ {
			if revs[i] != revs[i-1]+1 {
				t.Fatalf("%s: revisions out of order: %v", what, revs)
			}
		}
	}
	// Store.Run exports a ring's first capacity; every resize, the next.
	metric := func(what string, want int) {
		t.Helper()
		if got := testutil.ToFloat64(cacheCapacity.WithLabelValues("", "ringtest")); got != float64(want) {
			t.Errorf("%s: capacity metric %v, want %d", what, got, want)
		}
	}

	// 10 events a second: 750 in eventFresh. Each time the ring is full
	// of younger events it doubles, up to 800; it never drops one.
	push(100, 100*time.Millisecond)
	check("100 events", 100, 1)
	push(100, 100*time.Millisecond)
	check("200 events", 200, 1)
	push(600, 100*time.Millisecond)
	check("800 events", 800, 1)
	metric("800 events", 800)
	// At the configured size, the oldest go.
	push(50, 100*time.Millisecond)
	check("850 events", 800, 51)

	// One event every 2 s: once the newest quarter (200 events) reaches
	// back past eventFresh, each event halves the ring, down to where it
	// no longer does: 100 events, 200 s.
	push(200, 2*time.Second)
	capacity, _, _ := ringState(c)
	if capacity != 100 {
		t.Errorf("after 200 slow events: capacity %d, want 100", capacity)
	}
	check("slow events", 100, rv-99)
	metric("slow events", 100)

	// A burst of fresh events grows it again, once its oldest event is
	// younger than eventFresh: the 38 slow events of the last 75 s and
	// the burst's 100 fit, none dropped since.
	push(100, 10*time.Millisecond)
	check("a burst", 200, rv-137)
	metric("a burst", 200)
}

// TestRingSmallerThanMinimum: a configured size under 100 is the ring's
// size, as before.
func TestRingSmallerThanMinimum(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCache(&Kind{resource: schema.GroupResource{Resource: "ringsmall"}}, 8, clk, slog.New(slog.DiscardHandler))
	c.capacity = cacheCapacity.WithLabelValues("", "ringsmall")
	c.mu.Lock()
	for rv := int64(1); rv <= 20; rv++ {
		clk.Step(time.Hour)
		c.pushLocked(&Event{RV: rv, at: clk.Now().UnixNano()})
	}
	c.mu.Unlock()
	if capacity, revs, start := ringState(c); capacity != 8 || revs[0] != 13 || start != 12 {
		t.Errorf("capacity %d, revisions %v, window from %d; want 8, 13..20, 12", capacity, revs, start)
	}
}
