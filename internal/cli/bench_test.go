package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/controller/nodelifecycle"
)

func TestCheckOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		connections int
		openFiles   uint64
		ok          bool
	}{
		{8, 1024, true},
		{960, 1024, true},
		{961, 1024, false},
		{20000, 20000, false},
		{15000, 20000, true},
	} {
		err := checkOpenFiles(tc.connections, tc.openFiles)
		if (err == nil) != tc.ok {
			t.Errorf("checkOpenFiles(%d, %d) = %v, want ok %v", tc.connections, tc.openFiles, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "ulimit -n") {
			t.Errorf("checkOpenFiles(%d, %d): %v does not say what to raise", tc.connections, tc.openFiles, err)
		}
	}
}

func TestGraceNote(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		note     bool
	}{
		{10 * time.Second, false},
		{nodelifecycle.DefaultGracePeriod - time.Millisecond, false},
		{nodelifecycle.DefaultGracePeriod, true},
		{5 * time.Minute, true},
	} {
		note := graceNote(tc.interval)
		if (note != "") != tc.note {
			t.Errorf("graceNote(%v) = %q, want a note: %v", tc.interval, note, tc.note)
		}
		if note != "" && (!strings.Contains(note, "--node-monitor-grace-period") || !strings.Contains(note, tc.interval.String())) {
			t.Errorf("graceNote(%v) = %q: it does not name the flag and the interval", tc.interval, note)
		}
	}
}
