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
	cfg.KV = e.KV()
	ct.start(cfg)
	return ct
}

// start runs a store of cfg on ct's etcd and clock, with ct's steps.
func (ct *compactionTest) start(cfg Config) {
	ct.t.Helper()
	cfg.Client, cfg.Scheme, cfg.Clock = ct.c, registry.Scheme, ct.clk
	cfg.Logger = slog.New(slog.DiscardHandler)
	var err error
	if ct.s, err = New(cfg); err != nil {
		ct.t.Fatal(err)
	}
	ct.run()
}

// run starts ct.s's group commit and compaction loop, and waits until the
// loop waits for its timers.
func (ct *compactionTest) run() {
	t := ct.t
	t.Helper()
	ct.s.compactStepped = func(trigger string) { ct.steps <- trigger }
	ctx, cancel := context.WithCancel(context.Background())
	batcher, done := make(chan struct{}), make(chan struct{})
	go func() { ct.s.batch.run(ctx); close(batcher) }()
	go func() { ct.s.compactLoop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; <-batcher })
	if got := ct.next(); got != "" {
		t.Fatalf("the loop's start: %q", got)
	}
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

// write makes n writes through the store's group commit, as its kinds do.
func (ct *compactionTest) write(n int) {
	ct.t.Helper()
	for range n {
		ct.puts++
		res := ct.s.batch.do(context.Background(), write{key: fmt.Sprintf("/test/k%d", ct.puts), created: true, value: []byte("v")})
		if res.err != nil || !res.succeeded {
			ct.t.Fatalf("write %d: %+v", ct.puts, res)
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

// TestCompactionByWrites: a turn comes as soon as the bound's worth of
// writes has been made since the last mark, compacting to that mark;
// the interval then starts again from that turn, so the next turn by time
// comes a whole interval after it.
func TestCompactionByWrites(t *testing.T) {
	byWrites := compactions.WithLabelValues("writes")
	byInterval := compactions.WithLabelValues("interval")
	before, beforeInterval := counterValue(t, byWrites), counterValue(t, byInterval)
	// The checks come at 10, 20, 30, 40 s; the first interval would end at
	// 22 s had it not started again.
	ct := startCompaction(t, Config{CompactionInterval: 22 * time.Second, CompactionWrites: 50, CompactionCheck: 10 * time.Second})

	ct.write(60)
	ct.step(10*time.Second, "writes") // the first mark: nothing to compact to yet
	mark1 := ct.mark()
	if got := ct.compacted(); got != 0 {
		t.Fatalf("compacted to %d at the first turn", got)
	}
	ct.write(60)
	ct.step(10*time.Second, "writes")
	mark2 := ct.mark()
	if got := ct.compacted(); got != mark1 {
		t.Fatalf("compacted to %d, want the first mark %d (the second is %d)", got, mark1, mark2)
	}
	if got := counterValue(t, byWrites) - before; got != 1 {
		t.Fatalf("%v compactions by writes counted, want 1", got)
	}

	// 25 s: past the first interval's end, but a new one began at 20 s.
	ct.clk.Step(5 * time.Second)
	ct.write(10)
	ct.step(5*time.Second, "") // 30 s: a check, 10 writes since the mark
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

// TestCompactionByInterval: with no bound on writes only the interval
// turns, however much is written, as kube-apiserver's compactor does.
func TestCompactionByInterval(t *testing.T) {
	ct := startCompaction(t, Config{CompactionInterval: time.Minute, CompactionWrites: -1})
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

// TestCompactionShared: two servers on one etcd, each counting its own
// writes. A turn of one that the other has not followed yet is followed,
// not repeated; a compaction goes to the mark of a turn at least the
// bound's worth of writes before.
func TestCompactionShared(t *testing.T) {
	cfg := Config{CompactionInterval: time.Hour, CompactionWrites: 50, CompactionCheck: 10 * time.Second}
	a := startCompaction(t, cfg)
	b := a.join(cfg)
	steps := func(wantA, wantB string) {
		t.Helper()
		a.clk.Step(10 * time.Second)
		if gotA, gotB := a.next(), b.next(); gotA != wantA || gotB != wantB {
			t.Fatalf("woke for %q and %q, want %q and %q", gotA, gotB, wantA, wantB)
		}
	}

	a.write(60)
	steps("writes", "") // a marks
	mark1 := a.mark()
	b.write(60)
	steps("", "writes") // b finds a's turn and follows it
	if got := a.mark(); got != mark1 {
		t.Fatalf("the mark moved from %d to %d: b turned again", mark1, got)
	}
	if got := a.compacted(); got != 0 {
		t.Fatalf("compacted to %d with one mark", got)
	}
	followed, err := a.c.Get(context.Background(), "/test/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	b.write(60)
	steps("", "writes") // b turns, compacting to where it followed a
	mark2 := a.mark()
	if got, want := a.compacted(), followed.Header.Revision; got != want {
		t.Fatalf("compacted to %d, want %d, where b followed a's turn", got, want)
	}
	if kept := mark2 - followed.Header.Revision; kept < 50 {
		t.Fatalf("kept %d revisions, fewer than the bound", kept)
	}
}

// join starts a second compaction loop, of a store of its own, on ct's
// etcd and clock.
func (ct *compactionTest) join(cfg Config) *compactionTest {
	t := ct.t
	t.Helper()
	o := &compactionTest{t: t, c: ct.c, clk: ct.clk, steps: make(chan string, 100), puts: 1 << 20}
	cfg.KV = ct.s.cfg.KV
	o.start(cfg)
	return o
}
