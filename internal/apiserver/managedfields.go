package apiserver

import (
	"bytes"
	"cmp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/leasehold/leasehold/internal/registry"
)

// heartbeatManagedFields is the fast path of managed fields for the updates
// that dominate leasehold's traffic: a renewal, and an agent's periodic
// node status post. In both a client changes a few fields (a renewTime, the
// conditions' heartbeats), each owned by one Update entry alone. The full
// computation (structured-merge-diff over the whole object, most of the
// cost of a renewal) then only moves those fields to the updating manager's
// entry and refreshes its timestamp, so this does exactly that. It returns
// false, changing nothing, whenever the update is anything else; the caller
// then runs the field manager. changed tells that the update changes a
// field (so the object to store differs from cur).
//
// Usually the manager owns the fields already, and only its timestamp
// moves. It does not when a field changes hands, or had no owner: an
// agent's first status post after it created its Node with a status gives
// the heartbeats, which the creation left to no one (a write of a Node's
// main resource owns none of its status), to a new entry for status, and a
// lease taken over by a new holder moves renewTime to the new holder's
// entry.
//
// Conditions, each of which sends the update down the full path:
//   - the resource can list the fields an update changes (ChangedFields);
//   - the request is for the main resource or its status, and names its
//     manager (the field manager calls an unnamed one "unknown");
//   - the client sent back the managed fields it read, or none;
//   - every changed field is owned by one entry at most, an Update entry
//     of the request's API version;
//   - no changed field is one the write leaves as stored (a Node's status
//     through the main resource, its spec through status);
//   - no field went from set to unset (the resource's hook checks that);
//   - when fields change hands, the result keeps within the field
//     manager's limit of Update entries (it would merge the oldest).
func (s *Server) heartbeatManagedFields(req *request, obj, cur runtime.Object, manager string) (heartbeat, changed bool) {
	if req.res.ChangedFields == nil || req.info.subresource != "" && req.info.subresource != "status" || manager == "" {
		return false, false
	}
	nm, cm := objectMeta(obj), objectMeta(cur)
	switch {
	case nm.ManagedFields != nil && len(nm.ManagedFields) == 0:
		// An empty list (not a missing one) resets them: the field
		// manager's to do.
		return false, false
	case len(nm.ManagedFields) == 0:
		nm.ManagedFields = cm.ManagedFields
	}
	if len(nm.ManagedFields) == 0 {
		// An object whose fields nobody manages stays so on update, as
		// the field manager keeps it (it tracks from a create or an apply).
		return false, false
	}
	paths, ok := req.res.ChangedFields(obj, cur)
	if !ok {
		return false, false
	}
	if kept := keptField(req.res, req.info.subresource); kept != "" {
		for _, p := range paths {
			if len(p) > 0 && p[0] == "f:"+kept {
				// The write leaves it as stored, and the field manager
				// gives it to no one.
				return false, false
			}
		}
	}
	if len(paths) == 0 {
		return true, false
	}
	apiVersion := req.res.APIVersion()
	mine := -1
	var ownerBuf [8]int
	owners := ownerBuf[:0] // owners[j]: the entry owning paths[j]
	for range paths {
		owners = append(owners, -1)
	}
	for i, e := range nm.ManagedFields {
		if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate &&
			e.Subresource == req.info.subresource && e.APIVersion == apiVersion {
			mine = i
		}
		if e.FieldsV1 == nil { // the field manager writes none such
			return false, false
		}
		for j, p := range paths {
			owned, err := fieldsHas(e.FieldsV1.Raw, p)
			if err != nil || owned && owners[j] >= 0 {
				return false, false
			}
			if owned {
				owners[j] = i
			}
		}
	}
	moved := false
	for _, o := range owners {
		if o < 0 {
			// Owned by no one, as the heartbeats of a Node created with a
			// status are: the manager gains it.
			moved = true
			continue
		}
		if o != mine {
			if e := &nm.ManagedFields[o]; e.Operation != metav1.ManagedFieldsOperationUpdate || e.APIVersion != apiVersion {
				return false, false
			}
			moved = true
		}
	}
	req.renewal = !moved && len(paths) == 1 && slices.Equal(paths[0], registry.LeaseRenewTime)
	now := metav1.NewTime(s.clock.Now().UTC())
	var entries []metav1.ManagedFieldsEntry
	if moved {
		if entries = moveManagedFields(nm.ManagedFields, paths, owners, mine, manager, apiVersion, req.info.subresource); entries == nil {
			return false, false
		}
		mine = len(entries) - 1 // moveManagedFields puts the manager's entry last
	} else {
		entries = make([]metav1.ManagedFieldsEntry, len(nm.ManagedFields))
		copy(entries, nm.ManagedFields)
	}
	entries[mine].Time = &now
	slices.SortFunc(entries, compareManagedFields)
	nm.ManagedFields = entries
	return true, true
}

