package store

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
//     key anyway, and the name ends it);
//   - strings that repeat the object's own name, which point at its name:
//     a Node's hostname label and address, a node Lease's holder and the
//     name of the Node that owns it (the kind's StringSharing names those
//     of its own fields);
//   - managedFields' timestamps, which have a resolution of a second:
//     the writes of one second share one. This table holds recent times
//     only: once full, it starts again empty;
//   - owner references' controller and blockOwnerDeletion flags.
//
// What is the object's own and shared with no other (its key, uid and
// resourceVersion, its owners' uids, and what the kind's StringSharing
// names as its own) it packs into one string of its own: one heap object
// where there were several, so that the collector, following the
// object's pointers, reads one place in the heap instead of one for each.
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

	// name is the name of the object being shared. commons, nameds and
	// owns collect the strings kind names, through collectCommon,
	// collectNamed and collectOwn (made once), until they are shared.
	name                                    string
	commons, nameds, owns                   []*string
	collectCommon, collectNamed, collectOwn func(*string)
}

// StringSharing names the strings of obj's own fields that can be shared:
// it calls common with those that most objects of its kind have in common,
// named with those that usually repeat obj's name, and own with those
// that are obj's alone (a machine's IDs), which are packed with its key.
type StringSharing func(obj runtime.Object, common, named, own func(*string))

const (
	maxFieldSets     = 1024
	maxSharedStrings = 4096
	maxSharedTimes   = 4096
)

func newSharer() *sharer {
	s := &sharer{fields: map[string]*metav1.FieldsV1{}, strings: map[string]string{}, labelValues: map[string]string{}, times: map[time.Time]*metav1.Time{}}
	s.collectCommon = func(p *string) { s.commons = append(s.commons, p) }
	s.collectNamed = func(p *string) { s.nameds = append(s.nameds, p) }
	s.collectOwn = func(p *string) { s.owns = append(s.owns, p) }
	return s
}

// share has obj, about to be cached under key, share what it can, and
// returns the key to cache it under: a copy in obj's own packed string.
func (s *sharer) share(obj runtime.Object, key string) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return key
	}
	s.commons, s.nameds, s.owns = s.commons[:0], s.nameds[:0], s.owns[:0]
	if s.kind != nil {
		s.kind(obj, s.collectCommon, s.collectNamed, s.collectOwn)
	}
	key = s.pack(m, key)
	if name := m.GetName(); len(key) > len(name) && key[len(key)-len(name)-1] == '/' && key[len(key)-len(name):] == name {
		m.SetName(key[len(key)-len(name):])
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
	for _, p := range s.commons {
		s.str(p)
	}
	for _, p := range s.nameds {
		s.ownName(p)
	}
	return key
}

// pack copies key, the uid and resourceVersion of m, its owners' uids and
// the strings in s.owns into one new string, points each at its copy
// there, and returns key's copy. What is shared with other objects is
// never among them, so the object holds the packed string alone.
func (s *sharer) pack(m metav1.Object, key string) string {
	uid, rv := string(m.GetUID()), m.GetResourceVersion()
	refs := m.GetOwnerReferences() // the object's own slice
	s.owns = append(s.owns, &key, &uid, &rv)
	for i := range refs {
		s.owns = append(s.owns, (*string)(&refs[i].UID))
	}
	n, size := 0, 0
	for _, p := range s.owns {
		if *p != "" {
			n++
			size += len(*p)
		}
	}
	if n < 2 {
		return key
	}
	var b strings.Builder
	b.Grow(size)
	for _, p := range s.owns {
		b.WriteString(*p)
	}
	packed, at := b.String(), 0
	for _, p := range s.owns {
		l := len(*p)
		if l > 0 {
			*p = packed[at : at+l]
		}
		at += l
	}
	m.SetUID(types.UID(uid))
	m.SetResourceVersion(rv)
	return key
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
