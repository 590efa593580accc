package apiserver_test

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
