package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestLogTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []float64
	}{
		{1000, 100000, []float64{1000, 2000, 5000, 10000, 20000, 50000, 100000}},
		{1500, 80000, []float64{1000, 2000, 5000, 10000, 20000, 50000, 100000}},
		{200, 400, []float64{200, 300, 400}},
		{250, 420, []float64{200, 300, 400, 500}},
		{300, 1000, []float64{300, 400, 500, 600, 700, 800, 900, 1000}},
		{300, 1100, []float64{200, 500, 1000, 2000}},
		{1000, 1000, []float64{500, 600, 700, 800, 900, 1000, 2000}},
		{300, 300, []float64{100, 200, 300, 400, 500, 600}},
		{1000, 1e6, []float64{1000, 10000, 100000, 1e6}},
		{1, 1e6, []float64{1, 10, 100, 1000, 10000, 100000, 1e6}},
		{0.3, 7, []float64{0.2, 0.5, 1, 2, 5, 10}},
	}
	for _, tt := range tests {
		got := logTicks(tt.lo, tt.hi)
		if !slices.Equal(got.ticks, tt.want) {
			t.Errorf("logTicks(%v, %v) = %v, want %v", tt.lo, tt.hi, got.ticks, tt.want)
		}
		if got.lo != tt.want[0] || got.hi != tt.want[len(tt.want)-1] {
			t.Errorf("logTicks(%v, %v) range %v to %v, want the outer ticks", tt.lo, tt.hi, got.lo, got.hi)
		}
	}
}

func TestLinearTicks(t *testing.T) {
	tests := []struct {
		max  float64
		want []float64
		text []string
	}{
		{1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, nil},
		{3.1, []float64{0, 1, 2, 3, 4}, []string{"0", "1", "2", "3", "4"}},
		{4.1, []float64{0, 2, 4, 6}, nil},
		{1.1, []float64{0, 0.5, 1, 1.5}, []string{"0.0", "0.5", "1.0", "1.5"}},
		{0.0123, []float64{0, 0.005, 0.01, 0.015}, []string{"0.000", "0.005", "0.010", "0.015"}},
		{180, []float64{0, 50, 100, 150, 200}, []string{"0", "50", "100", "150", "200"}},
		{86.2, []float64{0, 20, 40, 60, 80, 100}, nil},
	}
	for _, tt := range tests {
		got := linearTicks(tt.max)
		if !slices.Equal(got.ticks, tt.want) {
			t.Errorf("linearTicks(%v) = %v, want %v", tt.max, got.ticks, tt.want)
			continue
		}
		if got.lo != 0 || got.hi != tt.want[len(tt.want)-1] {
			t.Errorf("linearTicks(%v) range %v to %v", tt.max, got.lo, got.hi)
		}
		for i, s := range tt.text {
			if f := formatTick(got.ticks[i], got.step); f != s {
				t.Errorf("linearTicks(%v): tick %v prints %q, want %q", tt.max, got.ticks[i], f, s)
			}
		}
	}
}

func TestFormatNodes(t *testing.T) {
	for v, want := range map[float64]string{200: "200", 1000: "1k", 2000: "2k", 50000: "50k", 100000: "100k", 1e6: "1M", 0.5: "0.5"} {
		if got := formatNodes(v); got != want {
			t.Errorf("formatNodes(%v) = %q, want %q", v, got, want)
		}
	}
}

// fleetReport is a fleet run of n nodes at the given share of the offered
// rate.
func fleetReport(n int, keptUp float64, server bool) *Report {
	r := &Report{
		Scenario: "fleet", Ops: uint64(n) * 6, OpsPerSecond: float64(n) / 10 * keptUp, TargetOpsPerSecond: float64(n) / 10,
		Latency: Percentiles{Count: uint64(n) * 6, P50: 2, P99: 5 + float64(n)/1000, Max: 40},
		Fleet:   &FleetReport{Nodes: n},
	}
	if server {
		r.ServerProcess = &ProcessStats{CPUSeconds: 3, CPUSecondsPer1000Ops: 0.5, RSSBytes: 80<<20 + uint64(n)<<11}
	}
	return r
}

// withCollector adds the server's collector figures to r.
func withCollector(r *Report) *Report {
	r.ServerCollector = &CollectorStats{CPUSeconds: 0.3, CPUSecondsPer1000Ops: 0.05, Collections: 4}
	return r
}

// svgCounts is what a test looks for in a plot.
type svgCounts struct {
	panels  int
	markers []int // data markers per panel
	behind  int   // hollow ones, in all panels
	legend  int   // markers outside the panels
	texts   []string
}

