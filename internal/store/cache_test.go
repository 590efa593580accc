package store

import (
	"fmt"
	"testing"
	"unsafe"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	fs := newSharer()
	a, b, c := withFieldSet(`{"f:spec":{}}`), withFieldSet(`{"f:spec":{}}`), withFieldSet(`{"f:metadata":{}}`)
	for _, l := range []*coordinationv1.Lease{a, b, c} {
		fs.share(l, "", nil)
	}
	if fieldSetData(a) != fieldSetData(b) || a.ManagedFields[0].FieldsV1 != b.ManagedFields[0].FieldsV1 {
		t.Error("equal field sets are not shared")
	}
	if fieldSetData(a) == fieldSetData(c) || string(c.ManagedFields[0].FieldsV1.Raw) != `{"f:metadata":{}}` {
		t.Error("a different field set was replaced")
	}
	for i := range 2 * maxFieldSets {
		fs.share(withFieldSet(fmt.Sprintf(`{"f:%d":{}}`, i)), "", nil)
	}
	if len(fs.fields) != maxFieldSets {
		t.Errorf("table holds %d field sets, want at most %d", len(fs.fields), maxFieldSets)
	}
	d := withFieldSet(`{"f:spec":{}}`)
	fs.share(d, "", nil)
	if fieldSetData(d) != fieldSetData(a) {
		t.Error("a full table no longer shares what it holds")
	}
}

// TestStringsShared: equal strings of managedFields and owner references,
// and those the kind names, end up sharing one copy; others keep theirs;
// the table stops growing at its bound.
func TestStringsShared(t *testing.T) {
	s := newSharer()
	s.kind = func(obj runtime.Object, str, _ func(*string)) {
		str(obj.(*coordinationv1.Lease).Spec.HolderIdentity)
	}
	lease := func(holder string) *coordinationv1.Lease {
		l := withFieldSet(`{"f:spec":{}}`)
		// Built from bytes, as a decoder builds them: equal, not shared.
		l.ManagedFields[0].Manager = string([]byte("leasehold-agent"))
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: string([]byte("v1")), Kind: string([]byte("Node")), Name: string([]byte(holder))}}
		l.Spec.HolderIdentity = ptr.To(string([]byte(holder)))
		return l
	}
	a, b, c := lease("node-1"), lease("node-1"), lease("node-2")
	for _, l := range []*coordinationv1.Lease{a, b, c} {
		s.share(l, "", nil)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.ManagedFields[0].Manager, c.ManagedFields[0].Manager) || !same(a.OwnerReferences[0].Kind, c.OwnerReferences[0].Kind) ||
		!same(a.OwnerReferences[0].APIVersion, c.OwnerReferences[0].APIVersion) {
		t.Error("equal managers or owner kinds are not shared")
	}
	if !same(*a.Spec.HolderIdentity, *b.Spec.HolderIdentity) {
		t.Error("a string the kind names is not shared")
	}
	if same(a.OwnerReferences[0].Name, b.OwnerReferences[0].Name) {
		t.Error("a string nobody named was shared")
	}
	if *c.Spec.HolderIdentity != "node-2" || same(*a.Spec.HolderIdentity, *c.Spec.HolderIdentity) {
		t.Error("a different string was replaced")
	}
	for i := range 2 * maxSharedStrings {
		s.share(lease(fmt.Sprintf("node-%d", i+3)), "", nil)
	}
	if len(s.strings) != maxSharedStrings {
		t.Errorf("table holds %d strings, want at most %d", len(s.strings), maxSharedStrings)
	}
	d := lease("node-1")
	s.share(d, "", nil)
	if !same(*d.Spec.HolderIdentity, *a.Spec.HolderIdentity) {
		t.Error("a full table no longer shares what it holds")
	}
}

// TestTimesShared: equal managedFields timestamps share one; a full table
// starts again, so that recent times keep being shared.
func TestTimesShared(t *testing.T) {
	s := newSharer()
	at := func(sec int64) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "agent", Time: ptr.To(metav1.Unix(sec, 0))},
			{Manager: "untimed"},
		}}}
	}
	a, b, c := at(100), at(100), at(101)
	for _, l := range []*coordinationv1.Lease{a, b, c} {
		s.share(l, "", nil)
	}
	if a.ManagedFields[0].Time != b.ManagedFields[0].Time {
		t.Error("equal times are not shared")
	}
	if a.ManagedFields[0].Time == c.ManagedFields[0].Time || c.ManagedFields[0].Time.Unix() != 101 || b.ManagedFields[0].Time.Unix() != 100 {
		t.Error("a different time was replaced")
	}
	if a.ManagedFields[1].Time != nil {
		t.Error("an unset time was set")
	}
	for i := range maxSharedTimes {
		s.share(at(int64(1000+i)), "", nil)
	}
	if len(s.times) > maxSharedTimes {
		t.Errorf("table holds %d times, want at most %d", len(s.times), maxSharedTimes)
	}
	d, e := at(9000), at(9000) // newer than all the table holds
	s.share(d, "", nil)
	s.share(e, "", nil)
	if d.ManagedFields[0].Time != e.ManagedFields[0].Time {
		t.Error("a table that was full no longer shares new times")
	}
}