// moveManagedFields returns a copy of entries in which the paths owned by
// others (owners[j] != mine) belong to the manager's Update entry for
// apiVersion and subresource instead: entries[mine] when mine >= 0, or a
// new entry. The manager's entry comes last, and entries left owning
// nothing are gone, as the field manager leaves them. It returns nil when
// it cannot: a field set it cannot read or write, or more Update entries
// than the field manager keeps.
func moveManagedFields(entries []metav1.ManagedFieldsEntry, paths [][]string, owners []int, mine int, manager, apiVersion, subresource string) []metav1.ManagedFieldsEntry {
	taken := map[int]*fieldpath.Set{}
	gained := fieldpath.NewSet()
	for j, p := range paths {
		fp, err := parseFieldPath(p)
		if err != nil {
			return nil
		}
		gained.Insert(fp)
		if o := owners[j]; o != mine {
			if taken[o] == nil {
				taken[o] = fieldpath.NewSet()
			}
			taken[o].Insert(fp)
		}
	}
	own := metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: apiVersion, FieldsType: "FieldsV1", Subresource: subresource}
	if mine >= 0 {
		own = entries[mine]
		set, err := readFieldSet(own.FieldsV1.Raw)
		if err != nil {
			return nil
		}
		gained = gained.Union(set)
	}
	raw, err := gained.ToJSON()
	if err != nil {
		return nil
	}
	own.FieldsV1 = &metav1.FieldsV1{Raw: raw}
	out := make([]metav1.ManagedFieldsEntry, 0, len(entries)+1)
	updates := 1
	for i, e := range entries {
		if i == mine {
			continue
		}
		if t := taken[i]; t != nil {
			set, err := readFieldSet(e.FieldsV1.Raw)
			if err != nil {
				return nil
			}
			if set = set.Difference(t); set.Empty() {
				continue
			}
			if raw, err = set.ToJSON(); err != nil {
				return nil
			}
			e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
		}
		if e.Operation == metav1.ManagedFieldsOperationUpdate {
			updates++
		}
		out = append(out, e)
	}
	if updates > maxUpdateManagers {
		return nil
	}
	return append(out, own)
}

// maxUpdateManagers is how many Update entries the field manager keeps
// before it merges the oldest (DefaultMaxUpdateManagers of its internal
// package).
const maxUpdateManagers = 10

func readFieldSet(raw []byte) (*fieldpath.Set, error) {
	set := &fieldpath.Set{}
	return set, set.FromJSON(bytes.NewReader(raw))
}

// compareManagedFields orders entries as the field manager writes them:
// by operation, then time (to the second), manager, API version and
// subresource.
func compareManagedFields(p, q metav1.ManagedFieldsEntry) int {
	var ps, qs int64
	if p.Time != nil {
		ps = p.Time.Unix()
	}
	if q.Time != nil {
		qs = q.Time.Unix()
	}
	return cmp.Or(cmp.Compare(p.Operation, q.Operation), cmp.Compare(ps, qs), cmp.Compare(p.Manager, q.Manager),
		cmp.Compare(p.APIVersion, q.APIVersion), cmp.Compare(p.Subresource, q.Subresource))
}

// fieldsHas reports whether raw, a FieldsV1 document (a set of field paths
// as structured-merge-diff writes it), has path as a member. path's
// elements are spelled as the set writes them: ["f:spec", "f:renewTime"],
// or ["f:status", "f:conditions", `k:{"type":"Ready"}`, "f:lastHeartbeatTime"].
// It reads only the objects on the way to path and skips the rest, without
// building the set: at fleet scale every Lease's document is unique (it
// names its owner's UID), so parsing it whole was a tenth of what a renewal
// allocated, and a cache of parsed sets never hit.
//
// It scans the bytes of a document written as the field manager writes it
// (see fieldsScanner), without allocating, and leaves any other to
// fieldpath.Set.FromJSON, so on every document FromJSON accepts it gives
// the parsed set's answer (FuzzFieldsHas checks it). It does not parse the
// path elements it skips, so it may answer where FromJSON would fail on a
// malformed one; raw is what the store holds, written by the field manager.
func fieldsHas(raw []byte, path []string) (bool, error) {
	if found, ok := scanFields(raw, path); ok {
		return found, nil
	}
	set, err := readFieldSet(raw)
	if err != nil {
		return false, err
	}
	fp, err := parseFieldPath(path)
	if err != nil {
		return false, err
	}
	return set.Has(fp), nil
}

