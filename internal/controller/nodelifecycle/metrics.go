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
	// By zone (zones.go).
	zoneNodes, zoneUnhealthy, zoneStates, zoneWaitingNodes *prometheus.GaugeVec
	noExecuteTaints                                        *prometheus.CounterVec
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
		zoneNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "zone_nodes",
			Help: "Registered nodes by zone (region/zone of their topology labels), those labelled " + LabelExcludeDisruption + " left out.",
		}, []string{"zone"}),
		zoneUnhealthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "zone_unhealthy_nodes",
			Help: "Registered nodes not Ready by zone, as the last monitor pass left them.",
		}, []string{"zone"}),
		zoneStates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "zone_state",
			Help: "1 for each zone's state (normal, partial_disruption, full_disruption), which sets how fast its nodes get NoExecute taints.",
		}, []string{"zone", "state"}),
		zoneWaitingNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "zone_noexecute_waiting_nodes",
			Help: "Nodes not Ready waiting for their zone's rate to give them the NoExecute taint.",
		}, []string{"zone"}),
		noExecuteTaints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "noexecute_taints_total",
			Help: "NoExecute taints added to nodes not Ready, by zone.",
		}, []string{"zone"}),
	}
	for _, s := range []string{stateReady, stateNotReady, stateUnknown} {
		m.nodes.WithLabelValues(s)
		m.transitions.WithLabelValues(s)
	}
	return m
}

var zoneStateNames = []zoneState{zoneNormal, zonePartial, zoneFull}

// zone sets a zone's node counts.
func (m metrics) zone(name string, nodes, unhealthy int) {
	m.zoneNodes.WithLabelValues(name).Set(float64(nodes))
	m.zoneUnhealthy.WithLabelValues(name).Set(float64(unhealthy))
}

// zoneState sets which state a zone is in.
func (m metrics) zoneState(name string, s zoneState) {
	for _, st := range zoneStateNames {
		v := 0.0
		if st == s {
			v = 1
		}
		m.zoneStates.WithLabelValues(name, st.String()).Set(v)
	}
}

func (m metrics) zoneWaiting(name string, n int) {
	m.zoneWaitingNodes.WithLabelValues(name).Set(float64(n))
}

// dropZone forgets a zone no node is in any more.
func (m metrics) dropZone(name string) {
	m.zoneNodes.DeleteLabelValues(name)
	m.zoneUnhealthy.DeleteLabelValues(name)
	m.zoneWaitingNodes.DeleteLabelValues(name)
	for _, st := range zoneStateNames {
		m.zoneStates.DeleteLabelValues(name, st.String())
	}
}

// resetZones forgets every zone, at the start of a Run. The counter of
// taints keeps its zones.
func (m metrics) resetZones() {
	m.zoneNodes.Reset()
	m.zoneUnhealthy.Reset()
	m.zoneStates.Reset()
	m.zoneWaitingNodes.Reset()
}

// Collectors returns the controller's Prometheus metrics, for the caller to
// register.
func (c *Controller) Collectors() []prometheus.Collector {
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "leasehold", Subsystem: "node_lifecycle", Name: "events_dropped_total",
		Help: fmt.Sprintf("Events not written because they came faster than the controller writes them (more than %d at once or %d a second), or too many were waiting to be written already, or the controllers' term ended before they were written.", eventBurst, eventQPS),
	}, func() float64 { return float64(c.droppedEvents.Load()) })
	m := c.metrics
	return []prometheus.Collector{m.nodes, m.transitions, m.writeErrors, m.zoneNodes, m.zoneUnhealthy, m.zoneStates, m.zoneWaitingNodes, m.noExecuteTaints, dropped}
}
