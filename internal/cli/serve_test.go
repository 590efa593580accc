package cli

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestServeRejectsBadAuditBatchMaxWait: the flag is checked before
// anything starts, and the error names it.
func TestServeRejectsBadAuditBatchMaxWait(t *testing.T) {
	for _, v := range []string{"-1ms", "2s"} {
		dir := t.TempDir()
		// Should the flag be taken, the server would serve until the
		// context ends: the test then fails rather than hangs.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := runServe(ctx, []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--audit-log-batch-max-wait", v})
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--audit-log-batch-max-wait") {
			t.Errorf("%s: %v, want an error naming the flag", v, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: the data directory holds %d entries, want none", v, len(entries))
		}
	}
}

// TestServeEtcdServersList: --etcd-servers is read as a list written by
// hand, spaces and a trailing comma included; one that names no URL is
// refused before anything starts rather than taken for the embedded etcd.
func TestServeEtcdServersList(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	err := runServe(ctx, []string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--etcd-servers", " , "})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "--etcd-servers") {
		t.Errorf("--etcd-servers ' , ': %v, want an error naming the flag", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the data directory holds %d entries, want none", len(entries))
	}
}
