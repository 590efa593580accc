package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestCommitDelay: with --etcd-commit-delay, once writes come often,
// writes that arrive together share one etcd transaction (one revision:
// resourceVersions that differ in their last three digits alone, the
// place of each change in it), each is answered once committed, and each
// survives a restart with the resourceVersion it was answered.
func TestCommitDelay(t *testing.T) {
	t.Parallel()
	s := newServer(t, "--etcd-commit-delay", "500ms")
	cs := s.clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// revision is the etcd revision of resourceVersion rv.
	revision := func(rv string) int64 {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil {
			t.Fatalf("resourceVersion %q: %v", rv, err)
		}
		return n / 1000
	}
	// createAll creates n leases at once and returns their resourceVersions.
	createAll := func(prefix string, n int) []string {
		rvs := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				l, err := cs.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("e2e")},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Errorf("create %s-%d: %v", prefix, i, err)
					return
				}
				rvs[i] = l.ResourceVersion
			})
		}
		wg.Wait()
		return rvs
	}
	// A lone write after the server starts does not wait for company; a
	// burst shows the server that writes come often.
	createAll("burst", 30)
	// The server's own lone writes (its Leases' renewals) open windows of
	// their own, and one may close while the five arrive: a few tries.
	const n = 5
	var prefix string
	var rvs []string
	for try := range 3 {
		prefix = fmt.Sprintf("gathered-%d", try)
		if rvs = createAll(prefix, n); t.Failed() {
			return
		}
		if !slices.ContainsFunc(rvs, func(rv string) bool { return revision(rv) != revision(rvs[0]) }) {
			break
		}
		t.Logf("try %d: the leases were written at resourceVersions %q", try, rvs)
	}
	for i, rv := range rvs {
		if revision(rv) != revision(rvs[0]) {
			t.Errorf("lease %d was written at resourceVersion %s, lease 0 at %s: not one transaction", i, rv, rvs[0])
		}
	}
	if distinct := slices.Compact(slices.Sorted(slices.Values(rvs))); len(distinct) != n {
		t.Errorf("resourceVersions %q: want one for each change", rvs)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("stopping the server: %v", err)
	}
	s = s.restart(t)
	cs = s.clientset(t)
	for i := range n {
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, fmt.Sprintf("%s-%d", prefix, i), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after a restart, lease %d: %v", i, err)
		}
		if l.ResourceVersion != rvs[i] {
			t.Errorf("after a restart, lease %d is at %s, written at %s", i, l.ResourceVersion, rvs[i])
		}
	}
}
