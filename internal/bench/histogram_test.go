package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	// Every value lies within its bucket's bounds, buckets are contiguous
	// and no wider than 1/64 of their lower bound.
	values := []uint64{0, 1, 63, 64, 127, 128, 129, 255, 256, 1000, 1 << 20, 123456789, 1<<40 + 7, 1<<63 + 12345, ^uint64(0)}
	for _, v := range values {
		i := bucketOf(v)
		lo, hi := bucketBounds(i)
		if v < lo || v > hi {
			t.Errorf("value %d in bucket %d [%d, %d]", v, i, lo, hi)
		}
		if i >= bucketCount {
			t.Errorf("value %d: bucket %d out of range %d", v, i, bucketCount)
		}
	}
	var prevHi uint64
	for i := 1; i < bucketCount; i++ {
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 && i > 0 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if lo >= subCount && float64(hi-lo+1) > float64(lo)/halfCount {
			t.Fatalf("bucket %d [%d, %d] wider than 1/%d", i, lo, hi, halfCount)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d bounds [%d, %d] map to %d, %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		prevHi = hi
	}
	if prevHi != ^uint64(0) {
		t.Errorf("last bucket ends at %d, want max uint64", prevHi)
	}
}

func TestQuantiles(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.99, 0},
		{"single", []time.Duration{5 * time.Millisecond}, 0.5, 5 * time.Millisecond},
		{"max is exact", []time.Duration{time.Millisecond, 7 * time.Second}, 1, 7 * time.Second},
		{"median of three", []time.Duration{10, 20, 30}, 0.5, 20},
		{"p0 is the smallest", []time.Duration{10, 20, 30}, 0, 10},
		{"negative counts as zero", []time.Duration{-5, 10}, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			for _, v := range tt.values {
				h.Record(v)
			}
			if got := h.Snapshot().Quantile(tt.q); got != tt.want {
				t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

// TestQuantilesAgainstSort compares the histogram with exact percentiles of
// a sorted sample: they agree within the bucket precision.
func TestQuantilesAgainstSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	values := make([]time.Duration, 100000)
	for i := range values {
		// Log-normal-ish latencies from 100µs to a few seconds.
		values[i] = time.Duration(float64(100*time.Microsecond) * (1 + r.ExpFloat64()*r.ExpFloat64()*50))
		h.Record(values[i])
	}
	slices.Sort(values)
	s := h.Snapshot()
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := values[max(int(q*float64(len(values)))-1, 0)]
		got := s.Quantile(q)
		if diff := float64(got-exact) / float64(exact); diff < -0.02 || diff > 0.02 {
			t.Errorf("q=%v: got %v, exact %v (%.2f%% off)", q, got, exact, diff*100)
		}
	}
	if s.Count() != uint64(len(values)) {
		t.Errorf("Count = %d, want %d", s.Count(), len(values))
	}
}

func TestSnapshotSub(t *testing.T) {
	var h Histogram
	for range 100 {
		h.Record(time.Millisecond)
	}
	before := h.Snapshot()
	for range 10 {
		h.Record(time.Second)
	}
	d := h.Snapshot().Sub(before)
	if d.Count() != 10 {
		t.Fatalf("Count = %d, want 10", d.Count())
	}
	if p := d.Quantile(0.5); p < time.Second || p > time.Second+time.Second/64 {
		t.Errorf("p50 of the difference = %v, want about 1s", p)
	}
	if m := d.Mean(); m != time.Second {
		t.Errorf("Mean = %v, want 1s", m)
	}
}

