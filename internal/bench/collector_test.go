package bench

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
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

func TestParseCollector(t *testing.T) {
	got, err := parseCollector([]byte(collectorPage))
	if err != nil {
		t.Fatal(err)
	}
	if got != (collectorReading{cpuSeconds: 12.5, cycles: 42}) {
		t.Errorf("parseCollector = %+v, want 12.5 CPU-s in 42 cycles", got)
	}

	for name, page := range map[string]string{
		// Another server's page: no such series.
		"absent": "# TYPE go_goroutines gauge\ngo_goroutines 17\n",
		// The series, but not as the counter it is.
		"gauge": strings.Replace(collectorPage, "go_cpu_classes_gc_total_cpu_seconds_total counter", "go_cpu_classes_gc_total_cpu_seconds_total gauge", 1),
		// Two series of it (labels the runtime's never has).
		"two series": collectorPage + "go_gc_cycles_total_gc_cycles_total{x=\"y\"} 3\n",
		// Not Prometheus' text format at all.
		"html": "<html><body>not metrics</body></html>",
	} {
		if got, err := parseCollector([]byte(page)); err == nil {
			t.Errorf("%s: parseCollector = %+v, want an error", name, got)
		}
	}
}

func TestCollectorMeter(t *testing.T) {
	// The server's collector at the start of the measurement, then at its
	// end.
	readings := []collectorReading{{cpuSeconds: 10, cycles: 3}, {cpuSeconds: 12.5, cycles: 7}}
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		rd := readings[min(int(served.Add(1))-1, len(readings)-1)]
		fmt.Fprintf(w, "# TYPE %s counter\n%s %g\n# TYPE %s counter\n%s %g\n",
			collectorCPUMetric, collectorCPUMetric, rd.cpuSeconds, collectorCyclesMetric, collectorCyclesMetric, rd.cycles)
	}))
	defer srv.Close()
	c := Common{REST: &rest.Config{Host: srv.URL}, Logger: slog.New(slog.DiscardHandler)}
	m := c.startCollectorMeter(t.Context())
	got := m.stop(t.Context(), 500)
	want := CollectorStats{CPUSeconds: 2.5, Collections: 4, CPUSecondsPer1000Ops: 5}
	if got == nil || *got != want {
		t.Errorf("stop = %+v, want %+v", got, want)
	}

	// A server without the series: nothing measured, nothing reported.
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE go_goroutines gauge\ngo_goroutines 17")
	}))
	defer bare.Close()
	c.REST = &rest.Config{Host: bare.URL}
	if s := c.startCollectorMeter(t.Context()).stop(t.Context(), 500); s != nil {
		t.Errorf("a server without the collector's series: %+v", s)
	}
}

func TestCollectorMeterInert(t *testing.T) {
	// A meter whose first reading failed reports nothing, and reads nothing.
	if s := (collectorMeter{}).stop(t.Context(), 10); s != nil {
		t.Errorf("inert meter reported %+v", s)
	}
}

// FuzzParseCollector: any page gives a reading or an error, never a panic.
func FuzzParseCollector(f *testing.F) {
	f.Add([]byte(collectorPage))
	f.Add([]byte("go_gc_cycles_total_gc_cycles_total 1\n"))
	f.Add([]byte("# TYPE x counter\nx{a=\"\\\"\"} 1e309\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		r, err := parseCollector(page)
		if err != nil && r != (collectorReading{}) {
			t.Errorf("error %v with a reading %+v", err, r)
		}
	})
}
