package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestScheduleOffsets(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		interval time.Duration
		want     []time.Duration
	}{
		{"one", 1, 10 * time.Second, []time.Duration{0}},
		{"four", 4, 10 * time.Second, []time.Duration{0, 2500 * time.Millisecond, 5 * time.Second, 7500 * time.Millisecond}},
		{"three", 3, time.Second, []time.Duration{0, 333333333, 666666666}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := schedule{n: tt.n, interval: tt.interval}
			for i, want := range tt.want {
				if got := s.offset(i); got != want {
					t.Errorf("offset(%d) = %v, want %v", i, got, want)
				}
			}
		})
	}
}

// TestScheduleSpreadsLoad checks that n agents offer n/interval renewals in
// every slice of time, with and without jitter.
func TestScheduleSpreadsLoad(t *testing.T) {
	for _, tt := range []struct {
		name   string
		n      int
		jitter float64
		r      func(i int, k int64) float64
		slack  int
	}{
		{"no jitter", 1000, 0, func(int, int64) float64 { return 0 }, 0},
		{"max jitter", 1000, 0.04, func(int, int64) float64 { return 0.999999 }, 1},
		{"mixed jitter", 10000, 0.04, func(i int, k int64) float64 { return float64((i*7+int(k)*13)%100) / 100 }, 40},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			interval := 10 * time.Second
			s := schedule{start: start, n: tt.n, interval: interval, jitter: tt.jitter}
			// Count renewals per second over seconds 10..40 (after every
			// agent has started, before the last slot counted ends).
			counts := make(map[int64]int)
			for i := 0; i < tt.n; i++ {
				for k := int64(0); k < 6; k++ {
					sec := int64(s.due(i, k, tt.r(i, k)).Sub(start) / time.Second)
					counts[sec]++
				}
			}
			want := tt.n / 10
			for sec := int64(10); sec < 50; sec++ {
				if got := counts[sec]; got < want-tt.slack || got > want+tt.slack {
					t.Errorf("second %d: %d renewals, want %d±%d", sec, got, want, tt.slack)
				}
			}
		})
	}
}

func TestScheduleNext(t *testing.T) {
	start := time.Unix(0, 0)
	s := schedule{start: start, n: 10, interval: 10 * time.Second}
	// Agent 5 sits at +5s in every interval.
	tests := []struct {
		name       string
		k          int64
		now        time.Duration
		wantSlot   int64
		wantMissed int64
	}{
		{"on time", 0, 5*time.Second + 10*time.Millisecond, 1, 0},
		{"slow but within the interval", 0, 14 * time.Second, 1, 0},
		{"just into the next slot", 0, 15 * time.Second, 1, 0},
		{"one slot missed", 0, 25 * time.Second, 2, 1},
		{"three missed", 2, 65 * time.Second, 6, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot, missed := s.next(5, tt.k, start.Add(tt.now))
			if slot != tt.wantSlot || missed != tt.wantMissed {
				t.Errorf("next(5, %d, +%v) = %d, %d; want %d, %d", tt.k, tt.now, slot, missed, tt.wantSlot, tt.wantMissed)
			}
		})
	}
	if got := s.slot(5, start.Add(time.Second)); got != -1 {
		t.Errorf("slot before the first = %d, want -1", got)
	}
}

func TestDueQueueOrder(t *testing.T) {
	tests := []struct {
		name string
		dues []time.Duration
	}{
		{"ascending", []time.Duration{1, 2, 3, 4, 5}},
		{"descending", []time.Duration{9, 7, 5, 3, 1}},
		{"duplicates", []time.Duration{4, 1, 4, 1, 2, 2}},
		{"mixed", []time.Duration{50, 3, 77, 12, 0, 99, 41, 8, 8, 63, 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var q dueQueue
			for i, d := range tt.dues {
				q.push(dueItem{due: d, i: int32(i)})
			}
			want := slices.Clone(tt.dues)
			slices.Sort(want)
			var got []time.Duration
			for len(q) > 0 {
				got = append(got, q.pop().due)
			}
			if !slices.Equal(got, want) {
				t.Errorf("popped %v, want %v", got, want)
			}
		})
	}
}

