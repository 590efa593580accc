package bench

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// schedule places the renewals of n agents on a grid over the interval:
// agent i renews for the k-th time at
//
//	start + i·interval/n + k·interval + jitter,  0 ≤ jitter < Jitter·interval
//
// so that at any moment the fleet offers n/interval renewals per second,
// evenly spread, whatever n is. (The agent itself waits the interval plus up
// to 4% after each pass; the grid keeps the same jitter without the drift,
// so that runs at different sizes offer exactly the load they name.)
type schedule struct {
	start    time.Time
	n        int
	interval time.Duration
	jitter   float64 // fraction of the interval
}

// offset is where agent i's first renewal sits in the interval.
func (s schedule) offset(i int) time.Duration {
	if s.n <= 0 {
		return 0
	}
	return time.Duration(int64(s.interval) * int64(i) / int64(s.n))
}

// due is the time of agent i's k-th renewal; r in [0, 1) draws the jitter.
func (s schedule) due(i int, k int64, r float64) time.Time {
	j := time.Duration(r * s.jitter * float64(s.interval))
	return s.start.Add(s.offset(i) + time.Duration(k)*s.interval + j)
}

// slot is the number of agent i's latest grid slot at or before now
// (jitter aside), or -1 before its first one.
func (s schedule) slot(i int, now time.Time) int64 {
	d := now.Sub(s.start) - s.offset(i)
	if d < 0 {
		return -1
	}
	return int64(d / s.interval)
}

// next returns the slot to renew in after a renewal in slot k that ended at
// now: k+1, or the current slot when the agent has fallen behind (a renewal
// that took longer than the interval). It never catches up with a burst;
// missed counts the slots skipped.
func (s schedule) next(i int, k int64, now time.Time) (slot int64, missed int64) {
	cur := s.slot(i, now)
	if cur > k+1 {
		return cur, cur - k - 1
	}
	return k + 1, 0
}

// dispatcher runs the passes of many agents, each when it falls due, on a
// small set of worker goroutines instead of one goroutine and one timer per
// agent.
//
// Model: the due passes wait in one queue ordered by time (a binary heap of
// agent numbers). One goroutine, in run, sleeps on a single timer until the
// earliest is due, but never sooner than a quantum after its last waking,
// takes every pass due by then off the queue and hands each
// to an idle worker, or starts a worker when none is idle, so a pass is
// not held back by the others: when the server is slow the passes under
// way pile up, as the requests of that many real agents would, up to
// maxWorkers at once; beyond that the dispatcher waits for a worker, and
// the passes it holds start late (and count their missed slots), so that
// an overloaded server cannot make the load generator's memory grow
// without bound. A worker
// runs the pass, which puts the agent back in the queue (at its next slot,
// or after a backoff) through at, then waits for the next; beyond maxIdle
// idle workers it ends, so a burst of slow passes leaves no crowd of
// goroutines behind. The quantum gathers the passes due close together into
// one waking of the dispatcher and one burst of workers, which costs far
// less CPU than a thread woken for every pass; a pass starts up to a quantum
// late (a few milliseconds, against a jitter of 4% of the interval) and
// never early. Everything ends when run's context does: run returns
// once the last worker has finished its pass.
type dispatcher struct {
	clk     clock.Clock
	origin  time.Time // due times are kept as offsets from it
	quantum time.Duration
	maxIdle int32
	maxWork int32
	pass    func(ctx context.Context, i int)

	mu   sync.Mutex
	q    dueQueue
	wake chan struct{} // an earlier pass was queued

	work    chan int // to an idle worker
	idle    atomic.Int32
	workers atomic.Int32 // running
	started atomic.Int64 // ever
}

