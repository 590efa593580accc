package nodelifecycle

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

// States of a node in the metrics, from its Ready condition.
const (
	stateReady    = "ready"
	stateNotReady = "not_ready"
	stateUnknown  = "unknown"
)

// stateOf names a Ready status for the metrics; a missing Ready is unknown.
func stateOf(s corev1.ConditionStatus) string {
	switch s {
	case corev1.ConditionTrue:
		return stateReady
	case corev1.ConditionFalse:
		return stateNotReady
	}
	return stateUnknown
}

// metrics describe what the controller sees and does; the server exposes
// them through Collectors.
type metrics struct {
	nodes       *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	writeErrors prometheus.Counter
}

func newMetrics() metrics {
	m := metrics{
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "nodes",
			Help: "Registered nodes by the state of their Ready condition (ready, not_ready, unknown), as the controller last saw or wrote it.",
		}, []string{"state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "transitions_total",
			Help: "Changes of a node's Ready condition seen by the controller, by the state it changed to.",
		}, []string{"to"}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "write_errors_total",
			Help: "Node status or taint updates that failed and are retried at the next monitor pass.",
		}),
	}
	for _, s := range []string{stateReady, stateNotReady, stateUnknown} {
		m.nodes.WithLabelValues(s)
		m.transitions.WithLabelValues(s)
	}
	return m
}

// Collectors returns the controller's Prometheus metrics, for the caller to
// register.
func (c *Controller) Collectors() []prometheus.Collector {
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "events_dropped_total",
		Help: fmt.Sprintf("Events not written because they came faster than the controller writes them (more than %d at once or %d a second), or too many were waiting to be written already.", eventBurst, eventQPS),
	}, func() float64 { return float64(c.droppedEvents.Load()) })
	return []prometheus.Collector{c.metrics.nodes, c.metrics.transitions, c.metrics.writeErrors, dropped}
}
