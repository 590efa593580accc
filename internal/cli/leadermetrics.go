package cli

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// leaderMetrics puts on serve's /metrics the metrics of the built-in
// controllers this replica runs while it leads. Each term builds its
// controllers afresh, so their collectors come and go with the term: a new
// term's counters start from zero, as after a restart, and a replica that
// does not lead exports none of them.
type leaderMetrics struct {
	mu   sync.Mutex
	held map[string][]prometheus.Collector // by controller name
}

func newLeaderMetrics() *leaderMetrics {
	return &leaderMetrics{held: map[string][]prometheus.Collector{}}
}

// hold exports the collectors of the controller name until release is
// called.
func (m *leaderMetrics) hold(name string, cs []prometheus.Collector) (release func()) {
	m.mu.Lock()
	m.held[name] = cs
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.held, name)
		m.mu.Unlock()
	}
}

// Describe describes nothing: the set of metrics changes with the terms,
// which makes this an unchecked collector in the registry.
func (m *leaderMetrics) Describe(chan<- *prometheus.Desc) {}

func (m *leaderMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	var cs []prometheus.Collector
	for _, held := range m.held {
		cs = append(cs, held...)
	}
	m.mu.Unlock()
	for _, c := range cs {
		c.Collect(ch)
	}
}
