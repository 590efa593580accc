package bench

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

// generatorReport is the report of one load generator's fleet measured for 60 s
// from start, lat being its renewals' latencies.
func generatorReport(start time.Time, nodes int, lat []time.Duration, server, load *ProcessStats, gc *CollectorStats) *Report {
	var h Histogram
	for _, d := range lat {
		h.Record(d)
	}
	return &Report{
		Scenario: "fleet", Server: "https://leasehold.example:6443", StartedAt: start, Seconds: 60,
		Parameters: map[string]string{"nodes": strconv.Itoa(nodes), "interval": "10s", "nodePrefix": "gen-" + start.Format("150405") + "-"},
		Ops:        uint64(len(lat)), OpsPerSecond: float64(len(lat)) / 60, TargetOpsPerSecond: float64(nodes) / 10,
		Latency:       h.Snapshot().Percentiles(),
		ServerProcess: server, LoadGenerator: load, ServerCollector: gc,
		Fleet: &FleetReport{Nodes: nodes, RegistrationSeconds: float64(nodes) / 1000, MissedSlots: 1, StatusPosts: 2},
	}
}

// latencies are n renewals of d each, then one of slow.
func latencies(n int, d, slow time.Duration) []time.Duration {
	out := make([]time.Duration, n, n+1)
	for i := range out {
		out[i] = d
	}
	return append(out, slow)
}