func TestHistogramConcurrent(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Record(time.Duration(g*1000+i) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	if s.Count() != 8000 {
		t.Errorf("Count = %d, want 8000", s.Count())
	}
	if m := s.Max(); m != 7999*time.Microsecond {
		t.Errorf("Max = %v, want 7.999ms", m)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(100, func() { h.Record(1234 * time.Microsecond) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(0)
		for pb.Next() {
			d += 997
			h.Record(d % (100 * time.Millisecond))
		}
	})
}

func TestPercentilesSnapshot(t *testing.T) {
	// A report's percentiles give back the histogram they were made from,
	// and two added up give what one histogram of every value gives.
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b, all Histogram
	for i := range 20000 {
		d := time.Duration(rng.ExpFloat64() * float64(3*time.Millisecond))
		if i%3 == 0 {
			d *= 10
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	pa, pb := a.Snapshot().Percentiles(), b.Snapshot().Percentiles()
	sa, err := pa.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if sa.counts != a.Snapshot().counts || sa.Percentiles().P99 != pa.P99 || sa.Max() != a.Snapshot().Max() {
		t.Errorf("round trip: %+v, want %+v", sa.Percentiles(), pa)
	}
	sb, err := pb.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sa.add(sb)
	got, want := sa.Percentiles(), all.Snapshot().Percentiles()
	if got.Count != want.Count || got.P50 != want.P50 || got.P99 != want.P99 || got.P999 != want.P999 || got.Max != want.Max || !slices.Equal(got.Buckets, want.Buckets) {
		t.Errorf("merged %+v, want %+v", got, want)
	}
	if diff := got.Mean - want.Mean; diff > 1e-6 || diff < -1e-6 {
		t.Errorf("merged mean %v ms, want %v", got.Mean, want.Mean)
	}

	// An empty distribution.
	if s, err := (Percentiles{}).snapshot(); err != nil || s.Count() != 0 {
		t.Errorf("empty: %v, %v", s, err)
	}

	// What a hand-edited or damaged report may hold.
	_, hiA := bucketBounds(300)
	_, hiB := bucketBounds(400)
	good := Percentiles{Count: 3, Mean: float64(hiA) / 1e6, Max: float64(hiB) / 1e6, Buckets: [][2]uint64{{hiA, 2}, {hiB, 1}}}
	if _, err := good.snapshot(); err != nil {
		t.Fatalf("a well-formed histogram: %v", err)
	}
	for name, p := range map[string]Percentiles{
		"not a bound":      {Count: 1, Max: 1, Buckets: [][2]uint64{{hiA - 1, 1}}},
		"out of order":     {Count: 3, Max: good.Max, Buckets: [][2]uint64{{hiB, 1}, {hiA, 2}}},
		"repeated":         {Count: 2, Max: good.Max, Buckets: [][2]uint64{{hiA, 1}, {hiA, 1}}},
		"empty bucket":     {Count: 0, Buckets: [][2]uint64{{hiA, 0}}},
		"count differs":    {Count: 4, Mean: good.Mean, Max: good.Max, Buckets: good.Buckets},
		"overflow":         {Count: 1, Buckets: [][2]uint64{{hiA, ^uint64(0)}, {hiB, 2}}},
		"max below":        {Count: 3, Mean: good.Mean, Max: float64(hiA) / 1e6, Buckets: good.Buckets},
		"negative mean":    {Count: 3, Mean: -1, Max: good.Max, Buckets: good.Buckets},
		"mean above max":   {Count: 3, Mean: good.Max * 2, Max: good.Max, Buckets: good.Buckets},
		"max out of range": {Count: 3, Mean: good.Mean, Max: 1e300, Buckets: good.Buckets},
	} {
		if s, err := p.snapshot(); err == nil {
			t.Errorf("%s: %+v, want an error", name, s.Percentiles())
		}
	}
}

// FuzzPercentilesSnapshot: any buckets give a histogram that holds the
// count, or an error; never a panic.
func FuzzPercentilesSnapshot(f *testing.F) {
	_, hi := bucketBounds(300)
	f.Add(uint64(2), 0.5, 1.0, hi, uint64(2), uint64(0), uint64(0))
	f.Add(uint64(3), 0.0, 0.0, uint64(5), uint64(1), uint64(9), uint64(2))
	f.Fuzz(func(t *testing.T, count uint64, mean, maxMs float64, b1, c1, b2, c2 uint64) {
		p := Percentiles{Count: count, Mean: mean, Max: maxMs, Buckets: [][2]uint64{{b1, c1}, {b2, c2}}}
		s, err := p.snapshot()
		if err != nil {
			return
		}
		if s.Count() != count || s.Quantile(1) > time.Duration(math.Round(maxMs*1e6)) {
			t.Errorf("%+v gave %+v", p, s.Percentiles())
		}
	})
}
