package bench

import "time"

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
