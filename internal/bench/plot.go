package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// keptUpFraction is the share of the offered renewals per second below
// which a fleet run is drawn as one that fell behind.
const keptUpFraction = 0.95

// ReadReports reads the reports in r: one JSON document, or several one
// after another, as `leasehold bench SCENARIO --json` prints them.
func ReadReports(r io.Reader) ([]*Report, error) {
	dec := json.NewDecoder(r)
	var out []*Report
	for {
		var rep Report
		err := dec.Decode(&rep)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("report %d: %w", len(out)+1, err)
		}
		out = append(out, &rep)
	}
}

// PlotConfig configures WritePlot. Zero values mean defaults.
type PlotConfig struct {
	// Title heads the image, for example the machine the runs were made
	// on; default "leasehold fleet scaling".
	Title string
}

// scalePoint is one fleet run as the plot shows it. A figure the report
// lacks is NaN and is left out of its panel.
type scalePoint struct {
	nodes  int
	cpu    float64 // server CPU-seconds per 1000 renewals
	gc     float64 // of it, the server's Go collector
	load   float64 // server CPU ÷ load generator CPU
	loadGC float64 // the same without the server's collector
	rss    float64 // server resident set per lease, KiB
	p99    float64 // renewal latency, ms
	behind bool    // renewed well below the offered rate
}

func scalePoints(reports []*Report) ([]scalePoint, error) {
	var pts []scalePoint
	for i, r := range reports {
		if r.Scenario != "fleet" || r.Fleet == nil || r.Fleet.Nodes <= 0 {
			return nil, fmt.Errorf("bench: report %d is a %q report, not a fleet one", i+1, r.Scenario)
		}
		p := scalePoint{nodes: r.Fleet.Nodes, cpu: math.NaN(), gc: math.NaN(), load: math.NaN(), loadGC: math.NaN(), rss: math.NaN(), p99: math.NaN()}
		if r.Latency.Count > 0 {
			p.p99 = r.Latency.P99
		}
		if s := r.ServerProcess; s != nil {
			if s.CPUSecondsPer1000Ops > 0 {
				p.cpu = s.CPUSecondsPer1000Ops
			}
			p.rss = float64(s.RSSBytes) / 1024 / float64(r.Fleet.Nodes)
		}
		if c := r.ServerCollector; c != nil && r.Ops > 0 {
			p.gc = c.CPUSecondsPer1000Ops
		}
		if c := r.serverToLoadCPU(); c != nil {
			p.load = c.All
			if r.ServerCollector != nil {
				p.loadGC = c.WithoutCollector
			}
		}
		p.behind = r.TargetOpsPerSecond > 0 && r.OpsPerSecond < keptUpFraction*r.TargetOpsPerSecond
		pts = append(pts, p)
	}
	slices.SortStableFunc(pts, func(a, b scalePoint) int { return a.nodes - b.nodes })
	return pts, nil
}

// Layout of the image, in pixels.
const (
	plotWidth   = 760
	plotLeft    = 80  // room for the y tick labels and axis title
	plotRight   = 30  // margin right of the panels
	plotTop     = 90  // title and legend
	panelHeight = 190 // one panel's plotting area
	panelGap    = 60  // between two panels: the next panel's heading
	plotBottom  = 60  // x tick labels and axis title
)

// panel is one figure plotted against the number of nodes.
type panel struct {
	title, unit string
	value       func(scalePoint) float64
}

var (
	cpuPanel       = panel{"server CPU-seconds per 1 000 renewals", "CPU-s", func(p scalePoint) float64 { return p.cpu }}
	collectorPanel = panel{"of it, the server's Go garbage collector", "CPU-s", func(p scalePoint) float64 { return p.gc }}
	loadPanel      = panel{"server CPU ÷ the load generator's CPU", "ratio", func(p scalePoint) float64 { return p.load }}
	// loadNoGCPanel is loadPanel with the server's collector left out.
	loadNoGCPanel = panel{"server CPU without its collector ÷ the load generator's CPU", "ratio", func(p scalePoint) float64 { return p.loadGC }}
	rssPanel      = panel{"server resident memory per lease", "KiB", func(p scalePoint) float64 { return p.rss }}
	p99Panel      = panel{"renewal latency, 99th percentile", "ms", func(p scalePoint) float64 { return p.p99 }}
)

// panelsFor chooses the panels of pts. The collector's is there only when
// some run reports it (reports of other servers, and of leasehold before
// 7fbd5f1, do not); then the ratio of the server's CPU to the load
// generator's leaves the collector out, and the runs that do not report it
// are left out of that panel. The ratio is there only when some run has
// it: the server and the load generator were separate processes.
func panelsFor(pts []scalePoint) []panel {
	known := func(v func(scalePoint) float64) bool {
		return slices.ContainsFunc(pts, func(p scalePoint) bool { return !math.IsNaN(v(p)) })
	}
	gc := known(collectorPanel.value)
	panels := []panel{cpuPanel}
	if gc {
		panels = append(panels, collectorPanel)
	}
	switch {
	case gc && known(loadNoGCPanel.value):
		panels = append(panels, loadNoGCPanel)
	case !gc && known(loadPanel.value):
		panels = append(panels, loadPanel)
	}
	return append(panels, rssPanel, p99Panel)
}