// passLog records the passes a dispatcher runs.
type passLog struct {
	mu   sync.Mutex
	runs []string // "agent@offset"
}

func (l *passLog) add(i int, at time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, fmt.Sprintf("%d@%v", i, at))
}

func (l *passLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.runs
	l.runs = nil
	slices.Sort(out)
	return out
}

// startDispatcher runs a dispatcher on a fake clock until the test ends.
func startDispatcher(t *testing.T, clk *clocktesting.FakeClock, quantum time.Duration, maxIdle, maxWorkers int, pass func(ctx context.Context, i int)) *dispatcher {
	d := newDispatcher(clk, clk.Now(), quantum, maxIdle, maxWorkers, pass)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d
}

func TestDispatcherRunsPassesWhenDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		var log passLog
		d := startDispatcher(t, clk, 0, 4, 100, func(_ context.Context, i int) { log.add(i, clk.Since(origin)) })
		d.at(0, origin.Add(3*time.Second))
		d.at(1, origin.Add(time.Second))
		d.at(2, origin.Add(2*time.Second))
		d.at(3, origin.Add(time.Second))
		d.at(4, origin.Add(-time.Second)) // overdue: at once
		steps := []struct {
			step time.Duration
			want []string
		}{
			{0, []string{"4@0s"}},
			{999 * time.Millisecond, nil},
			{time.Millisecond, []string{"1@1s", "3@1s"}},
			{time.Second, []string{"2@2s"}},
			{500 * time.Millisecond, nil},
			{500 * time.Millisecond, []string{"0@3s"}},
			{time.Hour, nil},
		}
		for _, s := range steps {
			clk.Step(s.step)
			synctest.Wait()
			if got := log.take(); !slices.Equal(got, s.want) {
				t.Errorf("after %v: ran %v, want %v", clk.Since(origin), got, s.want)
			}
		}
		if got := d.queued(); got != 0 {
			t.Errorf("%d passes still queued", got)
		}
	})
}

// TestDispatcherQuantum checks that passes due within a quantum of the last
// hand-out wait for the quantum's end, and that none runs early.
func TestDispatcherQuantum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		var log passLog
		d := startDispatcher(t, clk, 10*time.Millisecond, 4, 100, func(_ context.Context, i int) { log.add(i, clk.Since(origin)) })
		for i, at := range []time.Duration{0, 2, 9, 10, 25, 31} {
			d.at(i, origin.Add(at*time.Millisecond))
		}
		steps := []struct {
			step time.Duration
			want []string
		}{
			{0, []string{"0@0s"}},
			{2 * time.Millisecond, nil},
			{7 * time.Millisecond, nil},
			{time.Millisecond, []string{"1@10ms", "2@10ms", "3@10ms"}},
			{15 * time.Millisecond, []string{"4@25ms"}},
			{6 * time.Millisecond, nil},
			{4 * time.Millisecond, []string{"5@35ms"}},
		}
		for _, s := range steps {
			clk.Step(s.step)
			synctest.Wait()
			if got := log.take(); !slices.Equal(got, s.want) {
				t.Errorf("after %v: ran %v, want %v", clk.Since(origin), got, s.want)
			}
		}
	})
}

func TestDispatcherEarlierPassWakesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		var log passLog
		d := startDispatcher(t, clk, 0, 4, 100, func(_ context.Context, i int) { log.add(i, clk.Since(origin)) })
		d.at(0, origin.Add(10*time.Second))
		synctest.Wait() // asleep until +10s
		d.at(1, origin.Add(time.Second))
		synctest.Wait()
		clk.Step(time.Second)
		synctest.Wait()
		if got, want := log.take(), []string{"1@1s"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
		clk.Step(9 * time.Second)
		synctest.Wait()
		if got, want := log.take(), []string{"0@10s"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
	})
}

