package bench

import (
	"testing"
	"time"
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
