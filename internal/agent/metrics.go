package agent

import "github.com/prometheus/client_golang/prometheus"

// metrics count what the agent did; the CLI exposes them through Collectors.
type metrics struct {
	renewals       prometheus.Counter
	leaseCreations prometheus.Counter
	registrations  prometheus.Counter
	errors         prometheus.Counter
	failovers      prometheus.Counter
	events         prometheus.Counter
}

func newMetrics() metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "leasehold", Subsystem: "agent", Name: name, Help: help,
		})
	}
	return metrics{
		renewals:       counter("lease_renewals_total", "Successful renewals of the node lease."),
		leaseCreations: counter("lease_creations_total", "Creations of the node lease, the first one included."),
		registrations:  counter("node_registrations_total", "Creations of the Node, the first one included."),
		errors:         counter("errors_total", "Heartbeat passes that failed and were retried with backoff."),
		failovers:      counter("server_switches_total", "Switches to the next server after one was unavailable."),
		events:         counter("events_total", "Events about the node written to the server."),
	}
}

// Collectors returns the agent's Prometheus metrics, for the caller to
// register.
func (a *Agent) Collectors() []prometheus.Collector {
	m := a.metrics
	return []prometheus.Collector{m.renewals, m.leaseCreations, m.registrations, m.errors, m.failovers, m.events}
}
