package bench_test

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/bench"
)

// A Histogram records latencies from any number of goroutines; a snapshot
// answers percentiles to within 1.6%.
func ExampleHistogram() {
	var h bench.Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Snapshot()
	fmt.Println("count", s.Count())
	fmt.Println("p50 within 2%:", s.Quantile(0.5) >= 500*time.Millisecond && s.Quantile(0.5) < 510*time.Millisecond)
	fmt.Println("max", s.Max())
	// Output:
	// count 1000
	// p50 within 2%: true
	// max 1s
}
