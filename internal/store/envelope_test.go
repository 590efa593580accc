package store

import (
	"bytes"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/utils/ptr"

	"github.com/leasehold/leasehold/internal/registry"
)

// envelopeKinds returns a Kind of Leases and one of Nodes on a store with
// no etcd: enough to encode and decode.
func envelopeKinds(t testing.TB) (leases, nodes *Kind) {
	t.Helper()
	s := &Store{proto: protobuf.NewSerializer(registry.Scheme, registry.Scheme), cfg: Config{Scheme: registry.Scheme, Logger: slog.New(slog.DiscardHandler), WatchCacheSize: 1}}
	leases = s.Kind(coordinationv1.Resource("leases"), "leases", coordinationv1.SchemeGroupVersion.WithKind("Lease"), true,
		func() runtime.Object { return &coordinationv1.Lease{} }, func() runtime.Object { return &coordinationv1.LeaseList{} })
	nodes = s.Kind(corev1.Resource("nodes"), "minions", corev1.SchemeGroupVersion.WithKind("Node"), false,
		func() runtime.Object { return &corev1.Node{} }, func() runtime.Object { return &corev1.NodeList{} })
	return leases, nodes
}

func sampleLease() *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-node-lease", Name: "node-1", UID: "3c1ad3a4-4a1e-4f55-9a8e-4a57c0d1c5a1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: "bbcdcf80-bd8b-4db1-8f08-a9f4e1a5fecb"}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "leasehold-agent", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
				Time: &metav1.Time{Time: now.Time}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:renewTime":{}}}`)}}},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
	}
}

func sampleNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", UID: "bbcdcf80-bd8b-4db1-8f08-a9f4e1a5fecb", Labels: map[string]string{"kubernetes.io/hostname": "node-1"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}},
	}
}

func mustEncode(t testing.TB, k *Kind, obj runtime.Object) []byte {
	t.Helper()
	b, err := k.encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b.bytes()
}

// field appends one length-delimited protobuf field.
func field(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// envelope builds a "k8s\x00" envelope field by field.
func envelope(fields ...[]byte) []byte {
	return bytes.Join(append([][]byte{ProtobufPrefix}, fields...), nil)
}

func typeMeta(apiVersion, kind string) []byte {
	return field(field(nil, typeMetaAPIVersion, []byte(apiVersion)), typeMetaKind, []byte(kind))
}

// TestDecodeInPlace: what the store writes is decoded in place, to the
// object the serializer gives, which shares no memory with the stored
// bytes; any other envelope is left to the serializer.
func TestDecodeInPlace(t *testing.T) {
	leases, nodes := envelopeKinds(t)
	for _, c := range []struct {
		k   *Kind
		obj runtime.Object
	}{{leases, sampleLease()}, {nodes, sampleNode()}} {
		data := mustEncode(t, c.k, c.obj)
		got, ok, err := c.k.decodeInPlace(data)
		if !ok || err != nil {
			t.Fatalf("%s: what encode wrote was not decoded in place: ok=%v err=%v", c.k.gvk.Kind, ok, err)
		}
		want, _, err := c.k.s.proto.Decode(data, nil, c.k.newObj())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: in place %#v, serializer %#v", c.k.gvk.Kind, got, want)
		}
		if gvk := got.GetObjectKind().GroupVersionKind(); gvk != c.k.gvk {
			t.Fatalf("%s: decoded with kind %v", c.k.gvk.Kind, gvk)
		}
		for i := range data {
			data[i] = 'x'
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the decoded object changed with the bytes it came from", c.k.gvk.Kind)
		}
	}

	raw := mustEncode(t, leases, sampleLease())
	inner, ok := leases.unwrap(raw)
	if !ok {
		t.Fatal("unwrap refused what encode wrote")
	}
	own := typeMeta("coordination.k8s.io/v1", "Lease")
	for name, data := range map[string][]byte{
		"a node":                   mustEncode(t, nodes, sampleNode()),
		"another version":          envelope(field(nil, unknownTypeMeta, typeMeta("coordination.k8s.io/v1beta1", "Lease")), field(nil, unknownRaw, inner)),
		"no kind":                  envelope(field(nil, unknownTypeMeta, field(nil, typeMetaAPIVersion, []byte("coordination.k8s.io/v1"))), field(nil, unknownRaw, inner)),
		"no type":                  envelope(field(nil, unknownRaw, inner)),
		"no object":                envelope(field(nil, unknownTypeMeta, own)),
		"two objects":              envelope(field(nil, unknownTypeMeta, own), field(nil, unknownRaw, inner), field(nil, unknownRaw, inner)),
		"a content encoding":       envelope(field(nil, unknownTypeMeta, own), field(nil, unknownRaw, inner), field(nil, unknownContentEncoding, []byte("gzip"))),
		"a content type":           envelope(field(nil, unknownTypeMeta, own), field(nil, unknownRaw, inner), field(nil, unknownContentType, []byte("application/json"))),
		"an unknown field":         envelope(field(nil, unknownTypeMeta, own), field(nil, unknownRaw, inner), field(nil, 9, nil)),
		"a varint field":           envelope(field(nil, unknownTypeMeta, own), field(nil, unknownRaw, inner), protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 1)),
		"a truncated field":        raw[:len(raw)-1],
		"no prefix":                raw[len(ProtobufPrefix):],
		"a kind named twice":       envelope(field(nil, unknownTypeMeta, append(own, field(nil, typeMetaKind, []byte("Lease"))...)), field(nil, unknownRaw, inner)),
		"JSON":                     []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease"}`),
		"nothing after the prefix": ProtobufPrefix,
		"a place twice":            appendPlace(appendPlace(raw, 1), 2),
	} {
		if _, ok, _ := leases.decodeInPlace(data); ok {
			t.Errorf("%s: decoded in place", name)
		}
	}
}