// TestNameShared: an object's name points into its key; strings that
// repeat the name, in its labels, its owner references and the fields its
// kind names, point at the name; a later version shares the name of the
// version it replaces; other strings keep their own; owner references'
// flags keep their values.
func TestNameShared(t *testing.T) {
	s := newSharer()
	s.kind = func(obj runtime.Object, _, named func(*string)) {
		if h := obj.(*coordinationv1.Lease).Spec.HolderIdentity; h != nil {
			named(h)
		}
	}
	// Built from bytes, as a decoder builds them: equal, not shared.
	str := func(v string) string { return string([]byte(v)) }
	lease := func(name, holder string, controller bool) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{
				Name:   str(name),
				Labels: map[string]string{"kubernetes.io/hostname": str(name), "other": str("other-" + name)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: str(name),
					Controller: ptr.To(controller), BlockOwnerDeletion: ptr.To(!controller)}},
			},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(str(holder))},
		}
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	a, b := lease("node-1", "node-1", true), lease("node-2", "someone-else", false)
	keyA, keyB := str("/leases/ns/node-1"), str("/leases/ns/other-node-2")
	s.share(a, keyA, nil)
	s.share(b, keyB, nil)
	if a.Name != "node-1" || !same(a.Name, keyA[len(keyA)-len("node-1"):]) {
		t.Errorf("name %q does not point into its key", a.Name)
	}
	if b.Name != "node-2" || unsafe.StringData(b.Name) == unsafe.StringData(keyB[len(keyB)-len("node-2"):]) {
		t.Errorf("name %q points into a key that does not end with /node-2", b.Name)
	}
	if !same(a.Labels["kubernetes.io/hostname"], a.Name) || !same(a.OwnerReferences[0].Name, a.Name) || !same(*a.Spec.HolderIdentity, a.Name) {
		t.Error("a string repeating the name does not share it")
	}
	if *b.Spec.HolderIdentity != "someone-else" || same(b.Labels["other"], b.Name) || b.Labels["other"] != "other-node-2" {
		t.Error("a string other than the name was changed")
	}
	ra, rb := a.OwnerReferences[0], b.OwnerReferences[0]
	if !*ra.Controller || *ra.BlockOwnerDeletion || *rb.Controller || !*rb.BlockOwnerDeletion {
		t.Error("owner reference flags changed value")
	}
	if ra.Controller != rb.BlockOwnerDeletion || ra.BlockOwnerDeletion != rb.Controller {
		t.Error("equal owner reference flags are not shared")
	}
	// A later version of a shares the first one's name, and so its key,
	// not the key it came with; and its uid.
	a.UID = types.UID(str("uid-1"))
	a2, keyA2 := lease("node-1", "node-1", true), str(keyA)
	a2.UID = types.UID(str("uid-1"))
	s.share(a2, keyA2, a)
	if !same(a2.Name, a.Name) || !same(*a2.Spec.HolderIdentity, a.Name) || !same(a2.OwnerReferences[0].Name, a.Name) {
		t.Error("a later version does not share its first version's name")
	}
	if !same(string(a2.UID), string(a.UID)) {
		t.Error("a later version does not share its first version's uid")
	}
	a3 := lease("node-1", "node-1", true)
	a3.UID = "uid-2" // deleted and created again in one batch of events
	s.share(a3, str(keyA), a)
	if a3.UID != "uid-2" {
		t.Errorf("uid %q taken from the version before, another object", a3.UID)
	}
	// A version whose name differs (it cannot: a key names one object)
	// keeps its own.
	other := lease("node-9", "node-9", true)
	s.share(other, str("/leases/ns/node-9"), a)
	if other.Name != "node-9" || same(other.Name, a.Name) {
		t.Errorf("name %q taken from another object", other.Name)
	}
	c := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "c", OwnerReferences: []metav1.OwnerReference{{Name: "x"}}}}
	s.share(c, "", nil)
	if c.OwnerReferences[0].Controller != nil || c.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Error("unset owner reference flags were set")
	}
}

// TestLabelsShared: label keys and common values end up sharing one copy;
// values unique to each object fill a table of their own and leave the
// table of other strings room for what objects have in common.
func TestLabelsShared(t *testing.T) {
	s := newSharer()
	node := func(host string) *coordinationv1.Lease {
		// Built from bytes, as a decoder builds them: equal, not shared.
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			string([]byte("kubernetes.io/arch")):     string([]byte("amd64")),
			string([]byte("kubernetes.io/hostname")): string([]byte(host)),
		}}}
	}
	key := func(l *coordinationv1.Lease, k string) string {
		for kk := range l.Labels {
			if kk == k {
				return kk
			}
		}
		t.Fatalf("label %s is gone", k)
		return ""
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	a, b := node("host-a"), node("host-b")
	s.share(a, "", nil)
	s.share(b, "", nil)
	if !same(key(a, "kubernetes.io/arch"), key(b, "kubernetes.io/arch")) || !same(key(a, "kubernetes.io/hostname"), key(b, "kubernetes.io/hostname")) {
		t.Error("equal label keys are not shared")
	}
	if !same(a.Labels["kubernetes.io/arch"], b.Labels["kubernetes.io/arch"]) {
		t.Error("equal label values are not shared")
	}
	if a.Labels["kubernetes.io/hostname"] != "host-a" || b.Labels["kubernetes.io/hostname"] != "host-b" || len(a.Labels) != 2 {
		t.Errorf("labels changed: %v, %v", a.Labels, b.Labels)
	}
	for i := range 2 * maxSharedStrings {
		s.share(node(fmt.Sprintf("host-%d", i)), "", nil)
	}
	if len(s.labelValues) != maxSharedStrings {
		t.Errorf("label value table holds %d strings, want at most %d", len(s.labelValues), maxSharedStrings)
	}
	if len(s.strings) != 2 {
		t.Errorf("hostnames reached the table of other strings: it holds %d", len(s.strings))
	}
}
