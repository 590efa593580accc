package registry

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestEqualLeaseSpecs checks EqualLeaseSpecs against equality.Semantic,
// which it stands in for, on a change to each field.
func TestEqualLeaseSpecs(t *testing.T) {
	at := metav1.NewMicroTime(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC))
	base := func() *coordinationv1.LeaseSpec {
		return &coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](40),
			AcquireTime: ptr.To(at), RenewTime: ptr.To(at), LeaseTransitions: ptr.To[int32](1),
			Strategy:        ptr.To(coordinationv1.OldestEmulationVersion),
			PreferredHolder: ptr.To("b"),
		}
	}
	tests := []struct {
		name   string
		change func(s *coordinationv1.LeaseSpec)
		equal  bool
	}{
		{"identical", func(*coordinationv1.LeaseSpec) {}, true},
		{"equal times in other zones", func(s *coordinationv1.LeaseSpec) {
			s.RenewTime = ptr.To(metav1.NewMicroTime(at.In(time.FixedZone("x", 3600))))
		}, true},
		{"empty", func(s *coordinationv1.LeaseSpec) { *s = coordinationv1.LeaseSpec{} }, false},
		{"holder", func(s *coordinationv1.LeaseSpec) { s.HolderIdentity = ptr.To("c") }, false},
		{"holder unset", func(s *coordinationv1.LeaseSpec) { s.HolderIdentity = nil }, false},
		{"duration", func(s *coordinationv1.LeaseSpec) { s.LeaseDurationSeconds = ptr.To[int32](41) }, false},
		{"acquire time", func(s *coordinationv1.LeaseSpec) {
			s.AcquireTime = ptr.To(metav1.NewMicroTime(at.Add(time.Microsecond)))
		}, false},
		{"renew time", func(s *coordinationv1.LeaseSpec) { s.RenewTime = ptr.To(metav1.NewMicroTime(at.Add(time.Second))) }, false},
		{"renew time unset", func(s *coordinationv1.LeaseSpec) { s.RenewTime = nil }, false},
		{"transitions", func(s *coordinationv1.LeaseSpec) { s.LeaseTransitions = ptr.To[int32](2) }, false},
		{"strategy", func(s *coordinationv1.LeaseSpec) {
			s.Strategy = ptr.To(coordinationv1.CoordinatedLeaseStrategy("Other"))
		}, false},
		{"preferred holder", func(s *coordinationv1.LeaseSpec) { s.PreferredHolder = nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := base(), base()
			tt.change(b)
			if got := EqualLeaseSpecs(a, b); got != tt.equal {
				t.Errorf("EqualLeaseSpecs = %v, want %v", got, tt.equal)
			}
			if got, ref := EqualLeaseSpecs(b, a), equality.Semantic.DeepEqual(a, b); got != ref {
				t.Errorf("EqualLeaseSpecs (swapped) = %v, equality.Semantic says %v", got, ref)
			}
		})
	}
	if !EqualLeaseSpecs(&coordinationv1.LeaseSpec{}, &coordinationv1.LeaseSpec{}) {
		t.Error("two empty specs differ")
	}
}

// TestLeaseSharedStrings: a node lease's holder points at its own name, its
// duration and transitions at shared values; another holder is named for
// sharing, and what has no shared copy is left as it was.
func TestLeaseSharedStrings(t *testing.T) {
	lease := func(name, holder string, duration, transitions *int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: duration, LeaseTransitions: transitions}}
	}
	noNamed := func(*string) { t.Error("a node lease's holder named for sharing") }

	a, b := lease("node-a", "node-a", ptr.To[int32](40), ptr.To[int32](0)), lease("node-b", "node-b", ptr.To[int32](40), nil)
	leaseSharedStrings(a, nil, noNamed)
	leaseSharedStrings(b, nil, noNamed)
	if a.Spec.HolderIdentity != &a.Name || *a.Spec.HolderIdentity != "node-a" {
		t.Errorf("holder %q does not point at the lease's own name", *a.Spec.HolderIdentity)
	}
	if a.Spec.LeaseDurationSeconds != b.Spec.LeaseDurationSeconds || *a.Spec.LeaseDurationSeconds != 40 {
		t.Error("equal durations not shared")
	}
	if *a.Spec.LeaseTransitions != 0 || b.Spec.LeaseTransitions != nil {
		t.Error("transitions changed")
	}

	long, negative := ptr.To[int32](86400), ptr.To[int32](-1)
	other := lease("leader", "replica-1", long, negative)
	holder := other.Spec.HolderIdentity
	named := 0
	leaseSharedStrings(other, nil, func(p *string) {
		if p != holder {
			t.Error("named a string other than the holder")
		}
		named++
	})
	if named != 1 || other.Spec.HolderIdentity != holder || *holder != "replica-1" {
		t.Errorf("another holder: named %d times, holder %q", named, *other.Spec.HolderIdentity)
	}
	if other.Spec.LeaseDurationSeconds != long || other.Spec.LeaseTransitions != negative || *long != 86400 || *negative != -1 {
		t.Error("a value without a shared copy was replaced")
	}
}
