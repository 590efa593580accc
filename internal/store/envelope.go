package store

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// protobufPrefix starts every stored object: Kubernetes' protobuf magic.
var protobufPrefix = []byte("k8s\x00")

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
	raw, ok := k.unwrap(data)
	if !ok {
		return nil, false, nil
	}
	obj = k.newObj()
	u, ok := obj.(unmarshaler)
	if !ok {
		return nil, false, nil
	}
	if err := u.Unmarshal(raw); err != nil {
		return nil, true, err
	}
	// The serializer sets the kind on what it decodes; so does this, with
	// the kind's own strings rather than a new apiVersion per object.
	if tm, isTypeMeta := obj.GetObjectKind().(*metav1.TypeMeta); isTypeMeta {
		tm.APIVersion, tm.Kind = k.apiVersion, k.gvk.Kind
	} else {
		obj.GetObjectKind().SetGroupVersionKind(k.gvk)
	}
	return obj, true, nil
}

// unwrap returns the object's bytes inside a "k8s\x00" envelope whose type
// is k's, without copying them.
func (k *Kind) unwrap(data []byte) ([]byte, bool) {
	b, ok := bytes.CutPrefix(data, protobufPrefix)
	if !ok {
		return nil, false
	}
	var raw []byte
	var seen [unknownContentType + 1]bool
	for len(b) > 0 {
		num, v, n := consumeBytesField(b)
		if n < 0 || num > unknownContentType || seen[num] {
			return nil, false
		}
		seen[num], b = true, b[n:]
		switch num {
		case unknownTypeMeta:
			if !k.isOwnTypeMeta(v) {
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

// isOwnTypeMeta tells whether b, an encoded TypeMeta, names exactly k's
// apiVersion and kind.
func (k *Kind) isOwnTypeMeta(b []byte) bool {
	var apiVersion, kind bool
	for len(b) > 0 {
		num, v, n := consumeBytesField(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == typeMetaAPIVersion && !apiVersion:
			apiVersion = string(v) == k.apiVersion
			if !apiVersion {
				return false
			}
		case num == typeMetaKind && !kind:
			kind = string(v) == k.gvk.Kind
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
