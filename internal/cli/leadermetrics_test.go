package cli

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestLeaderMetrics(t *testing.T) {
	m := newLeaderMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	// gather returns the value of each metric the registry exports.
	gather := func() map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				got[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return got
	}
	count := func() int { t.Helper(); return len(gather()) }
	if n := count(); n != 0 {
		t.Fatalf("before any term: %d metrics, want none", n)
	}
	deletions := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_deletions_total", Help: "h"})
	nodes := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_nodes", Help: "h"})
	releaseGC := m.hold("gc", []prometheus.Collector{deletions})
	releaseNodes := m.hold("nodes", []prometheus.Collector{nodes})
	if n := count(); n != 2 {
		t.Fatalf("while both run: %d metrics, want 2", n)
	}
	releaseGC()
	if n := count(); n != 1 {
		t.Fatalf("after one stopped: %d metrics, want 1", n)
	}
	// A new term brings a fresh counter under the same name.
	fresh := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_deletions_total", Help: "h"})
	fresh.Add(3)
	defer m.hold("gc", []prometheus.Collector{fresh})()
	releaseNodes()
	if got := gather(); len(got) != 1 || got["test_deletions_total"] != 3 {
		t.Errorf("with the new term alone: %v, want test_deletions_total 3", got)
	}
}
