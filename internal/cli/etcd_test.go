package cli

import (
	"slices"
	"testing"
)

// TestParseURLs: lists are read as written by hand; one naming no URL is
// an error.
func TestParseURLs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"http://127.0.0.1:2379", []string{"http://127.0.0.1:2379"}},
		{" http://a:2379 , http://b:2379,", []string{"http://a:2379", "http://b:2379"}},
		{"", nil},
		{" , ", nil},
	} {
		urls, err := parseURLs(c.in)
		var got []string
		for _, u := range urls {
			got = append(got, u.String())
		}
		if c.want == nil && err == nil {
			t.Errorf("%q: %v, want an error", c.in, got)
		}
		if c.want != nil && (err != nil || !slices.Equal(got, c.want)) {
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}
