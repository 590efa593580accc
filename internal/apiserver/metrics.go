package apiserver

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/version"
)

// The request metrics carry kube-apiserver's names, labels and buckets, and
// count the requests it counts, so that dashboards, recording rules and
// alerts written for kube-apiserver (request rates and errors by verb and
// resource, the latency SLOs) read leasehold's as they are.
var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_request_total",
		Help: "Resource requests that got past authentication and authorization (and those refused 429 by the in-flight limit), and requests for the health endpoints' roots and aggregated discovery, by verb, dry run, group, version, resource, subresource, scope, component and response code.",
	}, requestLabelNames(true, "code"))
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_request_duration_seconds",
		Help:    "Latency of the requests apiserver_request_total counts, by verb, dry run, group, version, resource, subresource, scope and component (a watch counts until it ends).",
		Buckets: []float64{.005, .025, .05, .1, .2, .4, .6, .8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
	}, requestLabelNames(true))
	requestSLIDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_request_sli_duration_seconds",
		Help:    "Latency of the requests apiserver_request_total counts, dry runs left out, by verb, group, version, resource, subresource, scope and component. leasehold has no admission webhooks or request queues for it to leave out, so it is apiserver_request_duration_seconds without dry runs.",
		Buckets: []float64{.05, .1, .2, .4, .6, .8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
	}, requestLabelNames(false))
	responseSizes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_response_sizes",
		Help:    "Bytes of the bodies of the reads (gets and lists) apiserver_request_total counts, as sent (gzipped or not), by verb, group, version, resource, subresource, scope and component.",
		Buckets: prometheus.ExponentialBuckets(1000, 10, 7),
	}, requestLabelNames(false))
	requestTerminations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_request_terminations_total",
		Help: "Requests the server turned away to protect itself (429 from the in-flight limits), by verb, group, version, resource, subresource, scope, component and code.",
	}, requestLabelNames(false, "code"))
	longRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_longrunning_requests",
		Help: "Long-running requests (watches) open now, by verb, group, version, resource, subresource, scope and component.",
	}, requestLabelNames(false))
	watchEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_watch_events_total",
		Help: "Events sent to watchers, each watcher's counted, by group, version and resource.",
	}, []string{"group", "version", "resource"})
	renewalsDeferred = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leasehold_node_lease_renewals_deferred_total",
		Help: "Renewals of node leases answered without a write to etcd, between two checkpoints (--node-lease-checkpoint-interval).",
	})
	watchEventSizes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_watch_events_sizes",
		Help:    "Bytes of the events sent to watchers, as framed for the watch's encoding, by group, version and resource.",
		Buckets: prometheus.ExponentialBuckets(1024, 2, 8),
	}, []string{"group", "version", "resource"})
	authenticationAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "authentication_attempts",
		Help: "Requests authenticated, by result: success, failure (no credentials, with anonymous requests off) or error (credentials refused).",
	}, []string{"result"})
	authorizationAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "authorization_attempts_total",
		Help: "Requests authorized, by result: allowed, denied, no-opinion (no authorizer allowed or denied: refused) or error.",
	}, []string{"result"})
)

// requestComponent is the component label of every request series: the
// API server itself, as kube-apiserver labels its own.
const requestComponent = "apiserver"

// requestLabelNames are the labels of the request series, dry_run among
// them when dryRun is set, and extra after them.
func requestLabelNames(dryRun bool, extra ...string) []string {
	names := []string{"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"}
	if !dryRun {
		names = slices.Delete(names, 1, 2)
	}
	return append(names, extra...)
}

// Collectors are the API server's Prometheus metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requestsTotal, requestDuration, requestSLIDuration, responseSizes, requestTerminations, longRunning, watchEvents, watchEventSizes, renewalsDeferred, authenticationAttempts, authorizationAttempts}
}

// BuildInfo is kube-apiserver's kubernetes_build_info, 1 with the server's
// /version in its labels, by which version-skew alerts see every server.
func BuildInfo() prometheus.Collector {
	info := version.Info()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubernetes_build_info",
		Help: "1, with the server's major and minor version, git version, commit, tree state, build date, Go version, compiler and platform, as /version gives them.",
		ConstLabels: prometheus.Labels{
			"major": info.Major, "minor": info.Minor, "git_version": info.GitVersion, "git_commit": info.GitCommit,
			"git_tree_state": info.GitTreeState, "build_date": info.BuildDate, "go_version": info.GoVersion,
			"compiler": info.Compiler, "platform": info.Platform,
		},
	})
	g.Set(1)
	return g
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

