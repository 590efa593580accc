package bench

import (
	"bytes"
	"context"
	"fmt"
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

// CollectorStats is what the server's Go garbage collector spent during a
// measurement, by the runtime's own estimate. The runtime counts a
// collection's time when it ends, so the figures cover the collections
// that ended within the measurement.
type CollectorStats struct {
	CPUSeconds           float64 `json:"cpuSeconds"`
	CPUSecondsPer1000Ops float64 `json:"cpuSecondsPer1000Ops,omitempty"`
	Collections          uint64  `json:"collections"`
}

// collectorReading is one reading of the two series.
type collectorReading struct{ cpuSeconds, cycles float64 }

// collectorMeter reads the server's collector at the start of a
// measurement and again at its end. It is inert when the first reading
// failed.
type collectorMeter struct {
	client rest.Interface
	start  collectorReading
}

// collectorTimeout bounds each reading of /metrics.
const collectorTimeout = 10 * time.Second

func (c *Common) startCollectorMeter(ctx context.Context) collectorMeter {
	cfg := rest.CopyConfig(c.REST)
	cfg.AcceptContentTypes = "text/plain"
	cfg.Timeout = collectorTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		c.Logger.Debug("server collector not measured", "err", err)
		return collectorMeter{}
	}
	client := dc.RESTClient()
	start, err := readCollector(ctx, client)
	if err != nil {
		c.Logger.Debug("server collector not measured", "err", err)
		return collectorMeter{}
	}
	return collectorMeter{client: client, start: start}
}

// stop reads the collector again and returns what it spent since the
// start, ops being what the scenario did; nil when either reading failed.
func (m collectorMeter) stop(ctx context.Context, ops uint64) *CollectorStats {
	if m.client == nil {
		return nil
	}
	end, err := readCollector(ctx, m.client)
	if err != nil {
		return nil
	}
	s := &CollectorStats{CPUSeconds: end.cpuSeconds - m.start.cpuSeconds, Collections: uint64(end.cycles - m.start.cycles)}
	if ops > 0 {
		s.CPUSecondsPer1000Ops = s.CPUSeconds / float64(ops) * 1000
	}
	return s
}

// readCollector reads the two series from the server's /metrics.
func readCollector(ctx context.Context, client rest.Interface) (collectorReading, error) {
	body, err := client.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return collectorReading{}, err
	}
	return parseCollector(body)
}

// parseCollector finds the two series in a /metrics page in Prometheus'
// text format.
func parseCollector(page []byte) (collectorReading, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return collectorReading{}, err
	}
	cpu, err := counterValue(families, collectorCPUMetric)
	if err != nil {
		return collectorReading{}, err
	}
	cycles, err := counterValue(families, collectorCyclesMetric)
	if err != nil {
		return collectorReading{}, err
	}
	return collectorReading{cpuSeconds: cpu, cycles: cycles}, nil
}

// counterValue is the value of the counter name, which must have one series.
func counterValue(families map[string]*dto.MetricFamily, name string) (float64, error) {
	f, ok := families[name]
	if !ok {
		return 0, fmt.Errorf("no %s on /metrics", name)
	}
	if f.GetType() != dto.MetricType_COUNTER || len(f.GetMetric()) != 1 {
		return 0, fmt.Errorf("%s is not one counter", name)
	}
	return f.GetMetric()[0].GetCounter().GetValue(), nil
}