// TestDispatcherRequeue has each pass queue the agent again one interval
// later, as the fleet's passes do, and checks that one worker serves them
// all while they are quick.
func TestDispatcherRequeue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		const agents, interval = 10, time.Second
		counts := make([]int, agents)
		var d *dispatcher
		d = startDispatcher(t, clk, 0, 4, 100, func(_ context.Context, i int) {
			counts[i]++
			d.at(i, clk.Now().Add(interval))
		})
		for i := range agents {
			d.at(i, origin.Add(time.Duration(i)*interval/agents))
		}
		synctest.Wait()
		for range 50 {
			clk.Step(interval / agents)
			synctest.Wait()
		}
		// Over 5s each agent ran at its offset and every second after:
		// agent 0 at 0s … 5s, agent i at i/10 s … 4 + i/10 s.
		for i, n := range counts {
			want := 5
			if i == 0 {
				want = 6
			}
			if n != want {
				t.Errorf("agent %d ran %d times, want %d", i, n, want)
			}
		}
		if got := d.started.Load(); got != 1 {
			t.Errorf("%d workers started, want 1 for passes that never overlap", got)
		}
	})
}

// TestDispatcherSlowPasses checks that a pass never waits for another: five
// passes blocked at once take five workers, and once they are released no
// more than maxIdle stay.
func TestDispatcherSlowPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		release := make(chan struct{})
		var log passLog
		d := startDispatcher(t, clk, 0, 2, 100, func(ctx context.Context, i int) {
			log.add(i, clk.Since(origin))
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		for i := range 5 {
			d.at(i, origin.Add(time.Duration(i)*time.Second))
		}
		// Each step only once the dispatcher sleeps on its timer: one that
		// read the time before a step would make its timer after it, a
		// step late.
		synctest.Wait()
		for range 4 {
			clk.Step(time.Second)
			synctest.Wait()
		}
		if got, want := log.take(), []string{"0@0s", "1@1s", "2@2s", "3@3s", "4@4s"}; len(got) != len(want) {
			t.Errorf("ran %v, want %v", got, want)
		}
		if got := d.workers.Load(); got != 5 {
			t.Errorf("%d workers running, want 5", got)
		}
		close(release)
		synctest.Wait()
		if got := d.workers.Load(); got != 2 {
			t.Errorf("%d workers left, want maxIdle = 2", got)
		}
	})
}

// TestDispatcherMaxWorkers checks that no more than maxWorkers passes run
// at once, and that the passes held back run, in order, as workers free up.
func TestDispatcherMaxWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		release := make(chan struct{})
		var log passLog
		d := startDispatcher(t, clk, 0, 3, 3, func(ctx context.Context, i int) {
			log.add(i, 0)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		for i := range 5 {
			d.at(i, origin.Add(time.Duration(i)*time.Millisecond))
		}
		// The step only once the dispatcher sleeps on its timer: one that
		// read the time before it would set its timer past it.
		synctest.Wait()
		clk.Step(10 * time.Millisecond)
		synctest.Wait()
		if got, want := log.take(), []string{"0@0s", "1@0s", "2@0s"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
		if got := d.workers.Load(); got != 3 {
			t.Errorf("%d workers, want 3", got)
		}
		release <- struct{}{}
		synctest.Wait()
		if got, want := log.take(), []string{"3@0s"}; !slices.Equal(got, want) {
			t.Errorf("after one finished: ran %v, want %v", got, want)
		}
		close(release)
		synctest.Wait()
		if got, want := log.take(), []string{"4@0s"}; !slices.Equal(got, want) {
			t.Errorf("after all finished: ran %v, want %v", got, want)
		}
	})
}

// TestDispatcherStops checks that run returns, with every worker, when its
// context ends, even with a pass under way.
func TestDispatcherStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Unix(1000, 0)
		clk := clocktesting.NewFakeClock(origin)
		d := newDispatcher(clk, origin, 0, 4, 100, func(ctx context.Context, i int) { <-ctx.Done() })
		d.at(0, origin)
		d.at(1, origin.Add(time.Hour))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { d.run(ctx); close(done) }()
		synctest.Wait()
		if got := d.workers.Load(); got != 1 {
			t.Fatalf("%d workers, want 1", got)
		}
		cancel()
		<-done
		if got := d.workers.Load(); got != 0 {
			t.Errorf("%d workers left after run returned", got)
		}
	})
}
