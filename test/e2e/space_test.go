package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFullDatabaseRecovers fills the embedded etcd's database to its quota
// through the API, restarts the server on it, deletes what filled it with
// kubectl, and checks that writes resume with nothing else done: the
// server compacts, defragments and disarms etcd's NOSPACE alarm itself.
func TestFullDatabaseRecovers(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	const quota = 16 << 20
	s := newServer(t, "--etcd-quota-backend-bytes", fmt.Sprint(quota))
	cs := s.clientset(t)
	ctx := context.Background()
	leases := cs.CoordinationV1().Leases("default")
	pad := strings.Repeat("x", 200<<10)
	var refused error
	for i := 0; refused == nil; i++ {
		if i*len(pad) > 2*quota {
			t.Fatalf("%d leases of %d KiB were all accepted under a quota of %d MiB", i, len(pad)>>10, quota>>20)
		}
		_, refused = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("pad-%03d", i), Labels: map[string]string{"pad": "yes"}, Annotations: map[string]string{"pad": pad},
		}}, metav1.CreateOptions{})
	}
	if !apierrors.IsInternalError(refused) || !strings.Contains(refused.Error(), "database space exceeded") {
		t.Fatalf("the write at the quota: %v; want 500 with etcd's reason", refused)
	}

	// A restart on the full database serves: its reads, and the deletions
	// that free it. How much of the file the server's own compaction and
	// defragmentation give back depends on how etcd's writes were batched:
	// at times enough for writes to resume at once. The restart therefore
	// takes a quota the stored leases alone exceed, so that only deleting
	// them can bring writes back.
	accepted, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "pad=yes"})
	if err != nil {
		t.Fatalf("listing the leases at the quota: %v", err)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("stopping the server: %v", err)
	}
	full := len(accepted.Items) * len(pad)
	s = serveFor(t, s.dataDir, s.listen, filepath.Dir(s.logPath), "--etcd-quota-backend-bytes", fmt.Sprint(full))
	cs = s.clientset(t)
	leases = cs.CoordinationV1().Leases("default")
	small := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "small"}}
	if _, err := leases.Create(ctx, small, metav1.CreateOptions{}); !apierrors.IsInternalError(err) {
		t.Fatalf("a write after the restart, %d leases of %d KiB stored under a quota of %d bytes: %v; want 500",
			len(accepted.Items), len(pad)>>10, full, err)
	}
	if got, err := leases.List(ctx, metav1.ListOptions{LabelSelector: "pad=yes"}); err != nil || len(got.Items) != len(accepted.Items) {
		t.Fatalf("reading the full database after the restart: %v; want %d leases", err, len(accepted.Items))
	}
	s.kubectl(t, "delete", "lease", "-n", "default", "-l", "pad=yes")
	// The server checks every 10 s.
	eventually(t, time.Minute, func() error {
		_, err := leases.Create(ctx, small, metav1.CreateOptions{})
		return err
	})
	got := s.kubectl(t, "get", "lease", "-n", "default", "-o", "name")
	if strings.TrimSpace(got) != "lease.coordination.k8s.io/small" {
		t.Errorf("leases after the recovery: %q", got)
	}
}

// TestNoRoomForTheWAL: etcd preallocates 64 MB for its write-ahead log and
// panics when it cannot; the server says so in a one-line error and exits
// 1, not in a stack trace. A file size limit below 64 MB stands in for a
// disk with less room.
func TestNoRoomForTheWAL(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", `ulimit -f 20000 && exec "$0" "$@"`,
		leaseholdBin, "serve", "--data-dir", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("leasehold serve with no room for its WAL: %v; want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "leasehold serve: embedded etcd: failed to create WAL: file too large") {
		t.Errorf("no one-line error naming the WAL:\n%s", out)
	}
	if strings.Contains(string(out), "goroutine ") || strings.Contains(string(out), "panic:") {
		t.Errorf("a stack trace:\n%s", out)
	}
}
