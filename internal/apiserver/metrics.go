package apiserver

import (
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_apiserver_requests_total",
		Help: "API requests by verb, group, version, resource, subresource and response code.",
	}, []string{"verb", "group", "version", "resource", "subresource", "code"})
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasehold_apiserver_request_duration_seconds",
		Help:    "API request latency by verb and resource (watches count until they end).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 60},
	}, []string{"verb", "group", "resource"})
	openWatches = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasehold_apiserver_open_watches",
		Help: "Watch streams open now, by group and resource.",
	}, []string{"group", "resource"})
)

// Collectors are the API server's Prometheus metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requestsTotal, requestDuration, openWatches}
}

// GoCollector is the Go runtime's collector for a server's /metrics: the
// usual go_* series and, from runtime/metrics, the CPU time the garbage
// collector took by the runtime's own estimate (the
// go_cpu_classes_gc_*_cpu_seconds_total counters, brought up to date at the
// end of each collection) and the number of collections
// (go_gc_cycles_total_gc_cycles_total). `leasehold bench` reads the last two
// over each measurement: at a large fleet the collector is the part of the
// server's CPU that grows with the number of objects.
func GoCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/gc/|^/gc/cycles/total:`)}))
}

func observeRequest(info requestInfo, code int, d time.Duration) {
	verb, resource := info.verb, info.resource
	if !info.resourceRequest {
		verb, resource = "nonresource", ""
	}
	requestsTotal.WithLabelValues(verb, info.gv.Group, info.gv.Version, resource, info.subresource, strconv.Itoa(code)).Inc()
	requestDuration.WithLabelValues(verb, info.gv.Group, resource).Observe(d.Seconds())
}
