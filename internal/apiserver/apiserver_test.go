package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/apiserver/apiservertest"
)

func TestLeaseRoundTripProtobuf(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	c := s.Client(t, "application/vnd.kubernetes.protobuf")
	ctx := context.Background()
	l, err := c.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x"), LeaseDurationSeconds: ptr.To[int32](10)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := l.DeepCopy()
	l.Spec.HolderIdentity = ptr.To("y")
	if _, err := c.CoordinationV1().Leases("default").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Spec.HolderIdentity = ptr.To("z")
	if _, err := c.CoordinationV1().Leases("default").Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: got %v, want Conflict", err)
	}
	if _, err := c.CoordinationV1().Leases("nope").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("create in missing namespace: got %v, want NotFound", err)
	}
	got, err := c.CoordinationV1().Leases("default").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || *got.Spec.HolderIdentity != "y" {
		t.Fatalf("get: %v %v", got, err)
	}
}

// renewedLease starts a server and creates the lease "renewed", held and
// renewed by the field manager "agent", through a protobuf client.
func renewedLease(t *testing.T) (coordinationv1client.LeaseInterface, *coordinationv1.Lease) {
	t.Helper()
	s := apiservertest.Start(t, apiservertest.Options{})
	leases := s.Client(t, "application/vnd.kubernetes.protobuf").CoordinationV1().Leases("default")
	l, err := leases.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "renewed"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x"), RenewTime: ptr.To(metav1.NowMicro())},
	}, metav1.CreateOptions{FieldManager: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	return leases, l
}

// TestRenewalMetadataValidated: a renewal skips checking metadata it did
// not change, never metadata it did: a renewal that also sets an invalid
// label is a 422 and changes nothing.
func TestRenewalMetadataValidated(t *testing.T) {
	leases, l := renewedLease(t)
	ctx := context.Background()
	as := metav1.UpdateOptions{FieldManager: "agent"}
	var err error
	for i := range 2 {
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(l.Spec.RenewTime.Add(time.Second)))
		if l, err = leases.Update(ctx, l, as); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
	}
	bad := l.DeepCopy()
	bad.Spec.RenewTime = ptr.To(metav1.NewMicroTime(l.Spec.RenewTime.Add(time.Second)))
	bad.Labels = map[string]string{"not a key!": "x"}
	if _, err := leases.Update(ctx, bad, as); !apierrors.IsInvalid(err) {
		t.Fatalf("renewal with an invalid label: got %v, want Invalid", err)
	}
	got, err := leases.Get(ctx, "renewed", metav1.GetOptions{})
	if err != nil || got.ResourceVersion != l.ResourceVersion || len(got.Labels) != 0 {
		t.Fatalf("the rejected renewal changed the lease: %v %v", got, err)
	}
}

// TestRenewalWritesUnchangedDoesNot: a renewal (the heartbeat fast path,
// which tells the store it changed a field) is written; the same lease
// sent back unchanged is not.
func TestRenewalWritesUnchangedDoesNot(t *testing.T) {
	leases, l := renewedLease(t)
	ctx := context.Background()
	as := metav1.UpdateOptions{FieldManager: "agent"}
	var err error
	for i := range 3 {
		before := l.ResourceVersion
		want := metav1.NewMicroTime(l.Spec.RenewTime.Add(time.Second))
		l.Spec.RenewTime = ptr.To(want)
		if l, err = leases.Update(ctx, l, as); err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		got, err := leases.Get(ctx, "renewed", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion == before || got.ResourceVersion != l.ResourceVersion || !got.Spec.RenewTime.Equal(&want) {
			t.Fatalf("renewal %d: stored resourceVersion %s (was %s, answered %s), renewTime %v, want %v",
				i, got.ResourceVersion, before, l.ResourceVersion, got.Spec.RenewTime, want)
		}
	}
	same, err := leases.Update(ctx, l.DeepCopy(), as)
	if err != nil {
		t.Fatal(err)
	}
	if same.ResourceVersion != l.ResourceVersion {
		t.Fatalf("an update that changes nothing was written: resourceVersion %s → %s", l.ResourceVersion, same.ResourceVersion)
	}
}

// TestUnconditionalUpdatesRetry: updates without a resourceVersion (of a
// kind that takes them, as a ClusterRole) that race for one object each
// lose compares in the store and are tried again from the body as sent;
// every one succeeds with what it sent.
func TestUnconditionalUpdatesRetry(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	roles := s.Client(t, "application/vnd.kubernetes.protobuf").RbacV1().ClusterRoles()
	ctx := context.Background()
	if _, err := roles.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "raced"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 5
	errs := make(chan error, writers*each)
	for w := range writers {
		go func() {
			for i := range each {
				holder := fmt.Sprintf("w%d-%d", w, i)
				got, err := roles.Update(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "raced",
					Labels: map[string]string{"holder": holder}}}, metav1.UpdateOptions{})
				if err == nil && got.Labels["holder"] != holder {
					err = fmt.Errorf("update of %s answered holder %v", holder, got.Labels)
				}
				errs <- err
			}
		}()
	}
	for range writers * each {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// A protobuf body may carry a time RFC 3339 cannot write (a year after
// 9999): it is refused as a JSON body holding it would be, 400, and the
// stored Lease stays as it was, readable in JSON. The last instant of 9999
// is taken.
func TestProtobufTimeBeyondJSON(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{})
	ctx := context.Background()
	leases := s.Client(t, "application/vnd.kubernetes.protobuf").CoordinationV1().Leases("default")
	l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	far := metav1.NewMicroTime(time.Date(55190, time.November, 20, 4, 50, 45, 0, time.UTC))
	l.Spec.RenewTime = &far
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("update with renewTime in 55190: %v, want BadRequest", err)
	}
	if want := "spec.renewTime: 55190-11-20T04:50:45Z is outside the years 0000 to 9999"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: coordinationv1.LeaseSpec{AcquireTime: &far}}, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Fatalf("create with acquireTime in 55190: %v, want BadRequest", err)
	}
	inJSON := s.Client(t, "application/json").CoordinationV1().Leases("default")
	got, err := inJSON.Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Spec.RenewTime != nil || got.ResourceVersion != l.ResourceVersion {
		t.Fatalf("after the refusal: %v, %v", got, err)
	}
	if _, err := inJSON.Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused create: %v, want NotFound", err)
	}
	last := metav1.NewMicroTime(time.Date(9999, time.December, 31, 23, 59, 59, 999999000, time.UTC))
	l.Spec.RenewTime = &last
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := inJSON.Get(ctx, "a", metav1.GetOptions{}); err != nil || !got.Spec.RenewTime.Equal(&last) {
		t.Fatalf("renewTime at the end of 9999, read in JSON: %v, %v", got, err)
	}
}
