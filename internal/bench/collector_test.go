package bench

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

const collectorPage = `# HELP go_cpu_classes_gc_total_cpu_seconds_total Estimated total CPU time spent performing GC tasks.
# TYPE go_cpu_classes_gc_total_cpu_seconds_total counter
go_cpu_classes_gc_total_cpu_seconds_total 12.5
# HELP go_gc_cycles_total_gc_cycles_total Count of all completed GC cycles.
# TYPE go_gc_cycles_total_gc_cycles_total counter
go_gc_cycles_total_gc_cycles_total 42
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 17
`

const processPage = `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 81.25
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 5.36870912e+08
`

func TestParseServerMetrics(t *testing.T) {
	now := time.Unix(1700000000, 0)
	got, err := parseServerMetrics([]byte(collectorPage+processPage), now)
	if err != nil {
		t.Fatal(err)
	}
	if got.collector == nil || *got.collector != (collectorReading{cpuSeconds: 12.5, cycles: 42}) {
		t.Errorf("collector = %+v, want 12.5 CPU-s in 42 cycles", got.collector)
	}
	if got.process == nil || *got.process != (processReading{at: now, cpuSeconds: 81.25, rss: 512 << 20}) {
		t.Errorf("process = %+v, want 81.25 CPU-s and 512 MiB", got.process)
	}
	if got.puts != nil {
		t.Errorf("etcd puts %v from a page without them", *got.puts)
	}
	got, err = parseServerMetrics([]byte(processPage+"# TYPE etcd_mvcc_put_total counter\netcd_mvcc_put_total 91702\n"), now)
	if err != nil || got.puts == nil || *got.puts != 91702 {
		t.Errorf("etcd puts from leasehold's page: %v, %v; want 91702", got.puts, err)
	}

	// A part whose series are missing or malformed is left out; the other
	// part stays.
	for name, tt := range map[string]struct {
		page               string
		collector, process bool
	}{
		"collector only":      {collectorPage, true, false},
		"process only":        {processPage, false, true},
		"neither":             {"# TYPE go_goroutines gauge\ngo_goroutines 17\n", false, false},
		"collector as gauge":  {strings.Replace(collectorPage, "go_cpu_classes_gc_total_cpu_seconds_total counter", "go_cpu_classes_gc_total_cpu_seconds_total gauge", 1) + processPage, false, true},
		"two series of it":    {collectorPage + "go_gc_cycles_total_gc_cycles_total{x=\"y\"} 3\n" + processPage, false, true},
		"rss as counter":      {collectorPage + strings.Replace(processPage, "process_resident_memory_bytes gauge", "process_resident_memory_bytes counter", 1), true, false},
		"negative rss":        {collectorPage + strings.Replace(processPage, "5.36870912e+08", "-1", 1), true, false},
		"rss beyond 64 bits":  {collectorPage + strings.Replace(processPage, "5.36870912e+08", "1e30", 1), true, false},
		"cpu without the rss": {collectorPage + "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n", true, false},
	} {
		got, err := parseServerMetrics([]byte(tt.page), now)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if (got.collector != nil) != tt.collector || (got.process != nil) != tt.process {
			t.Errorf("%s: collector %+v, process %+v; want collector %v, process %v", name, got.collector, got.process, tt.collector, tt.process)
		}
	}

	// Not Prometheus' text format at all.
	if got, err := parseServerMetrics([]byte("<html><body>not metrics</body></html>"), now); err == nil {
		t.Errorf("an HTML page: %+v, want an error", got)
	}
}

