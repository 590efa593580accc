package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
	"github.com/leasehold/leasehold/internal/bench"
	"github.com/leasehold/leasehold/internal/controller/nodelifecycle"
	"github.com/leasehold/leasehold/internal/syncbuf"
)

// The scenarios run for about two seconds at tiny scale against an
// in-process server. The tests check that they run, count consistently and
// report; they assert nothing about speed.

func common(t *testing.T, s *apiservertest.Server, progress *syncbuf.Buffer) bench.Common {
	return bench.Common{
		REST: s.Config, Connections: 2, Duration: 2 * time.Second,
		Progress: progress, ProgressInterval: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// checkReport checks what every report must hold and that it prints.
func checkReport(t *testing.T, r *bench.Report, scenario string, progress *syncbuf.Buffer, label string) {
	t.Helper()
	if r.Scenario != scenario {
		t.Errorf("Scenario = %q, want %q", r.Scenario, scenario)
	}
	if r.Ops == 0 {
		t.Errorf("no operations")
	}
	if r.Errors != 0 {
		t.Errorf("%d errors: %v", r.Errors, r.ErrorSamples)
	}
	if r.Latency.Count != r.Ops {
		t.Errorf("latency count %d, want one per op (%d)", r.Latency.Count, r.Ops)
	}
	if r.Latency.P50 <= 0 || r.Latency.P50 > r.Latency.P99 || r.Latency.P99 > r.Latency.Max {
		t.Errorf("latency percentiles out of order: %+v", r.Latency)
	}
	if r.Seconds <= 0 || r.OpsPerSecond <= 0 || r.StartedAt.IsZero() {
		t.Errorf("StartedAt %v, Seconds %v, OpsPerSecond %v", r.StartedAt, r.Seconds, r.OpsPerSecond)
	}
	var inBuckets uint64
	for _, b := range r.Latency.Buckets {
		inBuckets += b[1]
	}
	if inBuckets != r.Latency.Count {
		t.Errorf("latency buckets hold %d observations, want the count %d", inBuckets, r.Latency.Count)
	}
	// The in-process server listens in this very process.
	if r.ServerProcess == nil || r.LoadGenerator == nil {
		t.Errorf("process figures missing: server %v, load generator %v", r.ServerProcess, r.LoadGenerator)
	}
	if !strings.Contains(progress.String(), label) || !strings.Contains(progress.String(), "ops/s") {
		t.Errorf("no progress lines labelled %q:\n%s", label, progress.String())
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "scenario") || !strings.Contains(table.String(), scenario) {
		t.Errorf("table lacks the scenario:\n%s", table.String())
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not read back: %v\n%s", err, js.String())
	}
	if back.Ops != r.Ops || back.Scenario != r.Scenario {
		t.Errorf("JSON read back as %+v", back)
	}
	t.Logf("\n%s", table.String())
}

func TestThroughput(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	var progress syncbuf.Buffer
	c := common(t, s, &progress)
	// The in-process server's etcd runs in this process too.
	c.EtcdPID = os.Getpid()
	r := runThroughput(t, bench.ThroughputConfig{
		Common: c, Clients: 4, EtcdEmbedded: true, EtcdDir: t.TempDir(),
	})
	checkReport(t, r, "throughput", &progress, "throughput")
	if e := r.EtcdProcess; e == nil || e.PID != os.Getpid() || e.CPUSeconds <= 0 {
		t.Errorf("etcd process figures: %+v", e)
	}
	// This server serves no /metrics: no collector figures.
	if c := r.ServerCollector; c != nil {
		t.Errorf("server collector %+v from a server without /metrics", c)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil || !strings.Contains(table.String(), "etcd process") {
		t.Errorf("table lacks the etcd process (%v):\n%s", err, table.String())
	}
	// A loaded machine can make the bare etcd time out a put now and then;
	// the report counts it, and only a run mostly of errors is wrong.
	if e := r.Etcd; e == nil || e.Ops == 0 || e.Errors > e.Ops/10 || e.Ratio <= 0 || e.ValueBytes < 50 {
		t.Errorf("etcd comparison: %+v", e)
	}
	if !strings.Contains(progress.String(), "raw etcd") {
		t.Errorf("no raw etcd progress:\n%s", progress.String())
	}
	// The leases are gone afterwards.
	left, err := kubernetes.NewForConfigOrDie(s.Config).CoordinationV1().Leases("default").List(context.Background(), metav1.ListOptions{LabelSelector: bench.BenchLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d leases left after the run", len(left.Items))
	}
}

// runThroughput runs the throughput scenario cfg describes.
func runThroughput(t *testing.T, cfg bench.ThroughputConfig) *bench.Report {
	t.Helper()
	tp, err := bench.NewThroughput(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tp.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runFleet runs the fleet scenario cfg describes.
func runFleet(t *testing.T, cfg bench.FleetConfig) *bench.Report {
	t.Helper()
	f, err := bench.NewFleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFleet(t *testing.T) {
	// The server's /metrics gives its garbage collector, as leasehold
	// serve's does.
	reg := prometheus.NewRegistry()
	reg.MustRegister(apiserver.GoCollector())
	s := apiservertest.Start(t, apiservertest.Options{Extra: map[string]http.Handler{"/metrics": promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}})
	client := kubernetes.NewForConfigOrDie(s.Config)
	var progress syncbuf.Buffer
	const nodes, interval = 20, 500 * time.Millisecond
	cfg := bench.FleetConfig{Common: common(t, s, &progress), Nodes: nodes, Interval: interval, LeaseDuration: 2 * time.Second, NodePrefix: "bench-"}
	r := runFleet(t, cfg)
	checkReport(t, r, "fleet", &progress, "fleet")
	// Every agent renews once per slot: at most one more slot than the
	// duration holds, fewer only if some were missed.
	slots := uint64(cfg.Duration/interval) + 1
	if max := nodes * slots; r.Ops > max {
		t.Errorf("%d renewals, more than %d agents × %d slots", r.Ops, nodes, slots)
	}
	if r.TargetOpsPerSecond != nodes/interval.Seconds() {
		t.Errorf("TargetOpsPerSecond = %v, want %v", r.TargetOpsPerSecond, nodes/interval.Seconds())
	}
	if r.Fleet == nil || r.Fleet.Nodes != nodes || r.Kill != nil {
		t.Fatalf("fleet report %+v, kill %+v", r.Fleet, r.Kill)
	}
	// The scenario read the server's /metrics at both ends (what it makes
	// of the two readings is TestCollectorMeter's).
	if c := r.ServerCollector; c == nil || c.CPUSeconds < 0 || c.CPUSecondsPer1000Ops != c.CPUSeconds/float64(r.Ops)*1000 {
		t.Errorf("server collector %+v, want its figures from /metrics", c)
	}
	// Each node has its lease, owned by it, as the agent makes them.
	nl, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: bench.BenchLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(nl.Items) != nodes {
		t.Fatalf("%d nodes, want %d", len(nl.Items), nodes)
	}
	for _, n := range nl.Items {
		l, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID || l.OwnerReferences[0].Kind != "Node" {
			t.Errorf("lease %s owners %+v, want node uid %s", l.Name, l.OwnerReferences, n.UID)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != n.Name || *l.Spec.LeaseDurationSeconds != 2 {
			t.Errorf("lease %s spec %+v", l.Name, l.Spec)
		}
	}

	// A second run adopts the same nodes, measures from the time it is
	// given, then cleans up.
	cfg.Cleanup = true
	cfg.Duration = time.Second
	cfg.StartAt = time.Now().Add(1500 * time.Millisecond)
	r = runFleet(t, cfg)
	if r.Errors != 0 || r.Fleet.LeaseCreations != 0 {
		t.Errorf("second run: %d errors %v, %d leases created", r.Errors, r.ErrorSamples, r.Fleet.LeaseCreations)
	}
	if r.StartedAt.Before(cfg.StartAt) {
		t.Errorf("second run measured from %v, before its start time %v", r.StartedAt, cfg.StartAt)
	}
	if !strings.Contains(progress.String(), "measuring from") {
		t.Errorf("no progress line about the start time:\n%s", progress.String())
	}
	nl, err = client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: bench.BenchLabel})
	if err != nil {
		t.Fatal(err)
	}
	if len(nl.Items) != 0 {
		t.Errorf("%d nodes left after --cleanup", len(nl.Items))
	}
}

// The agents' first status posts spread over the report period: with a
// period twice the measurement, some but not all post during it. (Posting
// one period after registering, all would post after it ends.)
func TestFleetStatusSpread(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	var progress syncbuf.Buffer
	const nodes = 20
	cfg := bench.FleetConfig{
		Common: common(t, s, &progress), Nodes: nodes, Interval: 250 * time.Millisecond,
		LeaseDuration: 2 * time.Second, NodeStatusReportPeriod: 4 * time.Second, NodePrefix: "spread-",
	}
	r := runFleet(t, cfg)
	if r.Errors != 0 {
		t.Fatalf("%d errors: %v", r.Errors, r.ErrorSamples)
	}
	t.Logf("%d of %d agents posted their status", r.Fleet.StatusPosts, nodes)
	if p := r.Fleet.StatusPosts; p == 0 || p >= nodes {
		t.Errorf("%d status posts in a measurement half the report period long, want some of the %d agents' and not all", p, nodes)
	}
}

// TestFleetStatusSpreadShortRun checks the spread in a measurement shorter
// than the renewal interval, where each agent renews at most once: about
// one renewal in R = period/interval (30 here) carries a post.
func TestFleetStatusSpreadShortRun(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	var progress syncbuf.Buffer
	cfg := bench.FleetConfig{
		Common: common(t, s, &progress), Nodes: 600, Interval: 4 * time.Second,
		LeaseDuration: 16 * time.Second, NodeStatusReportPeriod: 2 * time.Minute, NodePrefix: "short-",
	}
	r := runFleet(t, cfg)
	if r.Errors != 0 {
		t.Fatalf("%d errors: %v", r.Errors, r.ErrorSamples)
	}
	posts, renewals := r.Fleet.StatusPosts, r.Ops
	t.Logf("%d status posts with %d renewals", posts, renewals)
	if posts == 0 || posts*10 > renewals {
		t.Errorf("%d status posts with %d renewals, want about one in 30", posts, renewals)
	}
}

func TestFleetKill(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	client := kubernetes.NewForConfigOrDie(s.Config)
	lc, err := nodelifecycle.New(nodelifecycle.Config{
		Client: client, MonitorPeriod: 200 * time.Millisecond, GracePeriod: 1500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lc.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var progress syncbuf.Buffer
	c := common(t, s, &progress)
	c.Duration = 5 * time.Second
	r := runFleet(t, bench.FleetConfig{
		Common: c, Nodes: 10, Interval: 200 * time.Millisecond, LeaseDuration: time.Second,
		KillFraction: 0.3, KillAfter: time.Second, Cleanup: true,
	})
	checkReport(t, r, "fleet", &progress, "fleet")
	k := r.Kill
	if k == nil {
		t.Fatal("no kill report")
	}
	if k.Killed != 3 || k.Flipped+k.NeverFlipped != 3 {
		t.Errorf("killed %d, flipped %d, never %d; want 3 = flipped + never", k.Killed, k.Flipped, k.NeverFlipped)
	}
	// With four seconds for a 1.5s grace period, at least one is seen.
	if k.Flipped == 0 {
		t.Errorf("no killed node was marked Unknown: %+v", k)
	}
	if k.DeathToUnknown.Count != uint64(k.Flipped) || (k.Flipped > 0 && k.DeathToUnknown.Max <= 0) {
		t.Errorf("death → Unknown distribution %+v for %d flipped", k.DeathToUnknown, k.Flipped)
	}
	if k.KilledAfterSeconds < 1 {
		t.Errorf("killed after %vs, want at least 1s", k.KilledAfterSeconds)
	}
	if !strings.Contains(progress.String(), "unknown") {
		t.Errorf("progress does not show the unknown count:\n%s", progress.String())
	}
}

func TestWatch(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	var progress syncbuf.Buffer
	w, err := bench.NewWatch(bench.WatchConfig{Common: common(t, s, &progress), Watchers: 3, Writers: 2, Rate: 50})
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, r, "watch", &progress, "watch")
	wr := r.Watch
	if wr == nil {
		t.Fatal("no watch report")
	}
	if wr.Expected != r.Ops*3 || wr.Delivered != wr.Expected || wr.Lost != 0 {
		t.Errorf("delivered %d of %d expected (%d writes × 3), lost %d", wr.Delivered, wr.Expected, r.Ops, wr.Lost)
	}
	if wr.FromWrite.Count != wr.Delivered || wr.FromAck.Count+wr.BeforeAck != wr.Delivered {
		t.Errorf("delays counted %d from write, %d from ack + %d before it, for %d delivered", wr.FromWrite.Count, wr.FromAck.Count, wr.BeforeAck, wr.Delivered)
	}
	if r.TargetOpsPerSecond != 50 {
		t.Errorf("TargetOpsPerSecond = %v", r.TargetOpsPerSecond)
	}
}

func TestNewRejects(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	tests := []struct {
		name string
		new  func() error
	}{
		{"no REST config", func() error { _, err := bench.NewThroughput(bench.ThroughputConfig{}); return err }},
		{"negative clients", func() error {
			_, err := bench.NewThroughput(bench.ThroughputConfig{Common: bench.Common{REST: s.Config}, Clients: -1})
			return err
		}},
		{"etcd twice", func() error {
			_, err := bench.NewThroughput(bench.ThroughputConfig{Common: bench.Common{REST: s.Config}, EtcdEmbedded: true, EtcdEndpoints: []string{"http://127.0.0.1:1"}})
			return err
		}},
		{"interval not below lease duration", func() error {
			_, err := bench.NewFleet(bench.FleetConfig{Common: bench.Common{REST: s.Config}, Interval: 40 * time.Second})
			return err
		}},
		{"fractional lease duration", func() error {
			_, err := bench.NewFleet(bench.FleetConfig{Common: bench.Common{REST: s.Config}, Interval: time.Second, LeaseDuration: 1500 * time.Millisecond})
			return err
		}},
		{"kill fraction above one", func() error {
			_, err := bench.NewFleet(bench.FleetConfig{Common: bench.Common{REST: s.Config}, KillFraction: 1.5})
			return err
		}},
		{"kill after the end", func() error {
			_, err := bench.NewFleet(bench.FleetConfig{Common: bench.Common{REST: s.Config, Duration: time.Second}, KillFraction: 0.1, KillAfter: 2 * time.Second})
			return err
		}},
		{"negative rate", func() error {
			_, err := bench.NewWatch(bench.WatchConfig{Common: bench.Common{REST: s.Config}, Rate: -1})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.new(); err == nil {
				t.Error("accepted")
			}
		})
	}
}
