package store

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasehold_storage_request_duration_seconds",
		Help:    "Latency of etcd requests by operation and resource.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"operation", "group", "resource"})
	// kube-apiserver's own for the same requests, with its buckets, which
	// its dashboards read; leasehold's above resolve the sub-millisecond
	// requests of the hot path.
	etcdRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "etcd_request_duration_seconds",
		Help: "Latency of etcd requests by operation and resource, as kube-apiserver's.",
		Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
			4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
	}, []string{"operation", "group", "resource"})
	etcdRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcd_requests_total",
		Help: "etcd requests by operation and resource, as kube-apiserver's.",
	}, []string{"operation", "group", "resource"})
	watchers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasehold_watch_cache_watchers",
		Help: "Open watches served by the watch cache, by resource.",
	}, []string{"group", "resource"})
	cacheEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_watch_cache_events_total",
		Help: "Events the watch cache received from etcd, by resource.",
	}, []string{"group", "resource"})
	// As kube-apiserver's apiserver_watch_cache_capacity.
	cacheCapacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leasehold_watch_cache_capacity",
		Help: "Events the watch cache's history has room for, by resource.",
	}, []string{"group", "resource"})
	watchersTerminated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_watch_cache_terminated_watchers_total",
		Help: "Watches closed because the client did not keep up, by resource.",
	}, []string{"group", "resource"})
	// As kube-apiserver's apiserver_watch_cache_initializations_total: 0
	// while a cache has its first fill to do, so a watcher of a start can
	// tell when the caches are filled.
	cacheStalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_watch_cache_stalls_total",
		Help: "Times the watch cache went 2 s without a write of its resource that etcd had acknowledged to the server (its etcd watch hung, or the cache fell behind), by resource.",
	}, []string{"group", "resource"})
	cacheInitializations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_watch_cache_initializations_total",
		Help: "Fills of the watch cache from an etcd list, the first and every one after a compaction, by resource.",
	}, []string{"group", "resource"})
	batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "leasehold_storage_batch_size",
		Help:    "Writes committed together in one etcd transaction (group commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 100},
	})
	// kube-apiserver's: the same name and label, so that its dashboards
	// count leasehold's objects.
	storageObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_storage_objects",
		Help: "Objects stored, by resource: as the watch cache holds them, or as last counted in etcd (every --etcd-count-metric-poll-period) for a resource without one.",
	}, []string{"resource"})
	// Its successor in kube-apiserver 1.34 and later, by group and
	// resource: the same count.
	resourceObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_resource_objects",
		Help: "Objects stored, by group and resource, as apiserver_storage_objects counts them.",
	}, []string{"group", "resource"})
	compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_storage_compactions_total",
		Help: "Compactions of etcd history this server made, by what brought them: the interval, or the writes made since the last.",
	}, []string{"trigger"})
)

// Collectors are the store's Prometheus metrics, for the server to register.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requestDuration, etcdRequestDuration, etcdRequests, watchers, cacheEvents, cacheCapacity, watchersTerminated, cacheStalls, cacheInitializations, batchSize, compactions, storageObjects, resourceObjects}
}

// op is one of the operations requestDuration is labelled with.
type op int

const (
	opGet op = iota
	opCreate
	opUpdate
	opDelete
	opList
	numOps
)

var opNames = [numOps]string{"get", "create", "update", "delete", "list"}

// kindMetrics holds a kind's series of requestDuration, each looked up on
// its first use and kept: a renewal would otherwise hash its label values
// on every write.
type kindMetrics [numOps]struct {
	once               sync.Once
	observer, etcdTime prometheus.Observer
	etcdCount          prometheus.Counter
}

// observe records the time since start as a request of operation o.
func (k *Kind) observe(o op, start time.Time) {
	m := &k.metrics[o]
	m.once.Do(func() {
		labels := []string{opNames[o], k.resource.Group, k.resource.Resource}
		m.observer = requestDuration.WithLabelValues(labels...)
		m.etcdTime = etcdRequestDuration.WithLabelValues(labels...)
		m.etcdCount = etcdRequests.WithLabelValues(labels...)
	})
	d := k.s.cfg.Clock.Since(start).Seconds()
	m.observer.Observe(d)
	m.etcdTime.Observe(d)
	m.etcdCount.Inc()
}

// objectCounts are a kind's series of apiserver_storage_objects and
// apiserver_resource_objects, set together.
type objectCounts [2]prometheus.Gauge

func objectCountsOf(gr schema.GroupResource) objectCounts {
	return objectCounts{storageObjects.WithLabelValues(gr.String()), resourceObjects.WithLabelValues(gr.Group, gr.Resource)}
}

func (c objectCounts) Set(n float64) {
	for _, g := range c {
		g.Set(n)
	}
}
