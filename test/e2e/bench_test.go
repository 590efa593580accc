package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchReport is what this test reads of a `leasehold bench` report.
type benchReport struct {
	StartedAt  time.Time         `json:"startedAt"`
	Seconds    float64           `json:"seconds"`
	Ops        uint64            `json:"ops"`
	Errors     uint64            `json:"errors"`
	Parameters map[string]string `json:"parameters"`
	Latency    struct {
		Count   uint64      `json:"count"`
		Buckets [][2]uint64 `json:"buckets"`
	} `json:"latency"`
	ServerProcess *struct {
		PID        int     `json:"pid"`
		Source     string  `json:"source"`
		CPUSeconds float64 `json:"cpuSeconds"`
		RSSBytes   uint64  `json:"rssBytes"`
	} `json:"serverProcess"`
	LoadGenerator *struct {
		Processes  int     `json:"processes"`
		CPUSeconds float64 `json:"cpuSeconds"`
	} `json:"loadGenerator"`
	Fleet *struct {
		Nodes int `json:"nodes"`
	} `json:"fleet"`
	ServerEtcdPuts *struct {
		Puts  uint64  `json:"puts"`
		PerOp float64 `json:"perOp"`
	} `json:"serverEtcdPuts"`
}

func readBenchReport(t *testing.T, js string) benchReport {
	t.Helper()
	var r benchReport
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatalf("report: %v\n%s", err, js)
	}
	return r
}

// Two load generators drive one server at once, each with a fleet of its
// own, as generators on two machines would: the same --start-at aligns
// their measurements, and `leasehold bench merge` makes one report of
// theirs. The second reads the server as a generator on another machine
// does, from its /metrics.
func TestBenchFleetFromTwoGenerators(t *testing.T) {
	s := newServer(t)
	dir := t.TempDir()
	startAt := time.Now().Add(10 * time.Second).UTC().Truncate(time.Second)
	gens := []struct{ prefix, serverPID string }{{"gen-a-", "0"}, {"gen-b-", "-1"}}
	outs := make([]string, len(gens))
	errs := make([]error, len(gens))
	var wg sync.WaitGroup
	for i, g := range gens {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, leaseholdBin, "bench", "fleet", "--kubeconfig", s.kubeconfig,
				"--nodes", "150", "--interval", "1s", "--lease-duration", "40s", "--duration", "6s",
				"--node-prefix", g.prefix, "--start-at", startAt.Format(time.RFC3339), "--server-pid", g.serverPID,
				"--quiet", "--report", filepath.Join(dir, g.prefix+"report.json"), "--json")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			outs[i] = string(out)
			if err != nil {
				errs[i] = fmt.Errorf("%v\n%s", err, stderr.String())
			}
		})
	}
	wg.Wait()
	var reports []benchReport
	for i, err := range errs {
		if err != nil {
			t.Fatalf("generator %s: %v", gens[i].prefix, err)
		}
		r := readBenchReport(t, outs[i])
		if r.StartedAt.Before(startAt) || r.StartedAt.After(startAt.Add(time.Second)) {
			t.Errorf("generator %s measured from %v, want %v", gens[i].prefix, r.StartedAt, startAt)
		}
		if r.Errors != 0 || r.Ops == 0 || r.ServerProcess == nil {
			t.Fatalf("generator %s: %d ops, %d errors, server %+v", gens[i].prefix, r.Ops, r.Errors, r.ServerProcess)
		}
		// Every renewal is written (the server's embedded etcd counts
		// the other fleet's too, over the same window).
		if p := r.ServerEtcdPuts; p == nil || p.Puts < r.Ops || p.PerOp < 1 {
			t.Errorf("generator %s: server etcd puts %+v for %d renewals, want one a renewal at least", gens[i].prefix, p, r.Ops)
		}
		reports = append(reports, r)
	}
	if p := reports[0].ServerProcess; p.PID <= 0 || p.Source != "" {
		t.Errorf("the generator that sees the server's process: %+v, want it from /proc", p)
	}
	if p := reports[1].ServerProcess; p.PID != 0 || p.Source != "metrics" || p.CPUSeconds <= 0 || p.RSSBytes == 0 {
		t.Errorf("the generator that does not: %+v, want it from /metrics", p)
	}

	files := []string{filepath.Join(dir, "gen-a-report.json"), filepath.Join(dir, "gen-b-report.json")}
	m := readBenchReport(t, leasehold(t, append([]string{"bench", "merge", "--json"}, files...)...))
	if m.Ops != reports[0].Ops+reports[1].Ops || m.Latency.Count != m.Ops || m.Fleet == nil || m.Fleet.Nodes != 300 {
		t.Errorf("merged: %d ops (%d latencies), %+v; want %d + %d ops of 300 nodes", m.Ops, m.Latency.Count, m.Fleet, reports[0].Ops, reports[1].Ops)
	}
	if m.Parameters["loadGenerators"] != "2" || m.Parameters["nodes"] != "150" || m.Parameters["nodePrefix"] != "gen-a-, gen-b-" || m.Parameters["startAt"] != startAt.Format(time.RFC3339) || m.LoadGenerator == nil || m.LoadGenerator.Processes != 2 {
		t.Errorf("merged: parameters %v, load generators %+v", m.Parameters, m.LoadGenerator)
	}
	if m.ServerProcess == nil || m.ServerProcess.Source != "merged" || m.ServerProcess.CPUSeconds <= 0 {
		t.Errorf("merged server %+v", m.ServerProcess)
	}
	table := leasehold(t, append([]string{"bench", "merge"}, files...)...)
	if m.ServerEtcdPuts == nil || m.ServerEtcdPuts.Puts == 0 {
		t.Errorf("merged server etcd puts %+v", m.ServerEtcdPuts)
	}
	for _, want := range []string{"loadGenerators", "2 processes:", "300 (registered", "server etcd puts"} {
		if !strings.Contains(table, want) {
			t.Errorf("merged table lacks %q:\n%s", want, table)
		}
	}

	// Reports whose measurements do not overlap are refused.
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	late := filepath.Join(dir, "late.json")
	out, err := exec.CommandContext(ctx, leaseholdBin, "bench", "fleet", "--kubeconfig", s.kubeconfig,
		"--nodes", "10", "--interval", "1s", "--lease-duration", "40s", "--duration", "2s",
		"--node-prefix", "gen-c-", "--quiet", "--report", late).CombinedOutput()
	if err != nil {
		t.Fatalf("a third generator: %v\n%s", err, out)
	}
	out, err = exec.CommandContext(ctx, leaseholdBin, "bench", "merge", files[0], late).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in common") {
		t.Errorf("merging measurements that do not overlap: %v\n%s", err, out)
	}
}
