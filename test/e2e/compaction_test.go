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
	"k8s.io/utils/ptr"
)

// TestCompactionByWrites: with --etcd-compaction-writes, history is
// compacted once that many writes have been made, long before the
// interval: a list at a resourceVersion from before them is 410 Gone,
// one at a resourceVersion since the last mark still answers, and
// /metrics counts the compaction by its trigger.
func TestCompactionByWrites(t *testing.T) {
	t.Parallel()
	needKubectl(t)
	s := newServer(t, "--etcd-compaction-writes", "100", "--etcd-compaction-interval", "1h")
	cs := s.clientset(t)
	leases := cs.CoordinationV1().Leases("default")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "churn"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("e2e"), LeaseTransitions: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := l.ResourceVersion
	listAt := func(rv string) error {
		_, err := leases.List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		return err
	}
	if err := listAt(first); err != nil {
		t.Fatalf("a list at the first resourceVersion before any compaction: %v", err)
	}
	// Renew until the compactor has turned twice: the second turn compacts
	// to the first's mark, past the first resourceVersion. The compactor
	// counts writes every second.
	writes := 0
	eventually(t, time.Minute, func() error {
		for range 50 {
			l.Spec.LeaseTransitions = ptr.To(*l.Spec.LeaseTransitions + 1)
			if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update %d: %v", writes, err)
			}
			writes++
		}
		err := listAt(first)
		if err == nil {
			return fmt.Errorf("a list at %s still answers after %d writes", first, writes)
		}
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("a list at a compacted resourceVersion: %v, want 410 Gone", err)
		}
		return nil
	})
	if err := listAt(l.ResourceVersion); err != nil {
		t.Errorf("a list at the latest resourceVersion %s: %v", l.ResourceVersion, err)
	}
	out := s.kubectl(t, "get", "--raw", "/metrics")
	if !strings.Contains(out, "\nleasehold_storage_compactions_total{trigger=\"writes\"} ") {
		t.Errorf("/metrics counts no compaction by writes:\n%s", grepLines(out, "leasehold_storage_compactions_total"))
	}
	if strings.Contains(out, "\nleasehold_storage_compactions_total{trigger=\"interval\"} ") {
		t.Errorf("/metrics counts a compaction by the interval of an hour:\n%s", grepLines(out, "leasehold_storage_compactions_total"))
	}
}