// metricsServer serves /metrics from the readings in turn, the last one
// again once all have been served; a reading's nil part is left out of
// its page.
func metricsServer(t *testing.T, readings []serverReading) *httptest.Server {
	t.Helper()
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		rd := readings[min(int(served.Add(1))-1, len(readings)-1)]
		fmt.Fprintln(w, "# TYPE go_goroutines gauge\ngo_goroutines 17")
		if c := rd.collector; c != nil {
			fmt.Fprintf(w, "# TYPE %s counter\n%s %g\n# TYPE %s counter\n%s %g\n",
				collectorCPUMetric, collectorCPUMetric, c.cpuSeconds, collectorCyclesMetric, collectorCyclesMetric, c.cycles)
		}
		if p := rd.process; p != nil {
			fmt.Fprintf(w, "# TYPE %s counter\n%s %g\n# TYPE %s gauge\n%s %d\n",
				processCPUMetric, processCPUMetric, p.cpuSeconds, processRSSMetric, processRSSMetric, p.rss)
		}
		if p := rd.puts; p != nil {
			fmt.Fprintf(w, "# TYPE %s counter\n%s %g\n", etcdPutsMetric, etcdPutsMetric, *p)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestMetricsMeter(t *testing.T) {
	// The server's collector and process at the start of the measurement,
	// then at its end, 20 s later.
	start := time.Unix(1700000000, 0)
	end := start.Add(20 * time.Second)
	srv := metricsServer(t, []serverReading{
		{&collectorReading{cpuSeconds: 10, cycles: 3}, &processReading{cpuSeconds: 100, rss: 300 << 20}, ptr.To(4000.0)},
		{&collectorReading{cpuSeconds: 12.5, cycles: 7}, &processReading{cpuSeconds: 116, rss: 320 << 20}, ptr.To(4250.0)},
	})
	c := Common{REST: &rest.Config{Host: srv.URL}, Logger: slog.New(slog.DiscardHandler)}
	gc, proc, puts := c.startMetricsMeter(t.Context(), start).stop(t.Context(), end, 500)
	if want := (EtcdPutStats{Puts: 250, PerOp: 0.5}); puts == nil || *puts != want {
		t.Errorf("etcd puts = %+v, want %+v", puts, want)
	}
	wantGC := CollectorStats{CPUSeconds: 2.5, Collections: 4, CPUSecondsPer1000Ops: 5}
	if gc == nil || *gc != wantGC {
		t.Errorf("collector = %+v, want %+v", gc, wantGC)
	}
	wantProc := ProcessStats{Source: SourceMetrics, CPUSeconds: 16, CPUCores: 0.8, CPUSecondsPer1000Ops: 32, RSSBytes: 320 << 20}
	if proc == nil || *proc != wantProc {
		t.Errorf("process = %+v, want %+v", proc, wantProc)
	}

	// A server without the series: nothing measured, nothing reported.
	c.REST = &rest.Config{Host: metricsServer(t, []serverReading{{}}).URL}
	if gc, proc, puts := c.startMetricsMeter(t.Context(), start).stop(t.Context(), end, 500); gc != nil || proc != nil || puts != nil {
		t.Errorf("a server without the series: collector %+v, process %+v, etcd puts %+v", gc, proc, puts)
	}

	// Another API server's: its process, without the collector's series.
	c.REST = &rest.Config{Host: metricsServer(t, []serverReading{
		{process: &processReading{cpuSeconds: 1, rss: 1 << 30}},
		{process: &processReading{cpuSeconds: 3, rss: 1 << 30}},
	}).URL}
	if gc, proc, puts := c.startMetricsMeter(t.Context(), start).stop(t.Context(), end, 0); gc != nil || proc == nil || proc.CPUSeconds != 2 || proc.CPUSecondsPer1000Ops != 0 || puts != nil {
		t.Errorf("a server without the collector's or etcd's series: collector %+v, process %+v, etcd puts %+v", gc, proc, puts)
	}
}

func TestMetricsSampler(t *testing.T) {
	// The progress lines' figures of a server elsewhere: cores since the
	// reading before, and the RSS.
	start := time.Unix(1700000000, 0)
	srv := metricsServer(t, []serverReading{
		{process: &processReading{cpuSeconds: 100, rss: 300 << 20}},
		{process: &processReading{cpuSeconds: 101.5, rss: 310 << 20}},
		{process: &processReading{cpuSeconds: 101.75, rss: 305 << 20}},
	})
	c := Common{REST: &rest.Config{Host: srv.URL}, Logger: slog.New(slog.DiscardHandler)}
	sample := c.startMetricsMeter(t.Context(), start).sampler(t.Context())
	if cores, rss, ok := sample(start.Add(2 * time.Second)); !ok || cores != 0.75 || rss != 310<<20 {
		t.Errorf("first sample: %v cores, RSS %d, ok %v; want 0.75, 310 MiB", cores, rss, ok)
	}
	if cores, rss, ok := sample(start.Add(3 * time.Second)); !ok || cores != 0.25 || rss != 305<<20 {
		t.Errorf("second sample: %v cores, RSS %d, ok %v; want 0.25, 305 MiB", cores, rss, ok)
	}
	// A server without the process's series gives nothing.
	c.REST = &rest.Config{Host: metricsServer(t, []serverReading{{collector: &collectorReading{cpuSeconds: 1, cycles: 1}}}).URL}
	if _, _, ok := c.startMetricsMeter(t.Context(), start).sampler(t.Context())(start.Add(time.Second)); ok {
		t.Error("a server without the process's series was sampled")
	}
	if _, _, ok := (metricsMeter{}).sampler(t.Context())(start); ok {
		t.Error("an inert meter was sampled")
	}
}

func TestMetricsMeterInert(t *testing.T) {
	// A meter whose first reading failed reports nothing, and reads nothing.
	if gc, proc, puts := (metricsMeter{}).stop(t.Context(), time.Now(), 10); gc != nil || proc != nil || puts != nil {
		t.Errorf("inert meter reported %+v, %+v, %+v", gc, proc, puts)
	}
}

// FuzzParseServerMetrics: any page gives a reading or an error, never a
// panic, and a part only with both its series.
func FuzzParseServerMetrics(f *testing.F) {
	f.Add([]byte(collectorPage + processPage))
	f.Add([]byte("go_gc_cycles_total_gc_cycles_total 1\n"))
	f.Add([]byte("# TYPE x counter\nx{a=\"\\\"\"} 1e309\n"))
	f.Add([]byte("# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes NaN\n"))
	f.Add([]byte("# TYPE etcd_mvcc_put_total counter\netcd_mvcc_put_total -3\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		r, err := parseServerMetrics(page, time.Time{})
		if err != nil && (r.collector != nil || r.process != nil || r.puts != nil) {
			t.Errorf("error %v with a reading %+v", err, r)
		}
	})
}