// WritePlot draws the fleet reports as an SVG image: one panel per figure
// (server CPU per 1000 renewals, the part of it its Go collector took when
// the reports give it, the server's CPU against the load generator's when
// they were separate processes, server memory per lease, renewal p99
// latency) over
// a shared logarithmic axis of the number of nodes. Each run is a marker,
// hollow when it renewed below 95% of the offered rate; the line joins the
// median of the runs at each N, and each N is labelled with it.
func WritePlot(w io.Writer, reports []*Report, cfg PlotConfig) error {
	pts, err := scalePoints(reports)
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		return errors.New("bench: no fleet reports to plot")
	}
	if cfg.Title == "" {
		cfg.Title = "leasehold fleet scaling"
	}
	panels := panelsFor(pts)
	xt := logTicks(float64(pts[0].nodes), float64(pts[len(pts)-1].nodes))
	// The frame reaches a little beyond the outer ticks, so that no marker
	// sits on it.
	xlo, xhi := math.Log10(xt.lo), math.Log10(xt.hi)
	pad := 0.04 * (xhi - xlo)
	xlo, xhi = xlo-pad, xhi+pad
	innerW := float64(plotWidth - plotLeft - plotRight)
	xpos := func(n float64) float64 { return plotLeft + (math.Log10(n)-xlo)/(xhi-xlo)*innerW }
	height := plotTop + len(panels)*panelHeight + (len(panels)-1)*panelGap + plotBottom

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
`, plotWidth, height, plotWidth, height)
	text(&b, plotWidth/2.0, 26, "middle", `font-size="16" font-weight="bold"`, cfg.Title)
	legend(&b, pts)

	for i, pn := range panels {
		top := float64(plotTop + i*(panelHeight+panelGap))
		bottom := top + panelHeight
		maxY := 0.0
		for _, p := range pts {
			if v := pn.value(p); !math.IsNaN(v) {
				maxY = max(maxY, v)
			}
		}
		// Room above the highest marker for its label.
		yt := linearTicks(maxY * 1.1)
		ypos := func(v float64) float64 { return bottom - v/yt.hi*panelHeight }

		fmt.Fprintf(&b, "<g class=\"panel\">\n")
		text(&b, plotLeft, top-10, "start", `font-size="13" font-weight="bold"`, pn.title)
		for _, v := range yt.ticks {
			y := ypos(v)
			fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", plotLeft, y, plotWidth-plotRight, y)
			text(&b, plotLeft-6, y+4, "end", "", formatTick(v, yt.step))
		}
		for _, v := range xt.ticks {
			x := xpos(v)
			fmt.Fprintf(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, top, x, bottom)
			if i == len(panels)-1 {
				text(&b, x, bottom+16, "middle", "", formatNodes(v))
			}
		}
		fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n", plotLeft, top, innerW, panelHeight)
		fmt.Fprintf(&b, "<text x=\"20\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 20 %.1f)\">%s</text>\n", (top+bottom)/2, (top+bottom)/2, escape(pn.unit))

		groups := valuesByNodes(pts, pn.value)
		var line []string
		for _, g := range groups {
			line = append(line, fmt.Sprintf("%.1f,%.1f", xpos(float64(g.nodes)), ypos(median(g.values))))
		}
		if len(line) > 1 {
			fmt.Fprintf(&b, "<polyline points=\"%s\" fill=\"none\" stroke=\"#1f5fa8\" stroke-width=\"2\"/>\n", strings.Join(line, " "))
		}
		for _, p := range pts {
			if v := pn.value(p); !math.IsNaN(v) {
				marker(&b, xpos(float64(p.nodes)), ypos(v), p.behind)
			}
		}
		// Each N's figure (the median of its runs) above its highest marker.
		for _, g := range groups {
			text(&b, xpos(float64(g.nodes)), ypos(slices.Max(g.values))-9, "middle", `font-size="10" fill="#333"`, strconv.FormatFloat(median(g.values), 'g', 3, 64))
		}
		fmt.Fprintf(&b, "</g>\n")
	}
	bottom := plotTop + len(panels)*panelHeight + (len(panels)-1)*panelGap
	text(&b, plotLeft+innerW/2, float64(bottom+42), "middle", `font-size="13"`, "nodes (N), logarithmic")
	b.WriteString("</svg>\n")
	_, err = w.Write(b.Bytes())
	return err
}

// nodeValues are the figures of one panel's runs at one N.
type nodeValues struct {
	nodes  int
	values []float64
}

// valuesByNodes groups the figures value gives of pts (sorted by N) by N,
// leaving out what the reports lack.
func valuesByNodes(pts []scalePoint, value func(scalePoint) float64) []nodeValues {
	var out []nodeValues
	for _, p := range pts {
		v := value(p)
		if math.IsNaN(v) {
			continue
		}
		if len(out) == 0 || out[len(out)-1].nodes != p.nodes {
			out = append(out, nodeValues{nodes: p.nodes})
		}
		out[len(out)-1].values = append(out[len(out)-1].values, v)
	}
	return out
}

// median of vs (not empty): the middle value, or the mean of the two in
// the middle.
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// legend explains the markers under the title: a run on schedule; a hollow
// one when some run fell behind; the line when some N had several runs.
// Two to a row.
func legend(b *bytes.Buffer, pts []scalePoint) {
	items := []func(x, y float64){func(x, y float64) {
		marker(b, x+6, y-4, false)
		text(b, x+16, y, "start", "", "one fleet run, renewing on schedule")
	}}
	if slices.ContainsFunc(pts, func(p scalePoint) bool { return p.behind }) {
		items = append(items, func(x, y float64) {
			marker(b, x, y-4, true)
			text(b, x+10, y, "start", "", fmt.Sprintf("fell behind: under %.0f%% of the offered renewals/s", keptUpFraction*100))
		})
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].nodes == pts[i-1].nodes {
			items = append(items, func(x, y float64) {
				fmt.Fprintf(b, "<line class=\"median\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f5fa8\" stroke-width=\"2\"/>\n", x, y-4, x+14, y-4)
				text(b, x+20, y, "start", "", "median of the runs at each N (its figure)")
			})
			break
		}
	}
	y := 52.0
	if len(items) > 2 {
		y = 46
	}
	for i, item := range items {
		item(float64(plotLeft+300*(i%2)), y+18*float64(i/2))
	}
}

// marker draws a data point: filled, or hollow for a run that fell behind.
func marker(b *bytes.Buffer, x, y float64, behind bool) {
	if behind {
		fmt.Fprintf(b, "<circle class=\"point behind\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"white\" stroke=\"#c0392b\" stroke-width=\"2\"/>\n", x, y)
		return
	}
	fmt.Fprintf(b, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"#1f5fa8\"/>\n", x, y)
}

// text writes s, escaped, at (x, y); attrs are extra attributes.
func text(b *bytes.Buffer, x, y float64, anchor, attrs, s string) {
	if attrs != "" {
		attrs = " " + attrs
	}
	fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>%s</text>\n", x, y, anchor, attrs, escape(s))
}

func escape(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// ticks are an axis's range and the values marked on it.
type ticks struct {
	lo, hi float64
	step   float64 // between two ticks of a linear axis
	ticks  []float64
}

// logTicks chooses a logarithmic axis covering lo to hi (both positive):
// ticks at 1 to 9 times the powers of ten on a short range, at 1, 2 and 5
// times them when those would be too many, at the powers of ten alone on
// a long range; the axis runs from the tick at or below lo to the tick at
// or above hi. A single value gets an axis from half to twice itself.
func logTicks(lo, hi float64) ticks {
	const maxTicks = 8
	if lo == hi {
		lo, hi = lo/2, hi*2
	}
	for _, mantissas := range [][]float64{{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 5}, {1}} {
		var t ticks
		for e := math.Floor(math.Log10(lo)) - 1; e <= math.Ceil(math.Log10(hi))+1; e++ {
			for _, m := range mantissas {
				t.ticks = append(t.ticks, m*math.Pow(10, e))
			}
		}
		// The candidates now run past lo and hi on both sides: keep those
		// in range and one either side where lo or hi falls between two.
		first := 0
		for first+1 < len(t.ticks) && t.ticks[first+1] <= lo*(1+1e-9) {
			first++
		}
		last := len(t.ticks) - 1
		for last-1 >= 0 && t.ticks[last-1] >= hi*(1-1e-9) {
			last--
		}
		t.ticks = t.ticks[first : last+1]
		t.lo, t.hi = t.ticks[0], t.ticks[len(t.ticks)-1]
		if len(t.ticks) <= maxTicks || len(mantissas) == 1 {
			for i, v := range t.ticks { // exact decimals, not 10^e rounding
				t.ticks[i], _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
			}
			t.lo, t.hi = t.ticks[0], t.ticks[len(t.ticks)-1]
			return t
		}
	}
	panic("unreachable")
}

// linearTicks chooses a linear axis from 0 to at least max: the fewest
// steps of 1, 2 or 5 times a power of ten that are at least three, which
// makes three to five.
func linearTicks(max float64) ticks {
	if !(max > 0) {
		max = 1
	}
	steps := func(step float64) int { return int(math.Ceil(max/step - 1e-9)) }
	p := math.Pow(10, math.Floor(math.Log10(max)))
	step := p / 10 // max/step is at least 10
	for _, m := range []float64{5, 2, 1, 0.5, 0.2} {
		if steps(m*p) >= 3 {
			step = m * p
			break
		}
	}
	n := steps(step)
	t := ticks{step: step}
	for i := 0; i <= n; i++ {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(i)*step, 'g', 12, 64), 64)
		t.ticks = append(t.ticks, v)
	}
	t.lo, t.hi = 0, t.ticks[n]
	return t
}

// formatTick prints v with as many decimals as step needs.
func formatTick(v, step float64) string {
	return strconv.FormatFloat(v, 'f', max(0, int(-math.Floor(math.Log10(step)+1e-9))), 64)
}

// formatNodes prints a node count short: 500, 2k, 100k, 1M.
func formatNodes(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
