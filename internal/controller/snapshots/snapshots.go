// Package snapshots takes etcd snapshots on a schedule and keeps the newest
// few: a copy of everything the server stores, on the server's own disk,
// to go back to after a mistake (a deletion of every Lease) or a damaged
// database. It runs on the elected replica, as the other controllers do.
//
// Each snapshot is a file named for when it was taken (UTC, to the
// second), written beside its name and renamed to it once whole and
// verified, so that every file of that name is a whole snapshot. The
// schedule survives restarts: the next snapshot is due an interval after
// the newest file in the directory, or at once when there is none.
package snapshots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Prefix and Suffix frame a snapshot's file name around its time, in
// TimeFormat.
const (
	Prefix     = "leasehold-snapshot-"
	Suffix     = ".db"
	TimeFormat = "20060102T150405Z"
)

// RetryInterval is how soon a failed snapshot is tried again, unless the
// interval is shorter.
const RetryInterval = time.Minute

// Config configures the controller. Zero values mean defaults.
type Config struct {
	// Dir holds the snapshots; created when missing. Required.
	Dir string
	// Interval between two snapshots. Required.
	Interval time.Duration
	// Retention is how many snapshots are kept; older ones are removed
	// once a new one is taken. Default 5.
	Retention int
	// Save writes a whole, verified snapshot at path, or nothing, and says
	// which revision it holds and how many bytes. Required.
	Save func(ctx context.Context, path string) (revision, size int64, err error)
	// Clock times the schedule and names the files; default the real one.
	Clock clock.WithTicker
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Controller takes the snapshots.
type Controller struct {
	cfg Config

	lastSuccess prometheus.Gauge
	lastSize    prometheus.Gauge
	failures    prometheus.Counter
}

// New checks cfg and returns a controller.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Dir == "":
		return nil, errors.New("snapshots: Dir is required")
	case cfg.Interval <= 0:
		return nil, errors.New("snapshots: Interval must be positive")
	case cfg.Save == nil:
		return nil, errors.New("snapshots: Save is required")
	case cfg.Retention < 0:
		return nil, fmt.Errorf("snapshots: Retention %d is negative", cfg.Retention)
	}
	if cfg.Retention == 0 {
		cfg.Retention = 5
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Controller{
		cfg: cfg,
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_etcd_snapshot_last_success_timestamp_seconds",
			Help: "When the last scheduled etcd snapshot was taken (Unix seconds); 0 before the first.",
		}),
		lastSize: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_etcd_snapshot_size_bytes",
			Help: "Bytes of the database in the last scheduled etcd snapshot.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_etcd_snapshot_failures_total",
			Help: "Scheduled etcd snapshots that failed.",
		}),
	}, nil
}

// Collectors are the controller's metrics.
func (c *Controller) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.lastSuccess, c.lastSize, c.failures}
}

// Run takes snapshots until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	files, err := c.Snapshots()
	if err != nil {
		return err
	}
	due := c.cfg.Clock.Now()
	if len(files) > 0 {
		newest := files[len(files)-1]
		if at, err := time.Parse(TimeFormat, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(newest), Prefix), Suffix)); err == nil {
			due = at.Add(c.cfg.Interval)
		}
	}
	c.cfg.Logger.Info("etcd snapshots scheduled", "dir", c.cfg.Dir, "interval", c.cfg.Interval, "retention", c.cfg.Retention, "next", due.UTC().Format(time.RFC3339))
	for {
		if wait := due.Sub(c.cfg.Clock.Now()); wait > 0 {
			t := c.cfg.Clock.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C():
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		now := c.cfg.Clock.Now()
		if err := c.take(ctx, now); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.failures.Inc()
			retry := min(RetryInterval, c.cfg.Interval)
			c.cfg.Logger.Error("etcd snapshot failed", "err", err, "retryIn", retry)
			due = now.Add(retry)
			continue
		}
		due = now.Add(c.cfg.Interval)
	}
}

// take takes one snapshot, named for now, and removes the oldest beyond
// the retention.
func (c *Controller) take(ctx context.Context, now time.Time) error {
	path := filepath.Join(c.cfg.Dir, Prefix+now.UTC().Format(TimeFormat)+Suffix)
	rev, size, err := c.cfg.Save(ctx, path)
	if err != nil {
		return err
	}
	c.lastSuccess.Set(float64(now.Unix()))
	c.lastSize.Set(float64(size))
	c.cfg.Logger.Info("etcd snapshot taken", "path", path, "revision", rev, "size", size)
	files, err := c.Snapshots()
	if err != nil {
		return err
	}
	for _, old := range files[:max(0, len(files)-c.cfg.Retention)] {
		if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		c.cfg.Logger.Info("etcd snapshot removed beyond the retention", "path", old)
	}
	return nil
}

// Snapshots are the snapshot files in the directory, oldest first.
func (c *Controller) Snapshots() ([]string, error) {
	entries, err := os.ReadDir(c.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasPrefix(n, Prefix) && strings.HasSuffix(n, Suffix) {
			out = append(out, filepath.Join(c.cfg.Dir, n))
		}
	}
	slices.Sort(out) // the time format sorts in time order
	return out, nil
}