// parseFieldPath reads a path spelled as a FieldsV1 document spells it.
func parseFieldPath(path []string) (fieldpath.Path, error) {
	fp := make(fieldpath.Path, len(path))
	for i, el := range path {
		pe, err := fieldpath.DeserializePathElement(el)
		if err != nil {
			return nil, err
		}
		fp[i] = pe
	}
	return fp, nil
}

// scanFields answers fieldsHas for raw written as the field manager writes
// it; ok is false when raw is written otherwise.
func scanFields(raw []byte, path []string) (found, ok bool) {
	s := fieldsScanner{raw: raw}
	found, _, ok = s.member(path, 0)
	return found, ok && s.pos == len(raw)
}

// fieldsScanner reads a FieldsV1 document in the form the field manager
// writes: no whitespace, every value an object, and no escapes in keys
// but \" and \\. That is valid JSON which FromJSON reads as any JSON
// reader does, so the scanner's answer is FromJSON's as long as it
// follows FromJSON's membership rules; it gives up on anything else.
type fieldsScanner struct {
	raw []byte
	pos int
}

// maxFieldsDepth is how deep the scanner goes before it gives up; paths
// in Kubernetes objects are far shallower.
const maxFieldsDepth = 64

// member reads the object at s.pos, the value of some path element E,
// and reports whether path, relative to E, is a member of the set; with
// an empty path, whether E itself is. It also reports whether the object
// has children, keys naming path elements. As in FromJSON, E is a member
// when its object holds "." or no children, and when a key appears twice
// the later object's children replace the earlier's while membership of
// either counts. ok is false when the object is not in the scanner's form.
func (s *fieldsScanner) member(path []string, depth int) (found, children, ok bool) {
	if depth > maxFieldsDepth || !s.next('{') {
		return false, false, false
	}
	dot := false
	for first := true; !s.next('}'); first = false {
		if !first && !s.next(',') {
			return false, false, false
		}
		key, ok := s.key()
		if !ok || !s.next(':') {
			return false, false, false
		}
		// A field, a value, a key or an index; FromJSON drops other kinds.
		isElement := len(key) >= 2 && key[1] == ':' && strings.IndexByte("fvki", key[0]) >= 0
		if len(path) > 0 && isElement && keyIs(key, path[0]) {
			f, c, ok := s.member(path[1:], depth+1)
			if !ok {
				return false, false, false
			}
			if len(path) == 1 {
				found = found || f
			} else if c {
				found = f
			}
		} else {
			if _, _, ok := s.member(nil, depth+1); !ok {
				return false, false, false
			}
			dot = dot || string(key) == "."
		}
		children = children || isElement
	}
	if len(path) == 0 {
		found = dot || !children
	}
	return found, children, true
}

// next consumes c if it comes next.
func (s *fieldsScanner) next(c byte) bool {
	if s.pos < len(s.raw) && s.raw[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

// key reads a string and returns it as written, between its quotes.
func (s *fieldsScanner) key() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.pos
	for s.pos < len(s.raw) {
		switch c := s.raw[s.pos]; {
		case c == '"':
			s.pos++
			return s.raw[start : s.pos-1], true
		case c == '\\':
			if s.pos+1 == len(s.raw) || s.raw[s.pos+1] != '"' && s.raw[s.pos+1] != '\\' {
				return nil, false
			}
			s.pos += 2
		case c < ' ':
			return nil, false
		default:
			s.pos++
		}
	}
	return nil, false
}

// keyIs reports whether key, as the scanner returned it, spells name.
func keyIs(key []byte, name string) bool {
	j := 0
	for i := 0; i < len(key); i, j = i+1, j+1 {
		if key[i] == '\\' {
			i++
		}
		if j == len(name) || key[i] != name[j] {
			return false
		}
	}
	return j == len(name)
}