// readSVG decodes the whole document as XML and counts its parts.
func readSVG(t *testing.T, doc []byte) svgCounts {
	t.Helper()
	var c svgCounts
	dec := xml.NewDecoder(bytes.NewReader(doc))
	inPanel, inText, root := false, false, ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, doc)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			class := ""
			for _, a := range el.Attr {
				if a.Name.Local == "class" {
					class = a.Value
				}
			}
			switch {
			case el.Name.Local == "g" && class == "panel":
				inPanel = true
				c.panels++
				c.markers = append(c.markers, 0)
			case el.Name.Local == "circle" && strings.HasPrefix(class, "point"):
				if !inPanel {
					c.legend++
					break
				}
				c.markers[len(c.markers)-1]++
				if strings.Contains(class, "behind") {
					c.behind++
				}
			case el.Name.Local == "text":
				inText = true
			}
		case xml.EndElement:
			switch el.Name.Local {
			case "g":
				inPanel = false
			case "text":
				inText = false
			}
		case xml.CharData:
			if inText {
				c.texts = append(c.texts, string(el))
			}
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	return c
}

func TestWritePlot(t *testing.T) {
	tests := []struct {
		name    string
		reports []*Report
		title   string
		markers []int
		behind  int
		legend  int
	}{
		{"the curve", []*Report{fleetReport(10000, 1, true), fleetReport(1000, 1, true), fleetReport(50000, 1, true), fleetReport(100000, 1, true)}, "", []int{4, 4, 4}, 0, 1},
		{"one fell behind", []*Report{fleetReport(1000, 1, true), fleetReport(100000, 0.8, true)}, "16 cores <AMD> & NVMe", []int{2, 2, 2}, 3, 2},
		{"just keeping up", []*Report{fleetReport(1000, 0.96, true)}, "", []int{1, 1, 1}, 0, 1},
		{"server not measured", []*Report{fleetReport(1000, 1, true), fleetReport(2000, 1, false)}, "", []int{1, 1, 2}, 0, 1},
		// The collector's panel comes second, with a marker for each run
		// that reports it.
		{"collector", []*Report{withCollector(fleetReport(1000, 1, true)), fleetReport(10000, 1, true), withCollector(fleetReport(100000, 1, true))}, "", []int{3, 2, 3, 3}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WritePlot(&b, tt.reports, PlotConfig{Title: tt.title}); err != nil {
				t.Fatal(err)
			}
			c := readSVG(t, b.Bytes())
			if c.panels != len(tt.markers) || !slices.Equal(c.markers, tt.markers) {
				t.Errorf("%d panels with %v markers, want %d with %v", c.panels, c.markers, len(tt.markers), tt.markers)
			}
			if hasGC := slices.Contains(c.texts, collectorPanel.title); hasGC != (len(tt.markers) == 4) {
				t.Errorf("collector panel drawn: %v, with %d panels", hasGC, c.panels)
			}
			if c.behind != tt.behind || c.legend != tt.legend {
				t.Errorf("%d hollow markers, %d in the legend; want %d and %d", c.behind, c.legend, tt.behind, tt.legend)
			}
			title := tt.title
			if title == "" {
				title = "leasehold fleet scaling"
			}
			for _, want := range []string{title, "nodes (N), logarithmic", "KiB", "1k"} {
				if !slices.Contains(c.texts, want) {
					t.Errorf("no text %q in %q", want, c.texts)
				}
			}
		})
	}
}

