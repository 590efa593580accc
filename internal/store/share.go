package store

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// sharer lets the objects a watch cache holds share equal values instead
// of each holding a copy of its own:
//
//   - managedFields' field sets, byte for byte: every Node an agent
//     registers carries the same 600 bytes, 60 MB at 100 000 nodes;
//   - the strings most objects of a kind have in common: managers,
//     operations and API versions in managedFields, owners' API versions
//     and kinds, label keys, and what the kind's own StringSharing names
//     (a Node's condition reasons and messages, OS and versions);
//   - label values, in a table of their own: a fleet's architectures,
//     operating systems and zones repeat, but a Node's hostname label is
//     its own, and those must not fill the table above.
//
// The tables are bounded: once full (as the field sets of Leases soon are,
// each naming its owner's UID) a table only reuses what it holds. Objects
// must not be shared yet when they pass through; cached objects are never
// modified, so sharing is safe from then on.
type sharer struct {
	fields      map[string][]byte
	strings     map[string]string
	labelValues map[string]string
	kind        StringSharing
}

// StringSharing points those strings of obj that most objects of its kind
// have in common at shared copies, calling str with each.
type StringSharing func(obj runtime.Object, str func(*string))

const (
	maxFieldSets     = 1024
	maxSharedStrings = 4096
)

func newSharer() *sharer {
	return &sharer{fields: map[string][]byte{}, strings: map[string]string{}, labelValues: map[string]string{}}
}

func (s *sharer) share(obj runtime.Object) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	// Both getters return the object's own slices.
	mf := m.GetManagedFields()
	for i := range mf {
		e := &mf[i]
		s.str(&e.Manager)
		s.str((*string)(&e.Operation))
		s.str(&e.APIVersion)
		s.str(&e.FieldsType)
		s.str(&e.Subresource)
		if f := e.FieldsV1; f != nil {
			if b, ok := s.fields[string(f.Raw)]; ok {
				f.Raw = b
			} else if len(s.fields) < maxFieldSets {
				s.fields[string(f.Raw)] = f.Raw
			}
		}
	}
	labels := m.GetLabels()
	for k, v := range labels {
		sk, sv := k, v
		s.str(&sk)
		intern(s.labelValues, &sv)
		// Assigning to a key already present stores the key given as well
		// as the value (Go's maps do this for string keys), so the map
		// keeps its own memory and holds the shared copies.
		labels[sk] = sv
	}
	refs := m.GetOwnerReferences()
	for i := range refs {
		s.str(&refs[i].APIVersion)
		s.str(&refs[i].Kind)
	}
	if s.kind != nil {
		s.kind(obj, s.str)
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