// observeRequest counts a request that reached its resource's handler (or
// was refused by the in-flight limit, dropped), as kube-apiserver counts
// them: not those refused by authentication or authorization, nor those
// for paths the server does not serve. A dropped request is counted as a
// termination too, and its latency is left out.
func observeRequest(r *http.Request, info requestInfo, code, size int, d time.Duration, dropped bool) {
	l, ok := labelsOf(r, info)
	if !ok {
		return
	}
	gv := l.gv
	if dropped {
		requestsTotal.WithLabelValues(l.verb, l.dryRun, gv.Group, gv.Version, l.resource, l.subresource, l.scope, requestComponent, strconv.Itoa(code)).Inc()
		requestTerminations.WithLabelValues(l.verb, gv.Group, gv.Version, l.resource, l.subresource, l.scope, requestComponent, strconv.Itoa(code)).Inc()
		return
	}
	series := seriesOf(l, code)
	series.total.Inc()
	series.duration.Observe(d.Seconds())
	if series.sli != nil {
		series.sli.Observe(d.Seconds())
	}
	if series.sizes != nil {
		series.sizes.Observe(float64(size))
	}
}

// requestSeries are the series a request served with some labels and
// code is counted in: sli only without a dry run, sizes only for GET and
// LIST, as observeRequest counts them.
type requestSeries struct {
	total                prometheus.Counter
	duration, sli, sizes prometheus.Observer
}

type requestSeriesKey struct {
	requestLabels
	code int
}

// servedSeries holds each requestSeries once it has been used. Looking the
// four series up by their label values at every request hashed every value
// four times over (a renewal's handler spent 1 % of the server's CPU in
// it). labelsOf keeps the label values to a few the server knows, and the
// codes are those it answers with, so the map stays as small as the
// metrics themselves.
var servedSeries sync.Map // requestSeriesKey → *requestSeries

func seriesOf(l requestLabels, code int) *requestSeries {
	key := requestSeriesKey{l, code}
	if s, ok := servedSeries.Load(key); ok {
		return s.(*requestSeries)
	}
	gv := l.gv
	s := &requestSeries{
		total:    requestsTotal.WithLabelValues(l.verb, l.dryRun, gv.Group, gv.Version, l.resource, l.subresource, l.scope, requestComponent, strconv.Itoa(code)),
		duration: requestDuration.WithLabelValues(l.verb, l.dryRun, gv.Group, gv.Version, l.resource, l.subresource, l.scope, requestComponent),
	}
	if l.dryRun == "" {
		s.sli = requestSLIDuration.WithLabelValues(l.verb, gv.Group, gv.Version, l.resource, l.subresource, l.scope, requestComponent)
	}
	if l.verb == "GET" || l.verb == "LIST" {
		s.sizes = responseSizes.WithLabelValues(l.verb, gv.Group, gv.Version, l.resource, l.subresource, l.scope, requestComponent)
	}
	actual, _ := servedSeries.LoadOrStore(key, s)
	return actual.(*requestSeries)
}

// openLongRunning counts a watch as open until the returned func is called.
func openLongRunning(r *http.Request, info requestInfo) (done func()) {
	l, ok := labelsOf(r, info)
	if !ok {
		return func() {}
	}
	g := longRunning.WithLabelValues(l.verb, l.gv.Group, l.gv.Version, l.resource, l.subresource, l.scope, requestComponent)
	g.Inc()
	return g.Dec
}

// watchEventSeries returns a watch's series of apiserver_watch_events_total
// and apiserver_watch_events_sizes, looked up once for all its events.
func watchEventSeries(gv schema.GroupVersion, resource string) (prometheus.Counter, prometheus.Observer) {
	return watchEvents.WithLabelValues(gv.Group, gv.Version, resource), watchEventSizes.WithLabelValues(gv.Group, gv.Version, resource)
}

// The series of each result, looked up once rather than at every request.
var (
	authnSuccess, authnFailure, authnError = authenticationAttempts.WithLabelValues("success"),
		authenticationAttempts.WithLabelValues("failure"), authenticationAttempts.WithLabelValues("error")
	authzAllowed, authzDenied, authzNoOpinion, authzError = authorizationAttempts.WithLabelValues("allowed"),
		authorizationAttempts.WithLabelValues("denied"), authorizationAttempts.WithLabelValues("no-opinion"), authorizationAttempts.WithLabelValues("error")
)

