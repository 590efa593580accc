package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// The series a leasehold server's /metrics gives its Go garbage collector
// (apiserver.GoCollector): the runtime's estimate of the collector's CPU
// time, brought up to date at the end of each collection, and the number of
// collections.
const (
	collectorCPUMetric    = "go_cpu_classes_gc_total_cpu_seconds_total"
	collectorCyclesMetric = "go_gc_cycles_total_gc_cycles_total"
)

// etcdPutsMetric counts the puts of the etcd embedded in a leasehold
// server, which serves etcd's own metrics beside its own: one for each
// object a committed write stores.
const etcdPutsMetric = "etcd_mvcc_put_total"

// The series Prometheus' process collector gives a process's CPU time and
// resident memory, on the /metrics of leasehold serve and kube-apiserver
// alike.
const (
	processCPUMetric = "process_cpu_seconds_total"
	processRSSMetric = "process_resident_memory_bytes"
)

// CollectorStats is what the server's Go garbage collector spent during a
// measurement, by the runtime's own estimate. The runtime counts a
// collection's time when it ends, so the figures cover the collections
// that ended within the measurement.
type CollectorStats struct {
	CPUSeconds           float64 `json:"cpuSeconds"`
	CPUSecondsPer1000Ops float64 `json:"cpuSecondsPer1000Ops,omitempty"`
	Collections          uint64  `json:"collections"`
}

// EtcdPutStats counts the puts of the server's embedded etcd over a
// measurement, and per op of the scenario.
type EtcdPutStats struct {
	Puts  uint64  `json:"puts"`
	PerOp float64 `json:"perOp,omitempty"`
}

// collectorReading is one reading of the collector's two series.
type collectorReading struct{ cpuSeconds, cycles float64 }

// processReading is one reading of the process's two series.
type processReading struct {
	at         time.Time
	cpuSeconds float64
	rss        uint64
}

// serverReading is what one page of the server's /metrics says; a part
// whose series the page lacks is nil.
type serverReading struct {
	collector *collectorReading
	process   *processReading
	puts      *float64 // etcdPutsMetric
}

// metricsMeter reads the server's /metrics at the start of a measurement
// and again at its end: its collector, and its process for a server that
// does not run on this machine. It is inert when the first reading failed.
type metricsMeter struct {
	client rest.Interface
	start  serverReading
}

// metricsTimeout bounds each reading of /metrics.
const metricsTimeout = 10 * time.Second

func (c *Common) startMetricsMeter(ctx context.Context, now time.Time) metricsMeter {
	cfg := rest.CopyConfig(c.REST)
	cfg.AcceptContentTypes = "text/plain"
	cfg.Timeout = metricsTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		c.Logger.Debug("server metrics not read", "err", err)
		return metricsMeter{}
	}
	client := dc.RESTClient()
	start, err := readServerMetrics(ctx, client, now)
	if err != nil {
		c.Logger.Debug("server metrics not read", "err", err)
		return metricsMeter{}
	}
	return metricsMeter{client: client, start: start}
}

// stop reads /metrics again and returns what the server's collector and
// process spent since the start, and the puts its embedded etcd made, ops
// being what the scenario did; each is nil when a reading lacked its
// series or failed. The process's figures have no PID, no peak and no
// split of its memory, which /metrics does not give.
func (m metricsMeter) stop(ctx context.Context, now time.Time, ops uint64) (*CollectorStats, *ProcessStats, *EtcdPutStats) {
	if m.client == nil {
		return nil, nil, nil
	}
	end, err := readServerMetrics(ctx, m.client, now)
	if err != nil {
		return nil, nil, nil
	}
	var gc *CollectorStats
	if a, b := m.start.collector, end.collector; a != nil && b != nil {
		gc = &CollectorStats{CPUSeconds: b.cpuSeconds - a.cpuSeconds, Collections: uint64(b.cycles - a.cycles)}
		if ops > 0 {
			gc.CPUSecondsPer1000Ops = gc.CPUSeconds / float64(ops) * 1000
		}
	}
	var proc *ProcessStats
	if a, b := m.start.process, end.process; a != nil && b != nil {
		cpu := b.cpuSeconds - a.cpuSeconds
		proc = &ProcessStats{Source: SourceMetrics, CPUSeconds: cpu, RSSBytes: b.rss}
		if wall := b.at.Sub(a.at).Seconds(); wall > 0 {
			proc.CPUCores = cpu / wall
		}
		if ops > 0 {
			proc.CPUSecondsPer1000Ops = cpu * 1000 / float64(ops)
		}
	}
	var puts *EtcdPutStats
	if a, b := m.start.puts, end.puts; a != nil && b != nil && *b >= *a {
		puts = &EtcdPutStats{Puts: uint64(*b - *a)}
		if ops > 0 {
			puts.PerOp = float64(puts.Puts) / float64(ops)
		}
	}
	return gc, proc, puts
}

