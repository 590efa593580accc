package bench

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram is log-linear, in the manner of HDR histograms: values
// below 2^subBits nanoseconds get one bucket each, and every further power
// of two is cut into 2^(subBits-1) equal buckets, so a bucket is never wider
// than 1/2^(subBits-1) of its lower bound (1.6% with subBits 7). 64-bit
// nanosecond values need (64-subBits+1)·2^(subBits-1) + 2^(subBits-1)
// buckets: 3,776 counters, about 30 KiB per histogram.
const (
	subBits     = 7
	subCount    = 1 << subBits // 128
	halfCount   = subCount / 2 // 64
	bucketCount = (64-subBits+1)*halfCount + halfCount
)

// bucketOf returns the bucket index of v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits // v>>shift is in [64, 128)
	return (shift+1)*halfCount + int(v>>shift) - halfCount
}

// bucketBounds returns the smallest and largest value that fall in bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	shift := i/halfCount - 1
	lo = uint64(i%halfCount+halfCount) << shift
	return lo, lo + (uint64(1) << shift) - 1
}

// Histogram records durations from any number of goroutines without locks
// or allocations. The zero value is ready to use; it must not be copied
// after first use.
type Histogram struct {
	counts [bucketCount]atomic.Uint64
	sum    atomic.Uint64 // nanoseconds
	max    atomic.Uint64 // nanoseconds
}

// Record adds one observation; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)].Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Snapshot copies the histogram's current counts. Observations recorded
// while it copies may or may not be included.
func (h *Histogram) Snapshot() *Snapshot {
	s := &Snapshot{sum: h.sum.Load(), max: h.max.Load()}
	for i := range h.counts {
		c := h.counts[i].Load()
		s.counts[i] = c
		s.total += c
	}
	return s
}

// Snapshot is a histogram frozen at one moment, for reading percentiles.
type Snapshot struct {
	counts [bucketCount]uint64
	total  uint64
	sum    uint64
	max    uint64 // 0: unknown, use the highest bucket
}

// Count is the number of observations.
func (s *Snapshot) Count() uint64 { return s.total }

// Mean is the average observation, or 0 without any.
func (s *Snapshot) Mean() time.Duration {
	if s.total == 0 {
		return 0
	}
	return time.Duration(s.sum / s.total)
}

// Max is the largest observation (exact for a full snapshot, the upper
// bound of its bucket for a difference).
func (s *Snapshot) Max() time.Duration { return s.Quantile(1) }

// Quantile returns the value below or at which a fraction q of the
// observations lie: the upper bound of the bucket holding the observation
// of rank ⌈q·count⌉, never above the largest observation. It is 0 when
// there are no observations.
func (s *Snapshot) Quantile(q float64) time.Duration {
	if s.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(s.total)))
	rank = min(max(rank, 1), s.total)
	var seen uint64
	for i, c := range s.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			if s.max != 0 && hi > s.max {
				hi = s.max
			}
			return time.Duration(hi)
		}
	}
	return time.Duration(s.max)
}

// Sub returns the observations in s that are not in earlier, an older
// snapshot of the same histogram: what was recorded in between.
func (s *Snapshot) Sub(earlier *Snapshot) *Snapshot {
	d := &Snapshot{sum: s.sum - earlier.sum}
	for i := range s.counts {
		d.counts[i] = s.counts[i] - earlier.counts[i]
		d.total += d.counts[i]
	}
	return d
}

// Percentiles summarises s for a report.
func (s *Snapshot) Percentiles() Percentiles {
	p := Percentiles{
		Count: s.total,
		Mean:  ms(s.Mean()),
		P50:   ms(s.Quantile(0.50)),
		P90:   ms(s.Quantile(0.90)),
		P99:   ms(s.Quantile(0.99)),
		P999:  ms(s.Quantile(0.999)),
		Max:   ms(s.Max()),
	}
	for i, c := range s.counts {
		if c > 0 {
			_, hi := bucketBounds(i)
			p.Buckets = append(p.Buckets, [2]uint64{hi, c})
		}
	}
	return p
}

// Percentiles is a latency distribution in milliseconds.
type Percentiles struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	P999  float64 `json:"p999Ms"`
	Max   float64 `json:"maxMs"`
	// Buckets is the histogram the figures come from, for Merge: the
	// buckets that hold any observation, in order, each as its upper
	// bound in nanoseconds and its count.
	Buckets [][2]uint64 `json:"buckets,omitempty"`
}

// snapshot rebuilds the histogram p was made from, out of its Buckets.
// The sum comes from the mean and so is exact only to the nanosecond per
// observation; the largest observation is Max.
func (p Percentiles) snapshot() (*Snapshot, error) {
	s := &Snapshot{}
	prev := -1
	for _, b := range p.Buckets {
		i := bucketOf(b[0])
		if _, hi := bucketBounds(i); hi != b[0] {
			return nil, fmt.Errorf("%d ns is not the upper bound of a bucket", b[0])
		}
		if i <= prev {
			return nil, fmt.Errorf("bucket of %d ns out of order", b[0])
		}
		if b[1] == 0 || s.total+b[1] < s.total {
			return nil, fmt.Errorf("bucket of %d ns holds %d observations", b[0], b[1])
		}
		prev = i
		s.counts[i] = b[1]
		s.total += b[1]
	}
	if s.total != p.Count {
		return nil, fmt.Errorf("the buckets hold %d observations, the count is %d", s.total, p.Count)
	}
	if s.total == 0 {
		return s, nil
	}
	maxNs, meanNs := p.Max*float64(time.Millisecond), p.Mean*float64(time.Millisecond)
	if !(maxNs >= 0 && maxNs < math.MaxInt64 && meanNs >= 0 && meanNs <= maxNs+1) {
		return nil, fmt.Errorf("mean %v ms and max %v ms out of range", p.Mean, p.Max)
	}
	s.max = uint64(math.Round(maxNs))
	if lo, _ := bucketBounds(prev); s.max < lo {
		return nil, fmt.Errorf("max %v ms below the highest bucket", p.Max)
	}
	sum := math.Round(meanNs * float64(s.total))
	if sum >= math.MaxUint64 {
		return nil, fmt.Errorf("mean %v ms of %d observations out of range", p.Mean, s.total)
	}
	s.sum = uint64(sum)
	return s, nil
}

// add adds the observations of o to s.
func (s *Snapshot) add(o *Snapshot) {
	for i, c := range o.counts {
		s.counts[i] += c
	}
	s.total += o.total
	s.sum += o.sum
	s.max = max(s.max, o.max)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
