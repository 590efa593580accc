package store

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	requestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "leasehold_storage_request_duration_seconds",
		Help:    "Latency of etcd requests by operation and resource.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
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
	compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasehold_storage_compactions_total",
		Help: "Compactions of etcd history this server made, by what brought them: the interval, or the writes made since the last.",
	}, []string{"trigger"})
)

// Collectors are the store's Prometheus metrics, for the server to register.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{requestDuration, watchers, cacheEvents, cacheCapacity, watchersTerminated, cacheStalls, cacheInitializations, batchSize, compactions, storageObjects}
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
	once     sync.Once
	observer prometheus.Observer
}

// observe records the time since start as a request of operation o.
func (k *Kind) observe(o op, start time.Time) {
	m := &k.metrics[o]
	m.once.Do(func() {
		m.observer = requestDuration.WithLabelValues(opNames[o], k.resource.Group, k.resource.Resource)
	})
	m.observer.Observe(k.s.cfg.Clock.Since(start).Seconds())
}