// sampler returns a function that reads the server's process from
// /metrics again at each call and gives the cores it used since the call
// before (the first: since m started) and its RSS; ok is false when the
// server gives no such series or cannot be read.
func (m metricsMeter) sampler(ctx context.Context) func(now time.Time) (cores float64, rss uint64, ok bool) {
	prev := m.start.process
	return func(now time.Time) (float64, uint64, bool) {
		if m.client == nil || prev == nil {
			return 0, 0, false
		}
		r, err := readServerMetrics(ctx, m.client, now)
		if err != nil || r.process == nil {
			return 0, 0, false
		}
		var cores float64
		if wall := r.process.at.Sub(prev.at).Seconds(); wall > 0 {
			cores = (r.process.cpuSeconds - prev.cpuSeconds) / wall
		}
		prev = r.process
		return cores, r.process.rss, true
	}
}

// readServerMetrics reads the server's /metrics at now.
func readServerMetrics(ctx context.Context, client rest.Interface, now time.Time) (serverReading, error) {
	body, err := client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return serverReading{}, err
	}
	return parseServerMetrics(body, now)
}

// parseServerMetrics finds the collector's, the process's and etcd's
// series in a /metrics page in Prometheus' text format. A page that does
// not parse is an error; one without the series of a part leaves that part
// nil.
func parseServerMetrics(page []byte, now time.Time) (serverReading, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return serverReading{}, err
	}
	var r serverReading
	cpu, err1 := oneValue(families, collectorCPUMetric, dto.MetricType_COUNTER)
	cycles, err2 := oneValue(families, collectorCyclesMetric, dto.MetricType_COUNTER)
	if err1 == nil && err2 == nil {
		r.collector = &collectorReading{cpuSeconds: cpu, cycles: cycles}
	}
	pcpu, err1 := oneValue(families, processCPUMetric, dto.MetricType_COUNTER)
	rss, err2 := oneValue(families, processRSSMetric, dto.MetricType_GAUGE)
	if err1 == nil && err2 == nil && rss >= 0 && rss < math.MaxUint64 {
		r.process = &processReading{at: now, cpuSeconds: pcpu, rss: uint64(rss)}
	}
	if puts, err := oneValue(families, etcdPutsMetric, dto.MetricType_COUNTER); err == nil && puts >= 0 && puts < math.MaxUint64 {
		r.puts = &puts
	}
	return r, nil
}

// oneValue is the value of the metric name, which must have one series of
// type typ.
func oneValue(families map[string]*dto.MetricFamily, name string, typ dto.MetricType) (float64, error) {
	f, ok := families[name]
	if !ok {
		return 0, fmt.Errorf("no %s on /metrics", name)
	}
	if f.GetType() != typ || len(f.GetMetric()) != 1 {
		return 0, fmt.Errorf("%s is not one %s", name, strings.ToLower(typ.String()))
	}
	m := f.GetMetric()[0]
	if typ == dto.MetricType_GAUGE {
		return m.GetGauge().GetValue(), nil
	}
	return m.GetCounter().GetValue(), nil
}
