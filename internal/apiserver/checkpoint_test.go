package apiserver_test

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

// TestNodeLeaseCheckpoints renews leases through a server with
// --node-lease-checkpoint-interval 20s, as an agent does (each renewal
// from the answer to the one before), and reads what etcd holds after
// each: a renewal less than the interval, and less than half the lease's
// duration, after the stored renewTime is answered at the stored
// resourceVersion and leaves the stored lease as it was; any other change
// is written. The renewTimes are the client's, as an agent's are: the
// server's clock plays no part.
func TestNodeLeaseCheckpoints(t *testing.T) {
	t.Parallel()
	s := apiservertest.Start(t, apiservertest.Options{NodeLeaseCheckpointInterval: 20 * time.Second})
	ctx := context.Background()
	cs := s.Client(t, "application/vnd.kubernetes.protobuf")
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l := createLease(t, cs, corev1.NamespaceNodeLease, "ck-node", 40, t0)

	// renew sends l with renewTime at and checks whether the server wrote
	// it: the answer's resourceVersion moves and etcd holds the new
	// renewTime, or neither.
	renew := func(name string, l *coordinationv1.Lease, at time.Time, change func(*coordinationv1.Lease), written bool) *coordinationv1.Lease {
		t.Helper()
		l = l.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(at))
		if change != nil {
			change(l)
		}
		got, err := cs.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{FieldManager: "agent"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !got.Spec.RenewTime.Equal(l.Spec.RenewTime) {
			t.Errorf("%s: answered renewTime %v, want %v", name, got.Spec.RenewTime, l.Spec.RenewTime)
		}
		stored, err := cs.CoordinationV1().Leases(l.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if moved := got.ResourceVersion != l.ResourceVersion; moved != written {
			t.Errorf("%s: resourceVersion %s → %s; want it moved: %v", name, l.ResourceVersion, got.ResourceVersion, written)
		}
		if stored.ResourceVersion != got.ResourceVersion {
			t.Errorf("%s: answered at resourceVersion %s, etcd holds %s", name, got.ResourceVersion, stored.ResourceVersion)
		}
		if w := stored.Spec.RenewTime.Equal(l.Spec.RenewTime); w != written {
			t.Errorf("%s: etcd holds renewTime %v after a renewal to %v; want it written: %v", name, stored.Spec.RenewTime, l.Spec.RenewTime, written)
		}
		return got
	}

	l = renew("10s after the stored renewTime", l, t0.Add(10*time.Second), nil, false)
	l = renew("19s after", l, t0.Add(19*time.Second), nil, false)
	l = renew("20s after: a checkpoint", l, t0.Add(20*time.Second), nil, true)
	l = renew("10s after the checkpoint", l, t0.Add(30*time.Second), nil, false)
	l = renew("a renewTime before the stored one (the agent's clock went back)", l, t0.Add(15*time.Second), nil, true)
	l = renew("5s after that", l, t0.Add(20*time.Second), nil, false)
	l = renew("a new holder", l, t0.Add(25*time.Second), func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("other") }, true)
	l = renew("a label", l, t0.Add(30*time.Second), func(l *coordinationv1.Lease) { l.Labels = map[string]string{"team": "a"} }, true)
	l = renew("a shorter lease", l, t0.Add(31*time.Second), func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](10) }, true)
	l = renew("4s after, within half the 10s lease", l, t0.Add(35*time.Second), nil, false)
	renew("6s after: past half the lease", l, t0.Add(37*time.Second), nil, true)

	// Another writer's change reaches etcd between two renewals: the
	// agent's next renewal, from an answer it had before, meets a conflict
	// as it would with every renewal written.
	l = createLease(t, cs, corev1.NamespaceNodeLease, "ck-conflict", 40, t0)
	l = renew("renewal", l, t0.Add(10*time.Second), nil, false)
	other := l.DeepCopy()
	other.Labels = map[string]string{"by": "operator"}
	if _, err := leases.Update(ctx, other, metav1.UpdateOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	stale := l.DeepCopy()
	stale.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(12 * time.Second)))
	if _, err := leases.Update(ctx, stale, metav1.UpdateOptions{FieldManager: "agent"}); !apierrors.IsConflict(err) {
		t.Errorf("a renewal from before another writer's change: %v, want a conflict", err)
	}

	// Leases outside kube-node-lease (leader election's, say) have every
	// renewal written.
	l = createLease(t, cs, metav1.NamespaceDefault, "ck-elsewhere", 40, t0)
	renew("a renewal in default", l, t0.Add(10*time.Second), nil, true)

	// A dry run is answered as without the interval, and writes nothing.
	l = createLease(t, cs, corev1.NamespaceNodeLease, "ck-dry", 40, t0)
	dry := l.DeepCopy()
	dry.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(10 * time.Second)))
	got, err := leases.Update(ctx, dry, metav1.UpdateOptions{FieldManager: "agent", DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Spec.RenewTime.Equal(dry.Spec.RenewTime) {
		t.Errorf("dry run answered renewTime %v, want %v", got.Spec.RenewTime, dry.Spec.RenewTime)
	}
}

// TestNodeLeaseCheckpointsByServerClock: an agent whose clock runs slow
// has its renewTimes keep within the interval for longer than the
// interval lasts; the server's clock still has a renewal written once the
// interval, and the second its timestamps are truncated to, have passed
// since the stored lease was.
func TestNodeLeaseCheckpointsByServerClock(t *testing.T) {
	t.Parallel()
	clk := clocktesting.NewFakeClock(time.Now())
	s := apiservertest.Start(t, apiservertest.Options{Clock: clk, NodeLeaseCheckpointInterval: 20 * time.Second})
	cs := s.Client(t, "application/vnd.kubernetes.protobuf")
	leases := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	l := createLease(t, cs, corev1.NamespaceNodeLease, "slow-clock", 40, t0)
	// The create's managedFields timestamp is the field manager's, from
	// the real clock, which has moved on since the fake one was made (by
	// the server's start): a first renewal 20 s on by renewTime is written
	// with a timestamp of the server's clock, from which the steps count.
	first := l.DeepCopy()
	first.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(20 * time.Second)))
	l, err := leases.Update(context.Background(), first, metav1.UpdateOptions{FieldManager: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.ManagedFields; len(got) != 1 || got[0].Time == nil || !got[0].Time.Equal(&metav1.Time{Time: clk.Now().Truncate(time.Second)}) {
		t.Fatalf("the first renewal's managedFields %+v; want one entry at the server's clock, %v", got, clk.Now().Truncate(time.Second))
	}
	for i, step := range []struct {
		server  time.Duration // the server's clock moves on by this first
		written bool
	}{{10 * time.Second, false}, {9 * time.Second, false}, {3 * time.Second, true}, {10 * time.Second, false}} {
		clk.Step(step.server)
		next := l.DeepCopy()
		next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(time.Duration(21+i) * time.Second))) // a second each time
		got, err := leases.Update(context.Background(), next, metav1.UpdateOptions{FieldManager: "agent"})
		if err != nil {
			t.Fatal(err)
		}
		if written := got.ResourceVersion != l.ResourceVersion; written != step.written {
			t.Errorf("renewal %d, the server's clock %v on: written %v, want %v", i+1, step.server, written, step.written)
		}
		l = got
	}
}

// TestNodeLeaseRenewalsWrittenByDefault: without the interval, every
// renewal of a node lease is written.
func TestNodeLeaseRenewalsWrittenByDefault(t *testing.T) {
	t.Parallel()
	s := apiservertest.Start(t, apiservertest.Options{})
	cs := s.Client(t, "application/vnd.kubernetes.protobuf")
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	l := createLease(t, cs, corev1.NamespaceNodeLease, "every-renewal", 40, t0)
	for i := 1; i <= 3; i++ {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(t0.Add(time.Duration(i) * time.Second)))
		got, err := cs.CoordinationV1().Leases(l.Namespace).Update(context.Background(), l, metav1.UpdateOptions{FieldManager: "agent"})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion == l.ResourceVersion {
			t.Fatalf("renewal %d answered at the stored resourceVersion %s", i, l.ResourceVersion)
		}
		l = got
	}
}

// createLease creates a lease held by its name, renewed at t0, as an agent
// creates its node lease.
func createLease(t *testing.T, cs kubernetes.Interface, namespace, name string, seconds int32, t0 time.Time) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(namespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To(seconds),
			RenewTime: ptr.To(metav1.NewMicroTime(t0))},
	}, metav1.CreateOptions{FieldManager: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}
