package registry

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestSameMetadata(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	later := metav1.NewTime(at.Add(time.Second))
	base := func() *metav1.ObjectMeta {
		return &metav1.ObjectMeta{
			Name: "n", Namespace: "kube-node-lease",
			Labels: map[string]string{"a": "b"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: "n", UID: "u1", Controller: ptr.To(true),
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "agent", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
				Time: &at, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)},
			}},
		}
	}
	tests := []struct {
		name   string
		change func(m *metav1.ObjectMeta)
		same   bool
	}{
		{"identical", func(*metav1.ObjectMeta) {}, true},
		{"empty and nil lists agree", func(m *metav1.ObjectMeta) { m.Finalizers = []string{} }, true},
		{"equal times in other zones", func(m *metav1.ObjectMeta) {
			t := metav1.NewTime(at.In(time.FixedZone("x", 3600)))
			m.ManagedFields[0].Time = &t
		}, true},
		{"label", func(m *metav1.ObjectMeta) { m.Labels["a"] = "c" }, false},
		{"owner uid", func(m *metav1.ObjectMeta) { m.OwnerReferences[0].UID = "u2" }, false},
		{"owner controller unset", func(m *metav1.ObjectMeta) { m.OwnerReferences[0].Controller = nil }, false},
		{"owner blockOwnerDeletion", func(m *metav1.ObjectMeta) { m.OwnerReferences[0].BlockOwnerDeletion = ptr.To(false) }, false},
		{"no owners", func(m *metav1.ObjectMeta) { m.OwnerReferences = nil }, false},
		{"manager time", func(m *metav1.ObjectMeta) { m.ManagedFields[0].Time = &later }, false},
		{"manager time unset", func(m *metav1.ObjectMeta) { m.ManagedFields[0].Time = nil }, false},
		{"manager fields", func(m *metav1.ObjectMeta) { m.ManagedFields[0].FieldsV1 = &metav1.FieldsV1{Raw: []byte(`{}`)} }, false},
		{"manager fields unset", func(m *metav1.ObjectMeta) { m.ManagedFields[0].FieldsV1 = nil }, false},
		{"manager name", func(m *metav1.ObjectMeta) { m.ManagedFields[0].Manager = "other" }, false},
		{"manager subresource", func(m *metav1.ObjectMeta) { m.ManagedFields[0].Subresource = "status" }, false},
		{"finalizer", func(m *metav1.ObjectMeta) { m.Finalizers = []string{"x"} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := base(), base()
			tt.change(b)
			if got := SameMetadata(a, b); got != tt.same {
				t.Errorf("SameMetadata = %v, want %v", got, tt.same)
			}
			if got := SameMetadata(b, a); got != tt.same {
				t.Errorf("SameMetadata (swapped) = %v, want %v", got, tt.same)
			}
		})
	}
}
