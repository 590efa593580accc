package cli

import (
	"maps"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestParseWatchCacheSizes(t *testing.T) {
	tests := []struct {
		in   string
		want map[schema.GroupResource]int
		bad  bool
	}{
		{in: ""},
		{in: "nodes#0", want: map[schema.GroupResource]int{{Resource: "nodes"}: 0}},
		{in: "nodes#0, leases.coordination.k8s.io#100,events#1", want: map[schema.GroupResource]int{
			{Resource: "nodes"}: 0, {Group: "coordination.k8s.io", Resource: "leases"}: 100, {Resource: "events"}: 1}},
		{in: "nodes", bad: true},
		{in: "nodes#", bad: true},
		{in: "#0", bad: true},
		{in: "nodes#-1", bad: true},
		{in: "nodes#ten", bad: true},
	}
	for _, tt := range tests {
		got, err := parseWatchCacheSizes(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("%q accepted as %v", tt.in, got)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
