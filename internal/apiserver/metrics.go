package apiserver

import (
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	l := labelsOf(info)
	requestsTotal.WithLabelValues(l.verb, l.gv.Group, l.gv.Version, l.resource, l.subresource, strconv.Itoa(code)).Inc()
	requestDuration.WithLabelValues(l.verb, l.gv.Group, l.resource).Observe(d.Seconds())
}

// requestLabels are what the request metrics record of a request.
type requestLabels struct {
	verb                  string
	gv                    schema.GroupVersion
	resource, subresource string
}

// metricVerbs are the verbs the request metrics name; any other method is
// "other".
var metricVerbs = map[string]bool{"get": true, "list": true, "watch": true, "create": true, "update": true,
	"patch": true, "delete": true, "deletecollection": true}

// labelsOf returns the labels of info's request: its group, version,
// resource and subresource only when the server serves them, its verb only
// when it is one of the API's. Every label value is then one of a few the
// server knows: a client, authenticated or not, cannot add series by
// asking for paths or methods of its own (nor make the Prometheus client
// panic with one that is not UTF-8).
func labelsOf(info requestInfo) requestLabels {
	if !info.resourceRequest {
		return requestLabels{verb: "nonresource"}
	}
	l := requestLabels{verb: info.verb}
	if !metricVerbs[l.verb] {
		l.verb = "other"
	}
	res, ok := info.lookup()
	if !ok {
		return l
	}
	l.gv, l.resource = res.GroupVersion, res.Name
	if slices.ContainsFunc(subresources(res), func(sr subresource) bool { return sr.name == info.subresource }) {
		l.subresource = info.subresource
	}
	return l
}
