package store

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// sharer lets the objects a watch cache holds share equal values instead
// of each holding a copy of its own:
//
//   - managedFields' field sets, byte for byte (the FieldsV1 that holds
//     them too): every Node an agent registers carries the same 600
//     bytes, 60 MB at 100 000 nodes;
//   - the strings most objects of a kind have in common: namespaces,
//     managers, operations and API versions in managedFields, owners' API
//     versions and kinds, label keys, and what the kind's own
//     StringSharing names (a Node's condition reasons and messages, OS and
//     versions);
//   - label values, in a table of their own: a fleet's architectures,
//     operating systems and zones repeat, but a Node's hostname label is
//     its own, and those must not fill the table above;
//   - the object's name, which points into its key (the cache holds the
//     key anyway, and the name ends it), the key of the object's first
//     version;
//   - strings that repeat the object's own name, which point at its name:
//     a Node's hostname label and address, a node Lease's holder and the
//     name of the Node that owns it (the kind's StringSharing names those
//     of its own fields);
//   - managedFields' timestamps, which have a resolution of a second:
//     the writes of one second share one. This table holds recent times
//     only: once full, it starts again empty;
//   - owner references' controller and blockOwnerDeletion flags.
//
// The tables are bounded: once full (as the field sets of Leases soon are,
// each naming its owner's UID) a table only reuses what it holds, except
// the table of times. Objects must not be shared yet when they pass
// through; cached objects are never modified, so sharing is safe from then
// on.
type sharer struct {
	fields      map[string]*metav1.FieldsV1
	strings     map[string]string
	labelValues map[string]string
	times       map[time.Time]*metav1.Time
	kind        StringSharing

	// name is the name of the object being shared; common and named are
	// str and ownName as values made once, for kind.
	name          string
	common, named func(*string)
}

// StringSharing names the strings of obj's own fields that can be shared:
// it calls common with those that most objects of its kind have in common,
// and named with those that usually repeat obj's name.
type StringSharing func(obj runtime.Object, common, named func(*string))

const (
	maxFieldSets     = 1024
	maxSharedStrings = 4096
	maxSharedTimes   = 4096
)

func newSharer() *sharer {
	s := &sharer{fields: map[string]*metav1.FieldsV1{}, strings: map[string]string{}, labelValues: map[string]string{}, times: map[time.Time]*metav1.Time{}}
	s.common, s.named = s.str, s.ownName
	return s
}

// share makes obj, stored at key, share what it can. prev, when set, is
// the version obj replaces, whose name and uid obj then shares: those of
// every version of an object are the first version's strings, which
// outlive it as keys (the name points into the key the cache's map keeps,
// the uid is the garbage collector's key for the object), rather than
// each version keeping copies of its own beside them.
func (s *sharer) share(obj runtime.Object, key string, prev runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	name := m.GetName()
	var pm metav1.Object
	if prev != nil {
		pm, _ = meta.Accessor(prev)
	}
	switch {
	case pm != nil && pm.GetName() == name:
		m.SetName(pm.GetName())
	case len(key) > len(name) && key[len(key)-len(name)-1] == '/' && key[len(key)-len(name):] == name:
		m.SetName(key[len(key)-len(name):])
	}
	if pm != nil && pm.GetUID() == m.GetUID() {
		m.SetUID(pm.GetUID())
	}
	if ns := m.GetNamespace(); ns != "" {
		s.str(&ns)
		m.SetNamespace(ns)
	}
	s.name = m.GetName()
	defer func() { s.name = "" }()
	// Both getters return the object's own slices.
	mf := m.GetManagedFields()
	for i := range mf {
		e := &mf[i]
		s.str(&e.Manager)
		s.str((*string)(&e.Operation))
		s.str(&e.APIVersion)
		s.str(&e.FieldsType)
		s.str(&e.Subresource)
		if t := e.Time; t != nil {
			e.Time = s.time(t)
		}
		if f := e.FieldsV1; f != nil {
			if shared, ok := s.fields[string(f.Raw)]; ok {
				e.FieldsV1 = shared
			} else if len(s.fields) < maxFieldSets {
				s.fields[string(f.Raw)] = f
			}
		}
	}
	labels := m.GetLabels()
	for k, v := range labels {
		sk, sv := k, v
		s.str(&sk)
		if sv == s.name {
			sv = s.name
		} else {
			intern(s.labelValues, &sv)
		}
		// Assigning to a key already present stores the key given as well
		// as the value (Go's maps do this for string keys), so the map
		// keeps its own memory and holds the shared copies.
		labels[sk] = sv
	}
	refs := m.GetOwnerReferences()
	for i := range refs {
		r := &refs[i]
		s.str(&r.APIVersion)
		s.str(&r.Kind)
		s.ownName(&r.Name)
		r.Controller = sharedBool(r.Controller)
		r.BlockOwnerDeletion = sharedBool(r.BlockOwnerDeletion)
	}
	if s.kind != nil {
		s.kind(obj, s.common, s.named)
	}
}

// Shared values of owner references' flags.
var yes, no = true, false

// sharedBool returns a shared pointer to *b's value (nil for nil).
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &yes
	default:
		return &no
	}
}

// time returns the table's copy of *t, adding t, and emptying a full
// table first. Times share only when equal in every field (the location
// included), so that no reader can tell one from the other.
func (s *sharer) time(t *metav1.Time) *metav1.Time {
	if shared, ok := s.times[t.Time]; ok {
		return shared
	}
	if len(s.times) >= maxSharedTimes {
		clear(s.times)
	}
	s.times[t.Time] = t
	return t
}

// ownName points *p at the name of the object being shared, if equal.
func (s *sharer) ownName(p *string) {
	if *p == s.name {
		*p = s.name
	}
}

// str points *p at the table's copy of its value, adding it while the
// table has room.
func (s *sharer) str(p *string) { intern(s.strings, p) }

// intern points *p at table's copy of its value, adding it while table has
// room (maxSharedStrings).
func intern(table map[string]string, p *string) {
	if *p == "" {
		return
	}
	if v, ok := table[*p]; ok {
		*p = v
	} else if len(table) < maxSharedStrings {
		table[*p] = *p
	}
}