// TestStoredPlace: a value stored with its place decodes in place to the
// object the serializer decodes from it, which skips the place as an
// unknown field, and tells its place; one without tells place 0.
func TestStoredPlace(t *testing.T) {
	leases, _ := envelopeKinds(t)
	raw := mustEncode(t, leases, sampleLease())
	placed := appendPlace(slices.Clip(raw), 7)
	got, ok, err := leases.decodeInPlace(placed)
	if !ok || err != nil {
		t.Fatalf("a value with its place: decoded in place %v, %v", ok, err)
	}
	want, _, err := leases.s.proto.Decode(placed, nil, &coordinationv1.Lease{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded in place:\n%v\nthe serializer:\n%v", got, want)
	}
	for _, c := range []struct {
		data []byte
		want int
	}{{placed, 7}, {appendPlace(slices.Clip(raw), 998), 998}, {raw, 0}, {raw[:10], 0}, {[]byte("{}"), 0}} {
		if got := storedPlace(c.data); got != c.want {
			t.Errorf("storedPlace of %d bytes: %d, want %d", len(c.data), got, c.want)
		}
	}
}

// FuzzDecodeInPlace: whatever decodeInPlace takes on, the serializer
// decodes to the same object, or fails where it fails.
func FuzzDecodeInPlace(f *testing.F) {
	leases, nodes := envelopeKinds(f)
	raw := mustEncode(f, leases, sampleLease())
	inner, _ := leases.unwrap(raw)
	f.Add(raw)
	f.Add(mustEncode(f, nodes, sampleNode()))
	f.Add(envelope(field(nil, unknownTypeMeta, typeMeta("coordination.k8s.io/v1", "Lease")), field(nil, unknownRaw, inner[:len(inner)/2])))
	f.Add(envelope(field(nil, unknownRaw, inner), field(nil, unknownTypeMeta, typeMeta("v1", "Node"))))
	f.Add([]byte("k8s\x00"))
	f.Add(appendPlace(raw, 7))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, k := range []*Kind{leases, nodes} {
			got, ok, gotErr := k.decodeInPlace(data)
			if !ok {
				continue
			}
			want, _, wantErr := k.s.proto.Decode(data, nil, k.newObj())
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s: in place: %v; serializer: %v", k.gvk.Kind, gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: in place %#v, serializer %#v", k.gvk.Kind, got, want)
			}
		}
	})
}