// newDispatcher returns a dispatcher running pass(ctx, i) for agent i when
// due, waking at most once per quantum, on at most maxWorkers workers of
// which it keeps maxIdle idle. Passes due before origin run at once.
func newDispatcher(clk clock.Clock, origin time.Time, quantum time.Duration, maxIdle, maxWorkers int, pass func(ctx context.Context, i int)) *dispatcher {
	maxWorkers = max(maxWorkers, 1)
	return &dispatcher{
		clk: clk, origin: origin, quantum: quantum, pass: pass,
		maxIdle: int32(min(max(maxIdle, 1), maxWorkers)), maxWork: int32(maxWorkers),
		wake: make(chan struct{}, 1), work: make(chan int),
	}
}

// at queues agent i's next pass for t. It is safe from any goroutine; an
// agent must be queued at most once at a time.
func (d *dispatcher) at(i int, t time.Time) {
	due := t.Sub(d.origin)
	d.mu.Lock()
	first := len(d.q) == 0 || due < d.q[0].due
	d.q.push(dueItem{due: due, i: int32(i)})
	d.mu.Unlock()
	if first {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// queued is the number of passes waiting for their time.
func (d *dispatcher) queued() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.q)
}

// run hands out the passes as they fall due until ctx ends, then waits for
// the workers.
func (d *dispatcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var due []int
	woke := time.Duration(math.MinInt64) // when passes were last handed out
	for ctx.Err() == nil {
		now := d.clk.Now().Sub(d.origin)
		d.mu.Lock()
		due = due[:0]
		for len(d.q) > 0 && d.q[0].due <= now && now >= woke+d.quantum {
			due = append(due, int(d.q.pop().i))
		}
		next, waiting := time.Duration(0), len(d.q) > 0
		if waiting {
			next = d.q[0].due
		}
		d.mu.Unlock()
		if len(due) > 0 {
			woke = now
			for _, i := range due {
				select {
				case d.work <- i:
					continue
				default:
				}
				if d.workers.Load() < d.maxWork {
					d.workers.Add(1)
					d.started.Add(1)
					wg.Go(func() { d.worker(ctx, i) })
					continue
				}
				select {
				case d.work <- i:
				case <-ctx.Done():
					return
				}
			}
			continue // time has passed meanwhile
		}
		var fired <-chan time.Time
		if waiting {
			wait := max(next, woke+d.quantum) - now
			if timer == nil {
				timer = d.clk.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fired = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-fired:
		case <-d.wake:
			// Stop the timer and drain it, so that Reset finds it idle.
			if timer != nil && !timer.Stop() {
				select {
				case <-timer.C():
				default:
				}
			}
		}
	}
}

// worker runs agent i's pass, then the passes handed to it while it is
// idle, until ctx ends or enough others are idle.
func (d *dispatcher) worker(ctx context.Context, i int) {
	defer d.workers.Add(-1)
	for {
		d.pass(ctx, i)
		if d.idle.Add(1) > d.maxIdle {
			d.idle.Add(-1)
			return
		}
		select {
		case i = <-d.work:
			d.idle.Add(-1)
		case <-ctx.Done():
			d.idle.Add(-1)
			return
		}
	}
}

// dueItem is agent i's pass, due at origin + due.
type dueItem struct {
	due time.Duration
	i   int32
}

// dueQueue is a binary min-heap of passes by due time (container/heap
// would box every item in an interface).
type dueQueue []dueItem

func (q *dueQueue) push(it dueItem) {
	*q = append(*q, it)
	h := *q
	for j := len(h) - 1; j > 0; {
		parent := (j - 1) / 2
		if h[parent].due <= h[j].due {
			break
		}
		h[parent], h[j] = h[j], h[parent]
		j = parent
	}
}

func (q *dueQueue) pop() dueItem {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for j := 0; ; {
		l, r, least := 2*j+1, 2*j+2, j
		if l < len(h) && h[l].due < h[least].due {
			least = l
		}
		if r < len(h) && h[r].due < h[least].due {
			least = r
		}
		if least == j {
			break
		}
		h[j], h[least] = h[least], h[j]
		j = least
	}
	*q = h
	return top
}
