package store

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ProtobufPrefix begins every object Kubernetes writes in protobuf, stored
// or sent: its magic number.
var ProtobufPrefix = []byte("k8s\x00")

// The fields of runtime.Unknown and of its TypeMeta, as generated.proto
// numbers them.
const (
	unknownTypeMeta        = 1
	unknownRaw             = 2
	unknownContentEncoding = 3
	unknownContentType     = 4
	typeMetaAPIVersion     = 1
	typeMetaKind           = 2
)

// unknownPlace is leasehold's own field of a stored envelope: a varint,
// the change's place among its kind's changes in its revision (rv.go),
// absent for the first. Kubernetes' decoders skip it as an unknown field.
const unknownPlace = 15

// appendPlace appends the field unknownPlace holding place to a stored
// value.
func appendPlace(b []byte, place int) []byte {
	b = protowire.AppendTag(b, unknownPlace, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(place))
}

// storedPlace is the place a stored value records (appendPlace), 0 when it
// records none.
func storedPlace(data []byte) int {
	b, ok := bytes.CutPrefix(data, ProtobufPrefix)
	if !ok {
		return 0
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0
		}
		b = b[n:]
		if num == unknownPlace && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 || v >= rvPerRevision {
				return 0
			}
			return int(v)
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0
		}
		b = b[n:]
	}
	return 0
}

// unmarshaler is what the generated API types implement.
type unmarshaler interface {
	Unmarshal([]byte) error
}

// decodeInPlace decodes a stored object of k's own type without the
// serializer's runtime.Unknown, which first copies the whole object out of
// its envelope: a third of the CPU of decoding, and as much garbage as the
// object's size, on every object a start reads and every change the watch
// cache applies. It answers ok only for the envelope the store writes
// (k's apiVersion and kind, no content encoding or type, each field once);
// anything else is left to the serializer. The generated Unmarshal copies
// every string and byte slice, so the object does not alias data.
func (k *Kind) decodeInPlace(data []byte) (obj runtime.Object, ok bool, err error) {
	obj = k.newObj()
	if ok, err = DecodeProtobuf(data, k.apiVersion, k.gvk, obj); !ok || err != nil {
		return nil, ok, err
	}
	return obj, true, nil
}

// DecodeProtobuf decodes data, an object of gvk in Kubernetes' protobuf
// envelope, into into, a new object of a generated type: for a stored
// object (decodeInPlace) and for a request body alike. apiVersion is gvk's
// group version as an object spells it (Kind's, or
// registry.Resource.APIVersion), kept by callers rather than joined on
// every call. ok is false, and into untouched, for any other envelope
// (another kind, a content encoding, a field twice); err is the generated
// Unmarshal's, and into then holds part of the object. Either way the
// caller can fall back to the serializer, after resetting into. As the
// serializer does, it sets the kind on what it decodes: a TypeMeta with the
// strings given rather than a new apiVersion per object.
func DecodeProtobuf(data []byte, apiVersion string, gvk schema.GroupVersionKind, into runtime.Object) (ok bool, err error) {
	raw, ok := unwrap(data, apiVersion, gvk.Kind)
	if !ok {
		return false, nil
	}
	u, ok := into.(unmarshaler)
	if !ok {
		return false, nil
	}
	if err := u.Unmarshal(raw); err != nil {
		return true, err
	}
	if tm, isTypeMeta := into.GetObjectKind().(*metav1.TypeMeta); isTypeMeta {
		tm.APIVersion, tm.Kind = apiVersion, gvk.Kind
	} else {
		into.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return true, nil
}

// unwrap returns the object's bytes inside a "k8s\x00" envelope whose type
// is k's, without copying them.
func (k *Kind) unwrap(data []byte) ([]byte, bool) { return unwrap(data, k.apiVersion, k.gvk.Kind) }

// unwrap returns the object's bytes inside a "k8s\x00" envelope naming
// apiVersion and kind, without copying them.
func unwrap(data []byte, apiVersion, kind string) ([]byte, bool) {
	b, ok := bytes.CutPrefix(data, ProtobufPrefix)
	if !ok {
		return nil, false
	}
	var raw []byte
	var seen [unknownContentType + 1]bool
	place := false
	for len(b) > 0 {
		if num, typ, n := protowire.ConsumeTag(b); num == unknownPlace && typ == protowire.VarintType && !place {
			_, vn := protowire.ConsumeVarint(b[n:])
			if vn < 0 {
				return nil, false
			}
			place, b = true, b[n+vn:]
			continue
		}
		num, v, n := consumeBytesField(b)
		if n < 0 || num > unknownContentType || seen[num] {
			return nil, false
		}
		seen[num], b = true, b[n:]
		switch num {
		case unknownTypeMeta:
			if !isTypeMeta(v, apiVersion, kind) {
				return nil, false
			}
		case unknownRaw:
			raw = v
		case unknownContentEncoding, unknownContentType:
			if len(v) != 0 {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return raw, seen[unknownTypeMeta] && seen[unknownRaw]
}

// isTypeMeta tells whether b, an encoded TypeMeta, names exactly
// apiVersion and kind.
func isTypeMeta(b []byte, wantAPIVersion, wantKind string) bool {
	var apiVersion, kind bool
	for len(b) > 0 {
		num, v, n := consumeBytesField(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == typeMetaAPIVersion && !apiVersion:
			apiVersion = string(v) == wantAPIVersion
			if !apiVersion {
				return false
			}
		case num == typeMetaKind && !kind:
			kind = string(v) == wantKind
			if !kind {
				return false
			}
		default:
			return false
		}
	}
	return apiVersion && kind
}

// consumeBytesField reads one length-delimited field from b: its number,
// its value and the bytes read, or n < 0 when b does not start with one.
func consumeBytesField(b []byte) (num protowire.Number, v []byte, n int) {
	num, typ, tn := protowire.ConsumeTag(b)
	if tn < 0 || typ != protowire.BytesType {
		return 0, nil, -1
	}
	v, vn := protowire.ConsumeBytes(b[tn:])
	if vn < 0 {
		return 0, nil, -1
	}
	return num, v, tn + vn
}