func observeAuthentication(ok bool, err error) {
	switch {
	case err != nil:
		authnError.Inc()
	case !ok:
		authnFailure.Inc()
	default:
		authnSuccess.Inc()
	}
}

func observeAuthorization(d auth.Decision, err error) {
	switch {
	case d == auth.DecisionAllow:
		authzAllowed.Inc()
	case err != nil:
		authzError.Inc()
	case d == auth.DecisionDeny:
		authzDenied.Inc()
	default:
		authzNoOpinion.Inc()
	}
}

// requestLabels are what the request metrics record of a request, in
// kube-apiserver's terms.
type requestLabels struct {
	verb                  string // GET LIST WATCH POST PUT PATCH APPLY DELETE, or other
	dryRun                string // "", or the dryRun values sorted ("All"), or invalid
	gv                    schema.GroupVersion
	resource, subresource string
	scope                 string // resource, namespace or cluster
}

// metricVerbs are kube-apiserver's names of the API's verbs. A delete of a
// collection is a DELETE, as there; any other method is "other".
var metricVerbs = map[string]string{"get": "GET", "list": "LIST", "watch": "WATCH", "create": "POST", "update": "PUT",
	"patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE"}

// labelsOf returns the labels of info's request, and false for a request
// the metrics do not count: one that is not for a resource, or for a
// resource or subresource the server does not serve. Every label value is
// then one of a few the server knows: a client, authenticated or not,
// cannot add series by asking for paths, methods or dry runs of its own (nor
// make the Prometheus client panic with one that is not UTF-8).
func labelsOf(r *http.Request, info requestInfo) (requestLabels, bool) {
	if !info.resourceRequest {
		return requestLabels{}, false
	}
	res, ok := info.lookup()
	if !ok || (info.subresource != "" && !slices.ContainsFunc(subresources(res), func(sr subresource) bool { return sr.name == info.subresource })) {
		return requestLabels{}, false
	}
	l := requestLabels{verb: metricVerbs[info.verb], gv: res.GroupVersion, resource: res.Name, subresource: info.subresource, scope: "cluster"}
	switch {
	case l.verb == "":
		l.verb = "other"
	case l.verb == "PATCH" && r.Header.Get("Content-Type") == string(types.ApplyPatchType):
		l.verb = "APPLY"
	}
	switch {
	// As kube-apiserver's route gives it: a list or watch whose field
	// selector names one object is still of its namespace or cluster.
	case info.named || info.verb == "create":
		l.scope = "resource"
	case info.namespace != "":
		l.scope = "namespace"
	}
	l.dryRun = dryRunLabel(info.query)
	return l, true
}

// dryRunLabel is the dry_run label of a request with query q: "", the
// dryRun values sorted ("All"), or invalid.
func dryRunLabel(q url.Values) string {
	dryRun, ok := q["dryRun"]
	switch {
	case !ok:
		return ""
	case len(metav1validation.ValidateDryRun(nil, dryRun)) > 0:
		return "invalid"
	}
	return strings.Join(slices.Compact(slices.Sorted(slices.Values(dryRun))), ",")
}

// observeNonResource counts a request for a path that is not a resource
// but that kube-apiserver counts all the same, labelled as it labels
// them: a health endpoint's root (component "") and aggregated discovery
// (component apiserver), the path as their subresource ("/readyz",
// "apis"), the verb from the method.
func observeNonResource(r *http.Request, subresource, component string, code, size int, d time.Duration) {
	verb := "other"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		verb = "GET"
		if w := r.URL.Query()["watch"]; r.Method == http.MethodGet && len(w) > 0 && !strings.EqualFold(w[0], "false") && w[0] != "0" {
			verb = "WATCH"
		}
	case http.MethodPost, http.MethodPut, http.MethodDelete:
		verb = r.Method
	case http.MethodPatch:
		verb = "PATCH"
		if r.Header.Get("Content-Type") == string(types.ApplyPatchType) {
			verb = "APPLY"
		}
	}
	dryRun := dryRunLabel(r.URL.Query())
	requestsTotal.WithLabelValues(verb, dryRun, "", "", "", subresource, "", component, strconv.Itoa(code)).Inc()
	requestDuration.WithLabelValues(verb, dryRun, "", "", "", subresource, "", component).Observe(d.Seconds())
	if dryRun == "" {
		requestSLIDuration.WithLabelValues(verb, "", "", "", subresource, "", component).Observe(d.Seconds())
	}
	if verb == "GET" {
		responseSizes.WithLabelValues(verb, "", "", "", subresource, "", component).Observe(float64(size))
	}
}
