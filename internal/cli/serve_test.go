package cli

import (
	"runtime/debug"
	"testing"
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
