package registry

import (
	"bytes"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// nodeLease is a lease as a node agent keeps it: owned by its Node, with
// the agent's managedFields entry.
func nodeLease() *coordinationv1.Lease {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: "node-1", Namespace: "kube-node-lease", UID: "9a2f", ResourceVersion: "41",
			CreationTimestamp: at,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "77c1",
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "leasehold-agent", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "coordination.k8s.io/v1", Time: &at, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:ownerReferences":{".":{},"k:{\"uid\":\"77c1\"}":{}}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`)},
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("node-1"),
			LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime:            &metav1.MicroTime{Time: at.Time},
		},
	}
}

// BenchmarkRenewalChecks is the per-renewal work of the registry: which
// fields changed (for the managedFields fast path) and the update's
// validation.
func BenchmarkRenewalChecks(b *testing.B) {
	old := nodeLease()
	renewed := nodeLease()
	renewed.Spec.RenewTime = &metav1.MicroTime{Time: old.Spec.RenewTime.Add(10 * time.Second)}
	b.ReportAllocs()
	for b.Loop() {
		paths, ok := Leases.ChangedFields(renewed, old)
		if !ok || len(paths) != 1 {
			b.Fatalf("ChangedFields = %v, %v", paths, ok)
		}
		if errs := ValidateObjectMetaUpdate(Leases, &renewed.ObjectMeta, &old.ObjectMeta); len(errs) > 0 {
			b.Fatal(errs)
		}
		if errs := Leases.ValidateUpdate(renewed, old); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}

// BenchmarkStatusPostChecks is the registry's work for an agent's periodic
// node status post: which fields changed (the heartbeats alone, for the
// managedFields fast path) and the update's validation.
func BenchmarkStatusPostChecks(b *testing.B) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "77c1", ResourceVersion: "40"}}
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeReady} {
		old.Status.Conditions = append(old.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse,
			LastHeartbeatTime: at, LastTransitionTime: at, Reason: "R", Message: "m"})
	}
	old.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "node-1"}}
	posted := old.DeepCopy()
	for i := range posted.Status.Conditions {
		posted.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(at.Add(5 * time.Minute))
	}
	b.ReportAllocs()
	for b.Loop() {
		if paths, ok := Nodes.ChangedFields(posted, old); !ok || len(paths) != 4 {
			b.Fatalf("ChangedFields = %v, %v", paths, ok)
		}
		if errs := Nodes.ValidateUpdate(posted, old); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}

// BenchmarkLeaseProtobuf decodes and encodes a node lease in protobuf, the
// codec work a renewal does once on the way in and once on the way out.
func BenchmarkLeaseProtobuf(b *testing.B) {
	info, ok := Codecs.SupportedMediaTypes()[0], false
	for _, i := range Codecs.SupportedMediaTypes() {
		if i.MediaType == "application/vnd.kubernetes.protobuf" {
			info, ok = i, true
		}
	}
	if !ok {
		b.Fatal("no protobuf serializer")
	}
	enc := Codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion)
	var encoded bytes.Buffer
	if err := enc.Encode(nodeLease(), &encoded); err != nil {
		b.Fatal(err)
	}
	buf := encoded.Bytes()
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			if _, _, err := info.Serializer.Decode(buf, nil, &coordinationv1.Lease{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		l := nodeLease()
		var w bytes.Buffer
		b.ReportAllocs()
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			w.Reset()
			if err := enc.Encode(l, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}