func TestWritePlotRejects(t *testing.T) {
	tests := []struct {
		name    string
		reports []*Report
	}{
		{"none", nil},
		{"a watch report", []*Report{fleetReport(1000, 1, true), {Scenario: "watch", Watch: &WatchReport{}}}},
		{"a fleet report without nodes", []*Report{{Scenario: "fleet"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := WritePlot(io.Discard, tt.reports, PlotConfig{}); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestReadReports(t *testing.T) {
	var in bytes.Buffer
	for _, n := range []int{1000, 2000} {
		if err := fleetReport(n, 1, true).WriteJSON(&in); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadReports(&in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Fleet.Nodes != 1000 || got[1].Fleet.Nodes != 2000 {
		t.Errorf("read %d reports: %+v", len(got), got)
	}
	if _, err := ReadReports(strings.NewReader(`{"scenario": "fleet"} {"scenario": `)); err == nil {
		t.Error("a truncated second report was accepted")
	}
	if got, err := ReadReports(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Errorf("empty input: %v, %v", got, err)
	}
}

// TestWritePlotLoadRatio: the server's CPU against the load generator's
// gets a panel when the runs measured both as separate processes, without
// the collector when the runs report it.
func TestWritePlotLoadRatio(t *testing.T) {
	withLoad := func(r *Report, pid int) *Report {
		r.ServerProcess.PID = 10
		r.LoadGenerator = &ProcessStats{PID: pid, CPUSeconds: 1.5}
		return r
	}
	tests := []struct {
		name    string
		reports []*Report
		title   string // the ratio's panel; "" for none
		markers []int
		labels  []string
	}{
		// 3 CPU-s of the server's, 0.3 of them its collector's, against
		// 1.5 of the load generator's.
		{"with the collector", []*Report{withLoad(withCollector(fleetReport(1000, 1, true)), 20), withLoad(withCollector(fleetReport(100000, 1, true)), 20)},
			loadNoGCPanel.title, []int{2, 2, 2, 2, 2}, []string{"1.8"}},
		{"without it", []*Report{withLoad(fleetReport(1000, 1, true), 20), withLoad(fleetReport(100000, 1, true), 20)},
			loadPanel.title, []int{2, 2, 2, 2}, []string{"2"}},
		// A run without the collector's figures is left out of the ratio
		// without them, rather than mixed in with its collector counted.
		{"some without the collector", []*Report{withLoad(withCollector(fleetReport(1000, 1, true)), 20), withLoad(fleetReport(100000, 1, true), 20)},
			loadNoGCPanel.title, []int{2, 1, 1, 2, 2}, []string{"1.8"}},
		{"one process", []*Report{withLoad(withCollector(fleetReport(1000, 1, true)), 10)}, "", []int{1, 1, 1, 1}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WritePlot(&b, tt.reports, PlotConfig{}); err != nil {
				t.Fatal(err)
			}
			c := readSVG(t, b.Bytes())
			if !slices.Equal(c.markers, tt.markers) {
				t.Errorf("%v markers per panel, want %v", c.markers, tt.markers)
			}
			for _, p := range []panel{loadPanel, loadNoGCPanel} {
				if got, want := slices.Contains(c.texts, p.title), p.title == tt.title; got != want {
					t.Errorf("panel %q drawn: %v, want %v", p.title, got, want)
				}
			}
			for _, want := range tt.labels {
				if !slices.Contains(c.texts, want) {
					t.Errorf("no label %q in %q", want, c.texts)
				}
			}
		})
	}
}

// TestWritePlotRepeatedRuns: several runs at one N each get a marker, the
// line joins each N's median, and the label gives the median alone.
func TestWritePlotRepeatedRuns(t *testing.T) {
	withCPU := func(n int, cpu float64) *Report {
		r := fleetReport(n, 1, true)
		r.ServerProcess.CPUSecondsPer1000Ops = cpu
		return r
	}
	reports := []*Report{withCPU(1000, 0.41), withCPU(10000, 0.71), withCPU(1000, 0.63), withCPU(10000, 0.93), withCPU(10000, 0.87)}
	var b bytes.Buffer
	if err := WritePlot(&b, reports, PlotConfig{}); err != nil {
		t.Fatal(err)
	}
	c := readSVG(t, b.Bytes())
	if !slices.Equal(c.markers, []int{5, 5, 5}) || c.legend != 1 {
		t.Errorf("%v markers and %d in the legend, want 5 a panel and 1", c.markers, c.legend)
	}
	for _, want := range []string{"0.52", "0.87", "median of the runs at each N (its figure)"} {
		if !slices.Contains(c.texts, want) {
			t.Errorf("no text %q in %q", want, c.texts)
		}
	}
	for _, single := range []string{"0.41", "0.63", "0.71", "0.93"} {
		if slices.Contains(c.texts, single) {
			t.Errorf("a single run's figure %q labelled", single)
		}
	}
	doc := b.String()
	start := strings.Index(doc, `<polyline points="`)
	if start < 0 {
		t.Fatal("no line")
	}
	points := strings.Fields(doc[start+len(`<polyline points="`) : start+strings.Index(doc[start:], `" `)])
	if len(points) != 2 {
		t.Errorf("the first panel's line has %d points (%q), want one per N", len(points), points)
	}

	// One run per N: no line in the legend, as before.
	b.Reset()
	if err := WritePlot(&b, reports[:2], PlotConfig{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "median of the runs") {
		t.Error("the median's legend drawn with one run per N")
	}
}

func TestMedian(t *testing.T) {
	for _, tt := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{4, 1}, 2.5}, {[]float64{9, 1, 5}, 5}, {[]float64{7, 1, 3, 5}, 4}} {
		in := slices.Clone(tt.in)
		if got := median(tt.in); got != tt.want || !slices.Equal(in, tt.in) {
			t.Errorf("median(%v) = %v, want %v, input left alone", in, got, tt.want)
		}
	}
}
