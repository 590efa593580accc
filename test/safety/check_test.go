package safety

import (
	"testing"
	"time"
)

func TestCheckTerms(t *testing.T) {
	const s = int64(time.Second)
	a, b := &proc{}, &proc{}
	tm := func(p *proc, kind string, token, start, stop int64) term {
		return term{p: p, kind: kind, id: kind, token: token, start: start * s, stop: stop * s}
	}
	tests := []struct {
		name       string
		terms      []term
		pauses     map[*proc][]span
		violations int
		excused    int
	}{
		{
			name:  "one after another",
			terms: []term{tm(a, "leasehold", 1, 0, 5), tm(b, "leasehold", 2, 5, 9), tm(a, "client-go", 3, 10, 12)},
		},
		{
			name:       "same token twice",
			terms:      []term{tm(a, "leasehold", 1, 0, 5), tm(b, "leasehold", 1, 6, 9)},
			violations: 1,
		},
		{
			name:       "overlap without a pause",
			terms:      []term{tm(a, "leasehold", 1, 0, 6), tm(b, "leasehold", 2, 5, 9)},
			violations: 1,
		},
		{
			name:       "lower token starts later",
			terms:      []term{tm(a, "leasehold", 1, 6, 7), tm(b, "leasehold", 2, 5, 9)},
			violations: 1,
		},
		{
			name:    "frozen leader notices on resume",
			terms:   []term{tm(a, "leasehold", 1, 0, 20), tm(b, "leasehold", 2, 8, 30)},
			pauses:  map[*proc][]span{a: {{2 * s, 20 * s}}},
			excused: 1,
		},
		{
			name:       "frozen leader runs on too long after resume",
			terms:      []term{tm(a, "leasehold", 1, 0, 22), tm(b, "leasehold", 2, 8, 30)},
			pauses:     map[*proc][]span{a: {{2 * s, 20 * s}}},
			violations: 1,
		},
		{
			name:    "client-go may take longer to notice",
			terms:   []term{tm(a, "client-go", 1, 0, 23), tm(b, "leasehold", 2, 8, 30)},
			pauses:  map[*proc][]span{a: {{2 * s, 20 * s}}},
			excused: 1,
		},
		{
			name:    "frozen again right after resume",
			terms:   []term{tm(a, "leasehold", 1, 0, 40), tm(b, "leasehold", 2, 8, 50)},
			pauses:  map[*proc][]span{a: {{2 * s, 20 * s}, {20*s + s/10, 40 * s}}},
			excused: 1,
		},
		{
			name:    "frozen twice, the later freeze explains it",
			terms:   []term{tm(a, "leasehold", 1, 0, 30), tm(b, "leasehold", 2, 20, 40)},
			pauses:  map[*proc][]span{a: {{2 * s, 10 * s}, {14 * s, 30 * s}}},
			excused: 1,
		},
		{
			name:       "paused only after the successor started",
			terms:      []term{tm(a, "leasehold", 1, 0, 20), tm(b, "leasehold", 2, 8, 30)},
			pauses:     map[*proc][]span{a: {{9 * s, 20 * s}}},
			violations: 1,
		},
		{
			name:    "stop recorded just before the test noted the resume",
			terms:   []term{tm(a, "leasehold", 1, 0, 20), tm(b, "leasehold", 2, 8, 30)},
			pauses:  map[*proc][]span{a: {{2 * s, 20*s + 1}}},
			excused: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, e := checkTerms(tc.terms, tc.pauses)
			if len(v) != tc.violations || len(e) != tc.excused {
				t.Errorf("got %d violations %q and %d excused %q, want %d and %d", len(v), v, len(e), e, tc.violations, tc.excused)
			}
		})
	}
}
