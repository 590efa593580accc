package store

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leasehold/leasehold/internal/registry"
	"github.com/leasehold/leasehold/internal/store/embedded"
)

// compactionTest runs compactLoop alone, on a fresh embedded etcd and a
// fake clock, and follows its wakes.
type compactionTest struct {
	t     *testing.T
	s     *Store
	c     *clientv3.Client
	clk   *clocktesting.FakeClock
	steps chan string
	puts  int
}

func startCompaction(t *testing.T, cfg Config) *compactionTest {
	t.Helper()
	e, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ct := &compactionTest{t: t, c: e.Client(), clk: clocktesting.NewFakeClock(time.Unix(1e9, 0)), steps: make(chan string, 100)}
	cfg.Client, cfg.KV, cfg.Scheme, cfg.Clock = e.Client(), e.KV(), registry.Scheme, ct.clk
	cfg.Logger = slog.New(slog.DiscardHandler)
	if ct.s, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ct.s.compactStepped = func(trigger string) { ct.steps <- trigger }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ct.s.compactLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if got := ct.next(); got != "" {
		t.Fatalf("the loop's start: %q", got)
	}
	return ct
}

// next waits for the loop's next wake and returns what made it turn.
func (ct *compactionTest) next() string {
	ct.t.Helper()
	select {
	case trigger := <-ct.steps:
		return trigger
	case <-time.After(30 * time.Second):
		ct.t.Fatal("the compaction loop did not wake")
		return ""
	}
}

// step moves the clock by d and checks that the loop's next wake turns
// for want ("" for a wake without a turn).
func (ct *compactionTest) step(d time.Duration, want string) {
	ct.t.Helper()
	ct.clk.Step(d)
	if got := ct.next(); got != want {
		ct.t.Fatalf("after %v: woke for %q, want %q", d, got, want)
	}
}

// write makes n revisions.
func (ct *compactionTest) write(n int) {
	ct.t.Helper()
	for range n {
		ct.puts++
		if _, err := ct.c.Put(context.Background(), fmt.Sprintf("/test/k%d", ct.puts%7), "v"); err != nil {
			ct.t.Fatal(err)
		}
	}
}

// mark is the revision of the last turn's mark.
func (ct *compactionTest) mark() int64 {
	ct.t.Helper()
	resp, err := ct.c.Get(context.Background(), ct.s.compactKey())
	if err != nil || len(resp.Kvs) != 1 {
		ct.t.Fatalf("the compaction key: %v, %v", resp, err)
	}
	return resp.Kvs[0].ModRevision
}

// compacted is the revision etcd's history was last compacted to (0: never).
func (ct *compactionTest) compacted() int64 {
	ct.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for resp := range ct.c.Watch(ctx, "/test/", clientv3.WithPrefix(), clientv3.WithRev(1)) {
		return resp.CompactRevision
	}
	ct.t.Fatal("no watch response")
	return 0
}

// TestCompactionByRevisions: a turn comes as soon as the bound's worth of
// revisions has been written since the last mark, compacting to that mark;
// the interval then starts again from that turn, so the next turn by time
// comes a whole interval after it.
func TestCompactionByRevisions(t *testing.T) {
	byRevisions := compactions.WithLabelValues("revisions")
	byInterval := compactions.WithLabelValues("interval")
	before, beforeInterval := counterValue(t, byRevisions), counterValue(t, byInterval)
	// The checks come at 10, 20, 30, 40 s; the first interval would end at
	// 22 s had it not started again.
	ct := startCompaction(t, Config{CompactionInterval: 22 * time.Second, CompactionRevisions: 50, CompactionCheck: 10 * time.Second})

	ct.write(60)
	ct.step(10*time.Second, "revisions") // the first mark: nothing to compact to yet
	mark1 := ct.mark()
	if got := ct.compacted(); got != 0 {
		t.Fatalf("compacted to %d at the first turn", got)
	}
	ct.write(60)
	ct.step(10*time.Second, "revisions")
	mark2 := ct.mark()
	if got := ct.compacted(); got != mark1 {
		t.Fatalf("compacted to %d, want the first mark %d (the second is %d)", got, mark1, mark2)
	}
	if got := counterValue(t, byRevisions) - before; got != 1 {
		t.Fatalf("%v compactions by revisions counted, want 1", got)
	}

	// 25 s: past the first interval's end, but a new one began at 20 s.
	ct.clk.Step(5 * time.Second)
	ct.write(10)
	ct.step(5*time.Second, "") // 30 s: a check, 11 revisions since the mark
	if got := ct.compacted(); got != mark1 {
		t.Fatalf("compacted to %d before the interval ended", got)
	}
	// 42 s: the interval since 20 s ends (and the check of 40 s comes).
	ct.clk.Step(12 * time.Second)
	if a, b := ct.next(), ct.next(); a+b != "interval" {
		t.Fatalf("woke for %q and %q, want one turn for the interval", a, b)
	}
	if got := ct.compacted(); got != mark2 {
		t.Fatalf("compacted to %d, want the second mark %d", got, mark2)
	}
	if got := counterValue(t, byInterval) - beforeInterval; got != 1 {
		t.Fatalf("%v compactions by interval counted, want 1", got)
	}
}

// TestCompactionByInterval: with no bound on revisions only the interval
// turns, however much is written, as kube-apiserver's compactor does.
func TestCompactionByInterval(t *testing.T) {
	ct := startCompaction(t, Config{CompactionInterval: time.Minute, CompactionRevisions: -1})
	ct.write(200)
	ct.step(time.Minute, "interval")
	mark1 := ct.mark()
	if got := ct.compacted(); got != 0 {
		t.Fatalf("compacted to %d at the first turn", got)
	}
	ct.write(200)
	ct.step(time.Minute, "interval")
	if got := ct.compacted(); got != mark1 {
		t.Fatalf("compacted to %d, want the first mark %d", got, mark1)
	}
}

// TestCompactionShared: two servers on one etcd turn once between them
// for each bound reached, and each compaction goes to a mark at least the
// bound's worth of revisions old.
func TestCompactionShared(t *testing.T) {
	ct := startCompaction(t, Config{CompactionInterval: time.Hour, CompactionRevisions: 50, CompactionCheck: 10 * time.Second})
	other, err := New(Config{Client: ct.c, KV: ct.s.cfg.KV, Scheme: registry.Scheme, Clock: ct.clk,
		CompactionInterval: time.Hour, CompactionRevisions: 50, CompactionCheck: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	otherSteps := make(chan string, 100)
	other.compactStepped = func(trigger string) { otherSteps <- trigger }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { other.compactLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-otherSteps

	var marks []int64
	for turn := range 4 {
		ct.write(60)
		ct.clk.Step(10 * time.Second)
		// Both see the bound reached; one turns, the other follows it.
		if a, b := ct.next(), <-otherSteps; a != "revisions" || b != "revisions" {
			t.Fatalf("turn %d: woke for %q and %q", turn, a, b)
		}
		m := ct.mark()
		marks = append(marks, m)
		got := ct.compacted()
		if turn == 0 && got != 0 {
			t.Fatalf("compacted to %d at the first turn", got)
		}
		if turn > 0 && got != marks[turn-1] {
			t.Fatalf("turn %d compacted to %d, want the previous mark %d", turn, got, marks[turn-1])
		}
		if m-got < 50 && got != 0 {
			t.Fatalf("turn %d kept %d revisions, fewer than the bound", turn, m-got)
		}
	}
}
