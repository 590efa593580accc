package store

import (
	"fmt"
	"testing"
	"unsafe"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func withFieldSet(raw string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "agent", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}},
		{Manager: "no-fields"},
	}}}
}

func fieldSetData(l *coordinationv1.Lease) *byte {
	return unsafe.SliceData(l.ManagedFields[0].FieldsV1.Raw)
}

// TestFieldSetsShared: objects with the same field sets end up sharing one
// copy, different ones keep theirs, and the table stops growing at its
// bound while it still shares what it holds.
func TestFieldSetsShared(t *testing.T) {
	fs := fieldSets{}
	a, b, c := withFieldSet(`{"f:spec":{}}`), withFieldSet(`{"f:spec":{}}`), withFieldSet(`{"f:metadata":{}}`)
	for _, l := range []*coordinationv1.Lease{a, b, c} {
		fs.share(l)
	}
	if fieldSetData(a) != fieldSetData(b) {
		t.Error("equal field sets are not shared")
	}
	if fieldSetData(a) == fieldSetData(c) || string(c.ManagedFields[0].FieldsV1.Raw) != `{"f:metadata":{}}` {
		t.Error("a different field set was replaced")
	}
	for i := range 2 * maxFieldSets {
		fs.share(withFieldSet(fmt.Sprintf(`{"f:%d":{}}`, i)))
	}
	if len(fs) != maxFieldSets {
		t.Errorf("table holds %d field sets, want at most %d", len(fs), maxFieldSets)
	}
	d := withFieldSet(`{"f:spec":{}}`)
	fs.share(d)
	if fieldSetData(d) != fieldSetData(a) {
		t.Error("a full table no longer shares what it holds")
	}
}
