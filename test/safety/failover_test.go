package safety

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestFailoverBenchmark measures how long a standby takes to lead after the
// leader goes away, for leasehold's Elector and for client-go's
// leaderelection with the same durations against the same server: after a
// graceful stop (SIGTERM; both release the Lease on cancel) and after
// SIGKILL. The time is from the signal to the standby's "start" record,
// both on CLOCK_MONOTONIC. Each trial waits until a new standby has seen
// the leader, then a random fraction of RetryPeriod, so that kills fall at
// every phase of the renewal cycle.
//
// It is a measurement, not a check, and runs only with
// LEASEHOLD_FAILOVER_BENCH=1; with the default 15s/10s/2s and 20 trials it
// takes about seven minutes (the two kinds run side by side).
func TestFailoverBenchmark(t *testing.T) {
	if os.Getenv("LEASEHOLD_FAILOVER_BENCH") != "1" {
		t.Skip("set LEASEHOLD_FAILOVER_BENCH=1 to measure failover times")
	}
	needBinaries(t)
	trials := 20
	if v := os.Getenv("LEASEHOLD_FAILOVER_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LEASEHOLD_FAILOVER_TRIALS=%q: want a positive number", v)
		}
		trials = n
	}
	durations := [3]time.Duration{15 * time.Second, 10 * time.Second, 2 * time.Second}
	if v := os.Getenv("LEASEHOLD_FAILOVER_DURATIONS"); v != "" {
		parts := strings.Split(v, ",")
		if len(parts) != 3 {
			t.Fatalf("LEASEHOLD_FAILOVER_DURATIONS=%q: want LeaseDuration,RenewDeadline,RetryPeriod", v)
		}
		for i, p := range parts {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil {
				t.Fatalf("LEASEHOLD_FAILOVER_DURATIONS: %v", err)
			}
			durations[i] = d
		}
	}
	cur, _ := newServer(t)
	kubeconfig := cur().kubeconfig()

	var (
		mu      sync.Mutex
		results = map[string][]time.Duration{}
	)
	kinds := []string{"leasehold", "client-go"}
	t.Run("trials", func(t *testing.T) {
		for _, kind := range kinds {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				got := failoverTrials(t, contenderConfig{
					kind: kind, kubeconfig: kubeconfig, lease: "failover-" + kind, name: kind,
					dir: t.TempDir(), durations: durations, releaseOnCancel: true,
				}, trials)
				mu.Lock()
				defer mu.Unlock()
				for mode, ds := range got {
					results[kind+" "+mode] = ds
				}
			})
		}
	})

	var b strings.Builder
	fmt.Fprintf(&b, "failover, %d trials each, LeaseDuration %v, RenewDeadline %v, RetryPeriod %v\n", trials, durations[0], durations[1], durations[2])
	fmt.Fprintf(&b, "| %-9s | %-8s | %9s | %9s | %9s | %9s |\n", "elector", "leader", "min", "p50", "p90", "max")
	fmt.Fprintf(&b, "|-----------|----------|-----------|-----------|-----------|-----------|\n")
	for _, mode := range []string{"graceful", "SIGKILL"} {
		for _, kind := range kinds {
			ds := results[kind+" "+mode]
			if len(ds) == 0 {
				continue
			}
			slices.Sort(ds)
			fmt.Fprintf(&b, "| %-9s | %-8s | %9s | %9s | %9s | %9s |\n", kind, mode,
				round(ds[0]), round(percentile(ds, 50)), round(percentile(ds, 90)), round(ds[len(ds)-1]))
		}
	}
	t.Log("\n" + b.String())
}

// failoverTrials runs trials graceful stops and then trials SIGKILLs of the
// leader among two contenders of cfg.kind, starting a new standby after
// each, and returns the takeover times by mode.
func failoverTrials(t *testing.T, cfg contenderConfig, trials int) map[string][]time.Duration {
	retry := cfg.durations[2]
	wait := cfg.durations[0] + 60*time.Second // generous: a loaded machine
	startProc := func() *proc {
		p, err := startContender(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if p.alive() {
				p.kill9()
			}
		})
		return p
	}
	leader := startProc()
	if !waitFor(wait, func() bool { _, ok := leader.startedAfter(0); return ok }) {
		t.Fatalf("the first contender never led\n%s", fileTail(leader.logPath, 3000))
	}
	rec, _ := leader.startedAfter(0)
	leaderID := rec.fields[0]
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	out := map[string][]time.Duration{}
	for _, mode := range []string{"graceful", "SIGKILL"} {
		for i := range trials {
			standby := startProc()
			if !waitFor(wait, func() bool { return standby.observed(leaderID) }) {
				t.Fatalf("the standby never saw leader %s\n%s", leaderID, fileTail(standby.logPath, 3000))
			}
			time.Sleep(time.Duration(rng.Int64N(int64(retry)))) // a random phase of the renewal cycle
			t0 := mono()
			if mode == "graceful" {
				leader.signal(syscall.SIGTERM)
			} else {
				leader.kill9()
			}
			if !waitFor(wait, func() bool { _, ok := standby.startedAfter(t0); return ok }) {
				t.Fatalf("%s trial %d: the standby did not lead within %v\n%s", mode, i, wait, fileTail(standby.logPath, 3000))
			}
			rec, _ := standby.startedAfter(t0)
			d := time.Duration(rec.at - t0)
			out[mode] = append(out[mode], d)
			t.Logf("%s %s trial %d: %v", cfg.kind, mode, i, d)
			if mode == "graceful" && !leader.term(30*time.Second) {
				t.Errorf("%s trial %d: the old leader did not exit within 30s of SIGTERM", mode, i)
			}
			leader, leaderID = standby, rec.fields[0]
		}
	}
	leader.term(30 * time.Second)
	return out
}

// percentile returns the nearest-rank p-th percentile of sorted ds.
func percentile(ds []time.Duration, p int) time.Duration {
	rank := (p*len(ds) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return ds[rank-1]
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Microsecond).String()
	}
}
