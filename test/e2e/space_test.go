package e2e

import (
	"context"
	"fmt"
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
	small := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "small"}}
	if _, err := leases.Create(ctx, small, metav1.CreateOptions{}); !apierrors.IsInternalError(err) {
		t.Fatalf("a small write with the database full: %v; want 500", err)
	}

	// A restart on the full database serves: its reads, and the deletions
	// that free it.
	if err := s.stop(); err != nil {
		t.Fatalf("stopping the server: %v", err)
	}
	s = s.restart(t)
	cs = s.clientset(t)
	leases = cs.CoordinationV1().Leases("default")
	if _, err := leases.Create(ctx, small, metav1.CreateOptions{}); !apierrors.IsInternalError(err) {
		t.Fatalf("a write after the restart, nothing deleted: %v; want 500", err)
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
