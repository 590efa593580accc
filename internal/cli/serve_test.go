package cli

import (
	"log/slog"
	"runtime/debug"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/internal/apiserver"
)

// TestBulkLoadGC: the collector's setting is raised for the fill and put
// back after; GOGC=off stays off.
func TestBulkLoadGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	restore := bulkLoadGC()
	if got := debug.SetGCPercent(400); got != 400 {
		t.Errorf("during the fill GOGC is %d, want 400", got)
	}
	restore()
	if got := debug.SetGCPercent(-1); got != 100 {
		t.Errorf("after the fill GOGC is %d, want 100 back", got)
	}
	// GOGC is now off.
	restore = bulkLoadGC()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("with GOGC off the fill set %d", got)
	}
	restore()
	if got := debug.SetGCPercent(100); got != -1 {
		t.Errorf("with GOGC off, after the fill: %d", got)
	}
}

// --max-connections: 0 takes what the open-file limit leaves, a number is
// used as given, and a negative one is refused.
func TestConnectionLimit(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if n, err := connectionLimit(0, log); err != nil || n != apiserver.ConnectionBudget(rl.Cur) {
		t.Errorf("connectionLimit(0) = %d, %v; want %d from an open-file limit of %d", n, err, apiserver.ConnectionBudget(rl.Cur), rl.Cur)
	}
	if n, err := connectionLimit(5000000, log); err != nil || n != 5000000 {
		t.Errorf("connectionLimit(5000000) = %d, %v; want it as given", n, err)
	}
	if _, err := connectionLimit(-1, log); err == nil {
		t.Error("connectionLimit(-1) took a negative limit")
	}
}