// TestEncodeKeepsSerializerBytes: a stored value is the serializer's own
// buffer, and the same bytes it writes to any writer, with the
// resourceVersion left out and the object left as it was.
func TestEncodeKeepsSerializerBytes(t *testing.T) {
	leases, nodes := envelopeKinds(t)
	for _, tc := range []struct {
		k   *Kind
		obj runtime.Object
	}{{leases, sampleLease()}, {nodes, sampleNode()}} {
		setResourceVersion(tc.obj, 42)
		before := tc.obj.DeepCopyObject()
		got := mustEncode(t, tc.k, tc.obj)
		if !reflect.DeepEqual(tc.obj, before) {
			t.Errorf("%s: encode changed the object", tc.k.resource)
		}
		plain := tc.obj.DeepCopyObject()
		clearResourceVersion(plain)
		var want bytes.Buffer
		enc := runtime.WithVersionEncoder{Version: tc.k.gvk.GroupVersion(), Encoder: tc.k.s.proto, ObjectTyper: registry.Scheme}
		if err := enc.Encode(plain, &want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s: encode gave\n%q\nthe serializer writes\n%q", tc.k.resource, got, want.Bytes())
		}
		if cap(got) != len(got) {
			t.Errorf("%s: value has spare capacity %d > %d: an append to it could reach past the value", tc.k.resource, cap(got), len(got))
		}
	}
}

// TestEncodedValueCopiesOtherWrites: writes that are not the allocated
// buffer, written whole and first, are copied in order.
func TestEncodedValueCopiesOtherWrites(t *testing.T) {
	var v encodedValue
	buf := v.Allocate(8)
	copy(buf, "abcdefgh")
	v.Write(buf[:3])
	v.Write([]byte("XY"))
	buf[0] = 'z' // the copy no longer follows the buffer
	if got := string(v.bytes()); got != "abcXY" {
		t.Errorf("after a kept write and another: %q, want %q", got, "abcXY")
	}
	var w encodedValue
	w.Allocate(4)
	w.Write([]byte("elsewhere"))
	if got := string(w.bytes()); got != "elsewhere" {
		t.Errorf("a write of another slice: %q", got)
	}
	var a encodedValue
	first := a.Allocate(3)
	copy(first, "one")
	a.Write(first)
	second := a.Allocate(3)
	copy(second, "two")
	a.Write(second)
	if got := string(a.bytes()); got != "onetwo" {
		t.Errorf("two buffers, each written whole: %q", got)
	}
	var e encodedValue
	if got := e.bytes(); len(got) != 0 {
		t.Errorf("nothing written: %q", got)
	}
}

// TestEncodedValueRelease: a released value's buffer is zeroed before it
// serves another object, and what is encoded into it then is whole.
func TestEncodedValueRelease(t *testing.T) {
	leases, _ := envelopeKinds(t)
	l := sampleLease()
	want := append([]byte(nil), mustEncode(t, leases, l)...)
	for range 3 {
		v, err := leases.encode(l)
		if err != nil {
			t.Fatal(err)
		}
		got := v.bytes()
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded with a recycled buffer:\n%q\nwant\n%q", got, want)
		}
		if v.pooled == nil {
			t.Fatal("a lease was not encoded into a pooled buffer")
		}
		v.release()
		if !bytes.Equal(got, make([]byte, len(got))) {
			t.Fatalf("after release the value reads %q, want zeros", got)
		}
		v.release() // a second release is harmless
	}
	var none *encodedValue
	none.release()
}

// BenchmarkEncode encodes a node lease as the store writes it to etcd
// ("kept"), and as the serializer writes it to a bytes.Buffer ("copied",
// what the store did before).
func BenchmarkEncode(b *testing.B) {
	leases, _ := envelopeKinds(b)
	l := sampleLease()
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, err := leases.encode(l)
			if err != nil {
				b.Fatal(err)
			}
			v.release()
		}
	})
	b.Run("copied", func(b *testing.B) {
		enc := runtime.WithVersionEncoder{Version: leases.gvk.GroupVersion(), Encoder: leases.s.proto, ObjectTyper: registry.Scheme}
		b.ReportAllocs()
		for b.Loop() {
			var buf bytes.Buffer
			if err := enc.Encode(l, &buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}
