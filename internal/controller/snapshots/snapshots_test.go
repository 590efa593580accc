package snapshots

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, time.November, 29, 3, 0, 0, 0, time.UTC)

// fakeSave writes a file at each path it is asked for, failing while fail
// is set, and reports each call on calls.
type fakeSave struct {
	calls chan string
	fail  bool
}

func (f *fakeSave) save(_ context.Context, path string) (int64, int64, error) {
	defer func() { f.calls <- path }()
	if f.fail {
		return 0, 0, errors.New("etcd is away")
	}
	return 42, 7, os.WriteFile(path, []byte("snapshot"), 0o600)
}

// run starts a controller on dir at t0, its saver failing if fail, and
// returns it, its clock and its saver; it stops when the test ends.
func run(t *testing.T, dir string, fail bool) (*Controller, *testingclock.FakeClock, *fakeSave) {
	t.Helper()
	clk := testingclock.NewFakeClock(t0)
	f := &fakeSave{calls: make(chan string), fail: fail}
	c, err := New(Config{Dir: dir, Interval: time.Hour, Retention: 2, Save: f.save, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return c, clk, f
}

// next waits for the controller to wait on the clock, moves the clock on
// by d, and returns the path of the snapshot that follows.
func next(t *testing.T, clk *testingclock.FakeClock, f *fakeSave, d time.Duration) string {
	t.Helper()
	settle(clk)
	clk.Step(d)
	return <-f.calls
}

// settle waits until the controller waits on the clock: it has finished
// what it was doing.
func settle(clk *testingclock.FakeClock) {
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
}

func names(t *testing.T, c *Controller) []string {
	t.Helper()
	files, err := c.Snapshots()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		out = append(out, filepath.Base(f))
	}
	return out
}

// TestSchedule: the first snapshot at once, then one an interval apart,
// named for its time; the oldest beyond the retention are removed.
func TestSchedule(t *testing.T) {
	dir := t.TempDir()
	// A file of another name is not a snapshot, and stays.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, clk, f := run(t, dir, false)
	if got := <-f.calls; got != filepath.Join(dir, "leasehold-snapshot-20261129T030000Z.db") {
		t.Fatalf("first snapshot at %s", got)
	}
	next(t, clk, f, time.Hour)
	next(t, clk, f, time.Hour)
	settle(clk)
	want := []string{"leasehold-snapshot-20261129T040000Z.db", "leasehold-snapshot-20261129T050000Z.db"}
	if got := names(t, c); !slices.Equal(got, want) {
		t.Errorf("kept %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Errorf("another file: %v", err)
	}
	if got := testutil.ToFloat64(c.lastSuccess); got != float64(t0.Add(2*time.Hour).Unix()) {
		t.Errorf("last success %v", got)
	}
	if got := testutil.ToFloat64(c.lastSize); got != 7 {
		t.Errorf("last size %v", got)
	}
}

// TestScheduleAfterRestart: a controller started where snapshots exist
// takes the next an interval after the newest, not at once.
func TestScheduleAfterRestart(t *testing.T) {
	dir := t.TempDir()
	newest := filepath.Join(dir, "leasehold-snapshot-20261129T023000Z.db")
	if err := os.WriteFile(newest, []byte("snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, clk, f := run(t, dir, false)
	// Due at 03:30, half an hour after t0: a snapshot taken early would
	// be named for an earlier time.
	if got := next(t, clk, f, 30*time.Minute); got != filepath.Join(dir, "leasehold-snapshot-20261129T033000Z.db") {
		t.Errorf("the first snapshot after the restart: %s", got)
	}
}

// TestRetryAfterFailure: a failed snapshot is counted and tried again
// after RetryInterval; the schedule then goes on from the success.
func TestRetryAfterFailure(t *testing.T) {
	dir := t.TempDir()
	c, clk, f := run(t, dir, true)
	<-f.calls
	f.fail = false // read by the controller only after the clock's step
	if got := next(t, clk, f, RetryInterval); got != filepath.Join(dir, "leasehold-snapshot-20261129T030100Z.db") {
		t.Errorf("the retry: %s", got)
	}
	settle(clk)
	if got := testutil.ToFloat64(c.failures); got != 1 {
		t.Errorf("failures %v, want 1", got)
	}
	if got := next(t, clk, f, time.Hour); got != filepath.Join(dir, "leasehold-snapshot-20261129T040100Z.db") {
		t.Errorf("the snapshot after the retry: %s", got)
	}
}

// TestConfigChecked: what New refuses.
func TestConfigChecked(t *testing.T) {
	save := (&fakeSave{}).save
	for _, cfg := range []Config{
		{Interval: time.Hour, Save: save},
		{Dir: "d", Save: save},
		{Dir: "d", Interval: time.Hour},
		{Dir: "d", Interval: time.Hour, Save: save, Retention: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}
