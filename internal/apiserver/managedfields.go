package apiserver

import (
	"bytes"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
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
//   - the request is for the main resource, not a subresource;
//   - the client sent back the managed fields it read, or none;
//   - every changed field is owned by this manager's Update entry for this
//     API version, and by no other entry;
//   - no field went from set to unset (the resource's hook checks that).
func (s *Server) heartbeatManagedFields(req *request, obj, cur runtime.Object, manager string) bool {
	if req.res.ChangedFields == nil || req.info.subresource != "" {
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
		set, err := s.fieldSets.get(e.FieldsV1.Raw)
		if err != nil {
			return false
		}
		self := e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationUpdate &&
			e.Subresource == "" && e.APIVersion == apiVersion
		for _, p := range paths {
			owned := set.Has(fieldPath(p))
			if self && !owned || !self && owned {
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

// fieldSetCache holds the parsed form of the FieldsV1 documents that
// updates carry. The renewals of a fleet share a handful of shapes (every
// agent owns the same fields), so each is parsed once instead of on every
// renewal. The sets are only read once cached.
type fieldSetCache struct {
	mu   sync.RWMutex
	sets map[string]*fieldpath.Set
}

// maxFieldSets bounds the cache; when full it starts again empty.
const maxFieldSets = 1024

func (c *fieldSetCache) get(raw []byte) (*fieldpath.Set, error) {
	c.mu.RLock()
	set, ok := c.sets[string(raw)]
	c.mu.RUnlock()
	if ok {
		return set, nil
	}
	set = &fieldpath.Set{}
	if err := set.FromJSON(bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sets == nil || len(c.sets) >= maxFieldSets {
		c.sets = make(map[string]*fieldpath.Set)
	}
	c.sets[string(raw)] = set
	return set, nil
}

// fieldPath turns ["f:spec","f:renewTime"] into a structured-merge-diff
// path of field names.
func fieldPath(p []string) fieldpath.Path {
	out := make(fieldpath.Path, 0, len(p))
	for _, f := range p {
		name := f[len("f:"):]
		out = append(out, fieldpath.PathElement{FieldName: &name})
	}
	return out
}