func TestMerge(t *testing.T) {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	// Two generators: one on the server's machine (the server from /proc),
	// one elsewhere (the server from its /metrics), a second apart.
	a := generatorReport(start, 3000, latencies(17999, 2*time.Millisecond, 900*time.Millisecond),
		&ProcessStats{PID: 41, CPUSeconds: 50, CPUCores: 0.8333, RSSBytes: 400 << 20, PeakRSSBytes: 420 << 20},
		&ProcessStats{PID: 77, CPUSeconds: 12, CPUCores: 0.2, RSSBytes: 100 << 20},
		&CollectorStats{CPUSeconds: 6, Collections: 5, CPUSecondsPer1000Ops: 6.0 / 18000 * 1000})
	b := generatorReport(start.Add(time.Second), 1000, latencies(5999, 20*time.Millisecond, 100*time.Millisecond),
		&ProcessStats{Source: SourceMetrics, CPUSeconds: 52, CPUCores: 0.8667, RSSBytes: 410 << 20},
		&ProcessStats{PID: 9, CPUSeconds: 4, CPUCores: 0.0667, RSSBytes: 90 << 20},
		&CollectorStats{CPUSeconds: 7, Collections: 6, CPUSecondsPer1000Ops: 7.0 / 6000 * 1000})
	b.Parameters["nodes"] = "1000"
	b.ErrorSamples, b.Errors = []string{"timeout"}, 1
	// Both saw the server's etcd, over windows a second apart.
	a.ServerEtcdPuts = &EtcdPutStats{Puts: 24000, PerOp: 24000.0 / 18000}
	b.ServerEtcdPuts = &EtcdPutStats{Puts: 24200, PerOp: 24200.0 / 6000}

	m, err := Merge([]*Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if m.Ops != 24000 || m.Errors != 1 || m.OpsPerSecond != 400 || m.TargetOpsPerSecond != 400 || m.Fleet.Nodes != 4000 {
		t.Errorf("ops %d, errors %d, ops/s %v, offered %v, nodes %d; want 24000, 1, 400, 400, 4000", m.Ops, m.Errors, m.OpsPerSecond, m.TargetOpsPerSecond, m.Fleet.Nodes)
	}
	if m.Fleet.RegistrationSeconds != 3 || m.Fleet.MissedSlots != 2 || m.Fleet.StatusPosts != 4 {
		t.Errorf("fleet %+v", m.Fleet)
	}
	if !m.StartedAt.Equal(start.Add(time.Second)) || m.Seconds != 60 {
		t.Errorf("window from %v for %vs, want the later start and 60 s", m.StartedAt, m.Seconds)
	}
	// A quarter of the renewals took 20 ms: the p50 is the fast
	// generator's, the p90 the slow one's, and the max the fast one's
	// outlier, which neither generator's p99 shows.
	var all Histogram
	for _, d := range append(latencies(17999, 2*time.Millisecond, 900*time.Millisecond), latencies(5999, 20*time.Millisecond, 100*time.Millisecond)...) {
		all.Record(d)
	}
	want := all.Snapshot().Percentiles()
	if m.Latency.Count != 24000 || m.Latency.P50 != want.P50 || m.Latency.P90 != want.P90 || m.Latency.P999 != want.P999 || m.Latency.Max != 900 {
		t.Errorf("latency %+v, want %+v", m.Latency, want)
	}
	if m.Parameters["nodes"] != "3000, 1000" || m.Parameters["interval"] != "10s" || m.Parameters["loadGenerators"] != "2" {
		t.Errorf("parameters %v", m.Parameters)
	}
	// The server: the mean of what the two saw, per 1000 of the combined
	// rate; the larger memory.
	s := m.ServerProcess
	if s == nil || s.Source != SourceMerged || s.CPUSeconds != 51 || s.RSSBytes != 410<<20 || s.PeakRSSBytes != 420<<20 {
		t.Fatalf("server %+v", s)
	}
	if want := 0.85 * 1000 / 400; !near(s.CPUSecondsPer1000Ops, want) {
		t.Errorf("server CPU-s per 1000 = %v, want %v", s.CPUSecondsPer1000Ops, want)
	}
	if gc := m.ServerCollector; gc == nil || gc.CPUSeconds != 6.5 || gc.Collections != 6 || !near(gc.CPUSecondsPer1000Ops, 6.5/60*1000/400) {
		t.Errorf("collector %+v", gc)
	}
	if p := m.ServerEtcdPuts; p == nil || p.Puts != 24100 || !near(p.PerOp, 24100.0/60/400) {
		t.Errorf("etcd puts %+v, want 24100, %v per op", p, 24100.0/60/400)
	}
	// The load generators add up.
	if l := m.LoadGenerator; l == nil || l.Processes != 2 || l.CPUSeconds != 16 || l.RSSBytes != 190<<20 || !near(l.CPUSecondsPer1000Ops, 16.0/24) {
		t.Errorf("load generators %+v", l)
	}
	if r := m.ServerToLoadCPU; r == nil || !near(r.All, 51.0/16) {
		t.Errorf("server ÷ load %+v", r)
	}
	var table bytes.Buffer
	if err := m.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"loadGenerators", "2 processes:", "3000, 1000", "4000 (registered"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}

	// One process seen alike by both keeps its identity.
	b.ServerProcess = &ProcessStats{PID: 41, CPUSeconds: 52, CPUCores: 0.8667, RSSBytes: 410 << 20}
	if m, err := Merge([]*Report{a, b}); err != nil || m.ServerProcess.PID != 41 || m.ServerProcess.Source != "" {
		t.Errorf("server seen alike: %+v, %v", m.ServerProcess, err)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestMergeRefuses(t *testing.T) {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ok := func() *Report {
		return generatorReport(start, 10, latencies(9, time.Millisecond, time.Second), nil, nil, nil)
	}
	for name, tt := range map[string]struct {
		change func(r *Report)
		want   string
	}{
		"not a fleet":      {func(r *Report) { r.Scenario, r.Fleet = "throughput", nil }, "only fleet reports"},
		"killed agents":    {func(r *Report) { r.Kill = &KillReport{Killed: 1} }, "killed"},
		"no start":         {func(r *Report) { r.StartedAt = time.Time{} }, "no start time"},
		"no histogram":     {func(r *Report) { r.Latency.Buckets = nil }, "no latency histogram"},
		"bad histogram":    {func(r *Report) { r.Latency.Count++ }, "latency"},
		"windows apart":    {func(r *Report) { r.StartedAt = start.Add(7 * time.Second) }, "in common"},
		"windows disjoint": {func(r *Report) { r.StartedAt = start.Add(time.Hour) }, "0.0s in common"},
		"the same fleet":   {func(r *Report) { r.Parameters["nodePrefix"] = ok().Parameters["nodePrefix"] }, "the same fleet"},
	} {
		r := ok()
		r.Parameters["nodePrefix"] = "other-"
		tt.change(r)
		if m, err := Merge([]*Report{ok(), r}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %+v, %v; want an error about %q", name, m, err, tt.want)
		}
	}
	if _, err := Merge([]*Report{ok()}); err == nil {
		t.Error("one report merged")
	}
	// Windows 5 s apart in 60 s share more than nine tenths.
	r := ok()
	r.StartedAt, r.Parameters["nodePrefix"] = start.Add(5*time.Second), "other-"
	if _, err := Merge([]*Report{ok(), r}); err != nil {
		t.Errorf("windows 5 s apart: %v", err)
	}
}
