package apiserver

import (
	"encoding/json"
	"errors"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// heartbeatManagedFields is the fast path of managed fields for the update
// that dominates leasehold's traffic: a renewal, in which a client changes
// only fields it alone already owns through an earlier Update. For such an
// update the full computation (structured-merge-diff over the whole object,
// most of the cost of a renewal) can only refresh that manager's timestamp,
// so this does exactly that. It returns false, changing nothing, whenever
// the update is anything else; the caller then runs the field manager.
//
// Conditions, each of which sends the update down the full path:
//   - the resource can list the fields an update changes (ChangedFields);
//   - the request is for the main resource or its status;
//   - the client sent back the managed fields it read, or none;
//   - every changed field is owned by this manager's Update entry for this
//     API version and subresource, and by no other entry;
//   - no field went from set to unset (the resource's hook checks that).
func (s *Server) heartbeatManagedFields(req *request, obj, cur runtime.Object, manager string) bool {
	if req.res.ChangedFields == nil || req.info.subresource != "" && req.info.subresource != "status" {
		return false
	}
	nm, cm := objectMeta(obj), objectMeta(cur)
	if len(nm.ManagedFields) == 0 {
		nm.ManagedFields = cm.ManagedFields
	}
	paths, ok := req.res.ChangedFields(obj, cur)
	if !ok {
		return false
	}
	if len(paths) == 0 {
		return true
	}
	apiVersion := req.res.GroupVersion.String()
	mine := -1
	for i, e := range nm.ManagedFields {
		if e.FieldsV1 == nil {
			continue
		}
		self := e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate &&
			e.Subresource == req.info.subresource && e.APIVersion == apiVersion
		for _, p := range paths {
			owned, err := fieldsHas(e.FieldsV1.Raw, p)
			if err != nil || self && !owned || !self && owned {
				return false
			}
		}
		if self {
			mine = i
		}
	}
	if mine < 0 {
		return false
	}
	entries := make([]metav1.ManagedFieldsEntry, len(nm.ManagedFields))
	copy(entries, nm.ManagedFields)
	now := metav1.NewTime(s.clock.Now().UTC())
	entries[mine].Time = &now
	nm.ManagedFields = entries
	return true
}

// fieldsHas reports whether raw, a FieldsV1 document (a set of field paths
// as structured-merge-diff writes it), has path as a member. path's
// elements are spelled as the set writes them: ["f:spec", "f:renewTime"],
// or ["f:status", "f:conditions", `k:{"type":"Ready"}`, "f:lastHeartbeatTime"]. It reads only the objects on
// the way to path, without building the set: at fleet scale every Lease's
// document is unique (it names its owner's UID), so parsing it whole was a
// tenth of what a renewal allocated, and a cache of parsed sets never hit.
//
// raw is what the store holds, written by the field manager. Where
// fieldsHas answers, it gives the answer of fieldpath.Set.FromJSON and the
// parsed set's Has, and it answers on every document the set writes
// (FuzzFieldsHas checks both). It is stricter about what it skips (only
// objects) and laxer about the keys it skips (not parsed); an error sends
// the update down the full path.
func fieldsHas(raw []byte, path []string) (bool, error) {
	s := fieldsScanner{b: raw}
	found, _, err := s.has(path, 0)
	if err == nil && s.ws() < len(s.b) {
		err = errFieldsSyntax
	}
	return found, err
}

var errFieldsSyntax = errors.New("malformed FieldsV1 document")

// maxFieldsDepth bounds the nesting fieldsScanner follows; Kubernetes
// objects are far shallower.
const maxFieldsDepth = 64

// fieldsScanner reads a FieldsV1 document: JSON objects whose values are
// objects again, the empty object marking a leaf.
type fieldsScanner struct {
	b []byte
	i int
}

// ws skips white space and returns the position of the next byte.
func (s *fieldsScanner) ws() int {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return s.i
		}
	}
	return s.i
}

// next consumes c if it is the next byte after white space.
func (s *fieldsScanner) next(c byte) bool {
	if s.ws() < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// key reads an object key and the ':' after it. It returns the key's bytes
// as written and whether they hold escapes.
func (s *fieldsScanner) key() (k []byte, escaped bool, err error) {
	if !s.next('"') {
		return nil, false, errFieldsSyntax
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			k = s.b[start:s.i]
			s.i++
			if !s.next(':') {
				return nil, false, errFieldsSyntax
			}
			return k, escaped, nil
		case c == '\\':
			escaped = true
			s.i += 2
		default:
			s.i++
		}
	}
	return nil, false, errFieldsSyntax
}

// decode returns the key k (as key returned it) as a string.
func decode(k []byte, escaped bool) (string, bool) {
	if !escaped {
		return string(k), true
	}
	var decoded string
	quoted := make([]byte, 0, len(k)+2)
	quoted = append(append(append(quoted, '"'), k...), '"')
	return decoded, json.Unmarshal(quoted, &decoded) == nil
}

// pathElement reports whether key names a path element of a kind
// structured-merge-diff knows: a field, a value, a key or an index. It
// skips keys of any other kind.
func pathElement(key string) bool {
	return len(key) >= 2 && key[1] == ':' && strings.IndexByte("fvki", key[0]) >= 0
}

// has reads the object at the cursor, the value of some path element E,
// and reports whether path, relative to E, is a member of the set; with an
// empty path, whether E itself is. It also reports whether the object has
// children, keys naming path elements. Membership follows
// fieldpath.Set.FromJSON: E is a member when its object holds "." or no
// children, and when a key appears twice, the later object's children
// replace the earlier's while membership of either counts.
func (s *fieldsScanner) has(path []string, depth int) (found, children bool, err error) {
	if depth > maxFieldsDepth || !s.next('{') {
		return false, false, errFieldsSyntax
	}
	dot := false
	for first := true; !s.next('}'); first = false {
		if !first {
			if !s.next(',') {
				return false, false, errFieldsSyntax
			}
		}
		k, escaped, err := s.key()
		if err != nil {
			return false, false, err
		}
		key, ok := decode(k, escaped)
		if !ok {
			return false, false, errFieldsSyntax
		}
		isElement := pathElement(key)
		switch {
		case key == ".":
			dot = true
			err = s.skip(depth + 1)
		case len(path) > 0 && isElement && key == path[0]:
			var f, c bool
			f, c, err = s.has(path[1:], depth+1)
			if len(path) == 1 {
				found = found || f
			} else if c {
				found = f
			}
		default:
			err = s.skip(depth + 1)
		}
		if err != nil {
			return false, false, err
		}
		children = children || isElement
	}
	if len(path) == 0 {
		found = dot || !children
	}
	return found, children, nil
}

// skip reads the object at the cursor.
func (s *fieldsScanner) skip(depth int) error {
	if depth > maxFieldsDepth || !s.next('{') {
		return errFieldsSyntax
	}
	if s.next('}') {
		return nil
	}
	for {
		if _, _, err := s.key(); err != nil {
			return err
		}
		if err := s.skip(depth + 1); err != nil {
			return err
		}
		if s.next('}') {
			return nil
		}
		if !s.next(',') {
			return errFieldsSyntax
		}
	}
}
