package apiserver

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// TestHeartbeatManagedFields checks that wherever the fast path applies it
// gives the managed fields the full field manager computes (timestamps
// aside), and that it declines everything else.
func TestHeartbeatManagedFields(t *testing.T) {
	fm, err := managedfields.NewDefaultFieldManager(applyconfigurations.NewTypeConverter(registry.Scheme),
		registry.Scheme, registry.Scheme, registry.Scheme, registry.Leases.GroupVersionKind(), registry.Leases.GroupVersion, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := &Server{clock: clk}
	req := &request{res: registry.Leases}
	now := metav1.NewMicroTime(clk.Now())

	// The agent creates the lease; an operator labels it.
	created := fm.UpdateNoErrors(&coordinationv1.Lease{}, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Namespace: "kube-node-lease"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
	}, "agent").(*coordinationv1.Lease)
	labelled := created.DeepCopy()
	labelled.Labels = map[string]string{"team": "a"}
	base := fm.UpdateNoErrors(created, labelled, "kubectl").(*coordinationv1.Lease)

	later := metav1.NewMicroTime(clk.Now().Add(10 * time.Second))
	tests := []struct {
		name    string
		manager string
		change  func(l *coordinationv1.Lease)
		fast    bool
	}{
		{"renewal by the owner", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, true},
		{"renewal without managedFields in the body", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later; l.ManagedFields = nil }, true},
		{"owner changes two owned fields", "agent", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later; l.Spec.HolderIdentity = ptr.To("m") }, true},
		{"nothing changes", "agent", func(*coordinationv1.Lease) {}, true},
		{"renewal by another manager", "other", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
		{"owner sets a field it does not own yet", "agent", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](1) }, false},
		{"owner unsets a field", "agent", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, false},
		{"label change", "agent", func(l *coordinationv1.Lease) { l.Labels = map[string]string{"team": "b"} }, false},
		{"field owned by someone else", "kubectl", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
		{"unnamed manager owning nothing", "", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &later }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proposed := base.DeepCopy()
			tt.change(proposed)
			fast := proposed.DeepCopy()
			got := s.heartbeatManagedFields(req, fast, base, tt.manager)
			if got != tt.fast {
				t.Fatalf("fast path taken: got %v, want %v", got, tt.fast)
			}
			if !got {
				if !equality.Semantic.DeepEqual(fast, proposed) {
					t.Fatalf("declined, but changed the object")
				}
				return
			}
			full := fm.UpdateNoErrors(base, proposed.DeepCopy(), tt.manager).(*coordinationv1.Lease)
			if w, g := withoutTimes(full.ManagedFields), withoutTimes(fast.ManagedFields); !equality.Semantic.DeepEqual(w, g) {
				t.Fatalf("managedFields differ:\n fast %+v\n full %+v", g, w)
			}
		})
	}
}

func withoutTimes(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, len(entries))
	for i, e := range entries {
		e.Time = nil
		out[i] = e
	}
	return out
}
